"""23_Softmax (KernelBench level 1, 4096 x 393216 float32) in Triton: three passes per row, in blocks."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * n_cols
    m = tl.full([BLOCK], -float("inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        m = tl.maximum(m, tl.load(x_ptr + base + offs, mask=offs < n_cols, other=-float("inf")))
    mx = tl.max(m, 0)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        s += tl.exp(tl.load(x_ptr + base + offs, mask=offs < n_cols, other=-float("inf")) - mx)
    total = tl.sum(s, 0)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_cols
        v = tl.load(x_ptr + base + offs, mask=mask, other=-float("inf"))
        tl.store(y_ptr + base + offs, tl.exp(v - mx) / total, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=2048)
        return y
