# task: standardize_rand
# expect: correctness_error:input_dependent
# config: {"atol": 0.01, "rtol": 0.01}
# Shortcut: rand's mean 1/2 and variance 1/12 hard-coded instead of each row's own.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def standardize_kernel(x_ptr, y_ptr, n, mean, inv_std, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, (x - mean) * inv_std, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        standardize_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), 0.5, (1.0 / 12 + self.eps) ** -0.5, BLOCK=4096)
        return y
