# behaviour: infinite GPU loop on every block of a large grid
# devices: cuda
# expect: runtime_error:timeout
# config: {"run_timeout_s": 15, "max_processes": 128, "output_limit_mb": 16}
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def spin_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    i = tl.program_id(0) * 0
    while i >= 0:  # never false
        i += 1
        if i > 1000:
            i = 0
    tl.store(y_ptr + offs, x, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        spin_kernel[(4096,)](x, y, x.numel(), BLOCK=128)
        return y
