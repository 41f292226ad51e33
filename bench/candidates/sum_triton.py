"""47_Sum_reduction_over_a_dimension (KernelBench level 1, 128 x 4096 x 4095 float32, sum over dim 1,
keepdim) in Triton: the input seen as (outer, R, inner); each program owns one outer index and a block
of inner columns and walks R in tiles, accumulating in float32 (coalesced loads along inner). A
reduction over the last dim (inner == 1) takes a row kernel instead."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_mid_kernel(x_ptr, y_ptr, R, inner, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    o = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK_I + tl.arange(0, BLOCK_I)
    cmask = cols < inner
    base = o * R * inner
    acc = tl.zeros([BLOCK_R, BLOCK_I], tl.float32)
    for start in range(0, R, BLOCK_R):
        rows = start + tl.arange(0, BLOCK_R).to(tl.int64)
        m = (rows[:, None] < R) & cmask[None, :]
        acc += tl.load(x_ptr + base + rows[:, None] * inner + cols[None, :], mask=m, other=0.0).to(tl.float32)
    tl.store(y_ptr + o * inner + cols, tl.sum(acc, 0).to(y_ptr.dtype.element_ty), mask=cmask)


@triton.jit
def sum_last_kernel(x_ptr, y_ptr, R, BLOCK: tl.constexpr):
    o = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, R, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + o * R + offs, mask=offs < R, other=0.0).to(tl.float32)
    tl.store(y_ptr + o, tl.sum(acc, 0).to(y_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        dim = self.dim % x.dim()
        shape = list(x.shape)
        R = shape[dim]
        outer = 1
        for s in shape[:dim]:
            outer *= s
        inner = 1
        for s in shape[dim + 1 :]:
            inner *= s
        shape[dim] = 1
        y = torch.empty(shape, dtype=x.dtype, device=x.device)
        if outer == 0 or inner == 0:
            return y
        if inner == 1:
            sum_last_kernel[(outer,)](x, y, R, BLOCK=1024)
        else:
            BLOCK_I = min(128, triton.next_power_of_2(inner))
            sum_mid_kernel[(outer, triton.cdiv(inner, BLOCK_I))](x, y, R, inner, BLOCK_R=32, BLOCK_I=BLOCK_I)
        return y
