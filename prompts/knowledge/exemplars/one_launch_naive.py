"""y = x * s[:, None] + t[:, None] one row per launch: 2048 launches of a kernel with 128 KiB to do. Each
launch costs microseconds of host time (Triton's launcher, the driver), more than the GPU needs for the
row, so the GPU idles between launches: the forward is launch-bound."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_kernel(x_ptr, s_ptr, t_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    c = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = c < cols
    s = tl.load(s_ptr)
    t = tl.load(t_ptr)
    x = tl.load(x_ptr + c, mask=mask)
    tl.store(y_ptr + c, x * s + t, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, s: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        x, s, t = x.contiguous(), s.contiguous(), t.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        for r in range(rows):  # one launch per row
            row_kernel[(triton.cdiv(cols, 4096),)](x[r], s[r:], t[r:], y[r], cols, BLOCK=4096, num_warps=4)
        return y
