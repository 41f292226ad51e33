# task: scale_odd
# defect: out_of_bounds
# expect: ok
# line: x = tl.load(x_ptr + offs) | tl.store(y_ptr + offs, x * 2.0 + 1.0)
"""y = 2x + 1 in Triton without a mask: the last program's block runs past n (4099 x 1001 is no
multiple of 1024), so it loads and stores past the end of x and y. Every element of y is right."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, x * 2.0 + 1.0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        scale_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
