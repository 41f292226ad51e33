# task: row_sum
# defect: global_race
# expect: correctness_error:numerical
# line: tl.store(y_ptr + row, cur + s)
"""Row sums in Triton, four programs per row (row = pid // SPLIT), each loading y[row], adding its part and storing
it back: the four programs of a row run at once and one's store overwrites another's. No tool reports it: Triton
keeps no shared memory of its own here, and racecheck sees shared memory only."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_split_kernel(x_ptr, y_ptr, cols, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    row = pid // SPLIT
    chunk = tl.cdiv(cols, SPLIT)
    start = (pid % SPLIT) * chunk
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for k in range(0, chunk, BLOCK):
        offs = start + k + tl.arange(0, BLOCK)
        mask = (offs < start + chunk) & (offs < cols)
        acc += tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0)
    s = tl.sum(acc, axis=0)
    cur = tl.load(y_ptr + row)
    tl.store(y_ptr + row, cur + s)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.zeros(rows, 1, device=x.device, dtype=x.dtype)
        row_sum_split_kernel[(rows * 4,)](x, y, cols, SPLIT=4, BLOCK=1024)
        return y
