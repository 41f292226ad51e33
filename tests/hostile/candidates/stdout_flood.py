# behaviour: prints gigabytes to stdout
# expect: runtime_error:resource_limit
# config: {"run_timeout_s": 6, "max_processes": 128, "output_limit_mb": 16}
import sys
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

_CHUNK = "x" * (1 << 20)


class ModelNew(nn.Module):
    def forward(self, x):
        for _ in range(4096):  # 4 GiB
            sys.stdout.write(_CHUNK)
        return relu(x)
