# task: normalize_max
# defect: host_sync
# line: scale = m.item()
"""y = x / max|x| in two Triton kernels with the maximum brought to the host in between: `.item()` waits
for the first kernel to finish, and the GPU idles while Python reads the value and launches the second."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def absmax_kernel(x_ptr, m_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_max(m_ptr, tl.max(tl.abs(x), axis=0))


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x / scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n = x.numel()
        m = torch.zeros(1, device=x.device, dtype=torch.float32)
        grid = (triton.cdiv(n, 4096),)
        absmax_kernel[grid](x, m, n, BLOCK=4096)
        scale = m.item()
        y = torch.empty_like(x)
        scale_kernel[grid](x, y, n, scale, BLOCK=4096)
        return y
