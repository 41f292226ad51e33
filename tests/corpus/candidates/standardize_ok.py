# task: standardize_rand
# expect: ok
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def standardize_kernel(x_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_row + offs, mask=offs < n_cols, other=0.0)
    mean = tl.sum(acc, 0) / n_cols
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):  # second pass about the mean: no cancellation
        offs = start + tl.arange(0, BLOCK)
        d = tl.where(offs < n_cols, tl.load(x_row + offs, mask=offs < n_cols, other=0.0) - mean, 0.0)
        acc += d * d
    inv_std = 1.0 / tl.sqrt(tl.sum(acc, 0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + offs, mask=offs < n_cols, other=0.0)
        tl.store(y_row + offs, (x - mean) * inv_std, mask=offs < n_cols)


class ModelNew(nn.Module):
    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        standardize_kernel[(x.shape[0],)](x, y, x.shape[1], self.eps, BLOCK=8192)
        return y
