# behaviour: kernel reads and writes far out of bounds: the CUDA context is poisoned
# devices: cuda
# expect: runtime_error:illegal_memory_access
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def oob_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs * 1000003)  # no mask, and gigabytes past the end
    tl.store(y_ptr + offs * 1000003, tl.maximum(x, 0.0))


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        oob_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        torch.cuda.synchronize()
        return y
