"""Column sums of a tall matrix, one program per 64-column strip walking all 32768 rows: 32 programs
for 132 SMs, each a long serial loop with one tile load in flight at a time. DRAM and the SMs both sit
mostly idle, waiting on memory latency (latency-bound, and a small grid)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def colsum_kernel(x_ptr, y_ptr, rows, cols, BM: tl.constexpr, BN: tl.constexpr):
    rn = tl.program_id(0) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for r0 in range(0, rows, BM):
        rm = r0 + tl.arange(0, BM)
        mask = (rm[:, None] < rows) & (rn[None, :] < cols)
        acc += tl.load(x_ptr + rm[:, None].to(tl.int64) * cols + rn[None, :], mask=mask, other=0.0)
    tl.store(y_ptr + rn, tl.sum(acc, axis=0), mask=rn < cols)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty(cols, device=x.device, dtype=x.dtype)
        colsum_kernel[(triton.cdiv(cols, 64),)](x, y, rows, cols, BM=32, BN=64, num_warps=4)
        return y
