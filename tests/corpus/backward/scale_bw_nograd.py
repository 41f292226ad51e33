# expect: correctness_error:no_gradient
# task: scale_bw
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, w_ptr, y_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    w = tl.load(w_ptr + offs % cols, mask=mask)
    tl.store(y_ptr + offs, x * w, mask=mask)


@triton.jit
def col_dot_kernel(g_ptr, x_ptr, out_ptr, rows, cols, BLOCK: tl.constexpr):
    # out[c] = sum_r g[r, c] * x[r, c]: one program per block of columns, walking the rows
    c = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = c < cols
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for r in range(0, rows):
        acc += tl.load(g_ptr + r * cols + c, mask=mask) * tl.load(x_ptr + r * cols + c, mask=mask)
    tl.store(out_ptr + c, acc, mask=mask)


def _scale(x, w):
    y = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, w, y, x.numel(), w.numel(), BLOCK=1024)
    return y


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        x, w = x.contiguous(), w.contiguous()
        ctx.save_for_backward(x, w)  # both are needed: dx = g * w, dw = sum over rows of g * x
        return _scale(x, w)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g = g.contiguous()
        dx = _scale(g, w)
        dw = torch.empty_like(w)
        col_dot_kernel[(triton.cdiv(w.numel(), 128),)](g, x, dw, x.shape[0], w.numel(), BLOCK=128)
        return dx, dw


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return _scale(
            x.contiguous(), self.weight
        )  # a forward-only kernel: nothing tells autograd how to differentiate it
