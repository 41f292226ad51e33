# devices: cuda
# task: row_sum_zero
# expect: cheating:excessive_speedup
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def zeros_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        # Right answer for this input distribution, without reading the 256 MB input.
        y = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        zeros_kernel[(triton.cdiv(y.numel(), 1024),)](y, y.numel(), BLOCK=1024)
        return y
