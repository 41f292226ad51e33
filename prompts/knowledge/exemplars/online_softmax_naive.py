"""Softmax over long rows in three passes, each re-reading the row from DRAM (it does not fit on chip):
the row max, then the sum of exp(x - max), then the output. 4 x 256 MiB of traffic where 3 would do."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_three_pass_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    xr, yr = x_ptr + row * cols, y_ptr + row * cols
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    for c0 in range(0, cols, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        m = tl.maximum(m, tl.load(xr + c, mask=c < cols, other=float("-inf")))
    m_row = tl.max(m, axis=0)
    s = tl.zeros((BLOCK,), tl.float32)
    for c0 in range(0, cols, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        s += tl.exp(tl.load(xr + c, mask=c < cols, other=float("-inf")) - m_row)
    inv = 1.0 / tl.sum(s, axis=0)
    for c0 in range(0, cols, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        x = tl.load(xr + c, mask=c < cols, other=float("-inf"))
        tl.store(yr + c, tl.exp(x - m_row) * inv, mask=c < cols)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        softmax_three_pass_kernel[(rows,)](x, y, cols, BLOCK=4096, num_warps=8)
        return y
