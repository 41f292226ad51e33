"""y = relu(x * w + b) + r as three kernels, one per torch op: each one is coalesced and runs at the DRAM
roofline, yet together they move 896 MiB (t = x*w+b written, read, rewritten by relu, read again) where
one fused pass moves 384 MiB."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_shift_kernel(x_ptr, w_ptr, b_ptr, t_ptr, total, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    col = offs % cols
    tl.store(
        t_ptr + offs,
        tl.load(x_ptr + offs, mask=mask) * tl.load(w_ptr + col, mask=mask) + tl.load(b_ptr + col, mask=mask),
        mask=mask,
    )


@triton.jit
def relu_kernel(t_ptr, total, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    tl.store(t_ptr + offs, tl.maximum(tl.load(t_ptr + offs, mask=mask), 0.0), mask=mask)


@triton.jit
def add_kernel(t_ptr, r_ptr, y_ptr, total, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    tl.store(y_ptr + offs, tl.load(t_ptr + offs, mask=mask) + tl.load(r_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        x, w, b, r = x.contiguous(), w.contiguous(), b.contiguous(), r.contiguous()
        total, cols = x.numel(), x.shape[1]
        grid = (triton.cdiv(total, 4096),)
        t = torch.empty_like(x)
        scale_shift_kernel[grid](x, w, b, t, total, cols, BLOCK=4096, num_warps=8)
        relu_kernel[grid](t, total, BLOCK=4096, num_warps=8)
        y = torch.empty_like(x)
        add_kernel[grid](t, r, y, total, BLOCK=4096, num_warps=8)
        return y
