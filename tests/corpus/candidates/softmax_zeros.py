# task: wide_softmax
# expect: correctness_error:numerical
# config: {"atol": 0.01, "rtol": 0.01}
# Shortcut: every softmax value here is below atol, so zeros pass allclose; the relative error norm does not.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def zeros_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        zeros_kernel[(triton.cdiv(y.numel(), 4096),)](y, y.numel(), BLOCK=4096)
        return y
