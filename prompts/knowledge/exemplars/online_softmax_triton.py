"""Softmax over rows too long for the chip (65536 floats) in two passes instead of three: the first pass
keeps a running max m and a running sum s rescaled whenever m grows (online softmax: s = s * exp(m_old -
m_new) + exp(x - m_new)), the second writes exp(x - m) / s. The input is read twice, not three times."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_online_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    xr, yr = x_ptr + row * cols, y_ptr + row * cols
    m = tl.full((BLOCK,), float("-inf"), tl.float32)  # per-lane running max
    s = tl.zeros((BLOCK,), tl.float32)  # per-lane running sum of exp(x - m)
    for c0 in range(0, cols, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        x = tl.load(xr + c, mask=c < cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        alpha = tl.where(m_new == float("-inf"), 0.0, tl.exp(m - m_new))  # -inf - -inf would be NaN
        s = s * alpha + tl.where(m_new == float("-inf"), 0.0, tl.exp(x - m_new))
        m = m_new
    m_row = tl.max(m, axis=0)
    s_row = tl.sum(tl.where(m == float("-inf"), 0.0, s * tl.exp(m - m_row)), axis=0)
    inv = 1.0 / s_row
    for c0 in range(0, cols, BLOCK):
        c = c0 + tl.arange(0, BLOCK)
        x = tl.load(xr + c, mask=c < cols, other=float("-inf")).to(tl.float32)
        tl.store(yr + c, tl.exp(x - m_row) * inv, mask=c < cols)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        softmax_online_kernel[(rows,)](x, y, cols, BLOCK=4096, num_warps=8)
        return y
