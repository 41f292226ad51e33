"""y = x * w + b the slow way: each program takes a block of ONE column, so its lanes are a whole row
(cols * 4 bytes) apart. Every warp-wide load touches 32 different 32-byte sectors to use 4 bytes of each."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def affine_col_kernel(x_ptr, w_ptr, b_ptr, y_ptr, rows, cols, BLOCK: tl.constexpr):
    col = tl.program_id(0)
    r = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = r < rows
    w = tl.load(w_ptr + col)
    b = tl.load(b_ptr + col)
    offs = r.to(tl.int64) * cols + col  # lanes step down a column: uncoalesced
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        x, w, b = x.contiguous(), w.contiguous(), b.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        affine_col_kernel[(cols, triton.cdiv(rows, 1024))](x, w, b, y, rows, cols, BLOCK=1024, num_warps=4)
        return y
