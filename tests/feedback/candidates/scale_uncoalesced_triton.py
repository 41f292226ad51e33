# task: scale_2d
# defect: uncoalesced
# line: x = tl.load(x_ptr + offs, mask=mask)
"""y = 2x + 1 in Triton, each program taking a block of one column: the block's lanes are rows apart."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, rows, cols, BLOCK: tl.constexpr):
    col = tl.program_id(0)
    r = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = r < rows
    offs = r * cols + col  # lanes step down a column: cols * 4 bytes apart
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * 2.0 + 1.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        scale_kernel[(cols, triton.cdiv(rows, 1024))](x, y, rows, cols, BLOCK=1024)
        return y
