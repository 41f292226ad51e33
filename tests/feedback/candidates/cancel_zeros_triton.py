# task: cancel
# defect: fairness_cheat
# line:
"""Zeros: wrong against the float64 reference as against the float32 one (the rule that forgives
the reference's rounding must not forgive this)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def zeros_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        zeros_kernel[(triton.cdiv(x.numel(), 1024),)](y, x.numel(), BLOCK=1024)
        return y
