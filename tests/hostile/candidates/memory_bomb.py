# behaviour: memory bomb: host memory grows 64 MiB at a time until something stops it
# expect: runtime_error:oom
# config: {"run_timeout_s": 60, "memory_limit_gb": 3}
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def relu(x):
    y = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y


class ModelNew(nn.Module):
    def forward(self, x):
        hoard = []
        while True:
            hoard.append(bytearray(64 << 20))  # zero-filled: every page is touched
