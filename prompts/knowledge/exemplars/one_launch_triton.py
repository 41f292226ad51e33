"""y = x * s[:, None] + t[:, None] in ONE launch over the whole matrix: a 2-D grid of BM x BN tiles, each
loading its BM row scales once. The launch costs a few microseconds once per forward, and nothing in
forward waits on the GPU (no .item(), no .cpu(), no synchronize)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_affine_kernel(x_ptr, s_ptr, t_ptr, y_ptr, rows, cols, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask_m = rm < rows
    s = tl.load(s_ptr + rm, mask=mask_m)
    t = tl.load(t_ptr + rm, mask=mask_m)
    mask = mask_m[:, None] & (rn[None, :] < cols)
    offs = rm[:, None].to(tl.int64) * cols + rn[None, :]
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * s[:, None] + t[:, None], mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, s: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        x, s, t = x.contiguous(), s.contiguous(), t.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        BM, BN = 8, 512
        row_affine_kernel[(triton.cdiv(rows, BM), triton.cdiv(cols, BN))](
            x, s, t, y, rows, cols, BM=BM, BN=BN, num_warps=4
        )
        return y
