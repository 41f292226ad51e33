# task: cancel
# defect: fairness_cheat
# line:
"""x rounded to a coarse grid (1/64): close enough to pass a loose check, but 30x further from the
exact result than even this badly rounding reference; the float64 rule must fail it."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def coarse_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.floor(x * 64.0 + 0.5) / 64.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        coarse_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
