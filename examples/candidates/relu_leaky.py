# A failing kernel to repair: a leaky ReLU where the task asks for ReLU (examples/batch/manifest.jsonl).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def leaky_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.1 * x), mask=mask)  # leaky, not relu


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        leaky_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
