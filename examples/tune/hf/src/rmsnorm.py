import torch
import torch.nn as nn
import triton
import triton.language as tl

EPS = 1e-6  # the module's variance_epsilon (Llama's and Qwen3's default)


@triton.jit
def rmsnorm_fwd_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    rstd_ptr,
    M,
    N,
    stride_x,
    stride_y,
    eps: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # BLOCK_M rows per program, each whole row in registers: one read of x, one write of y, fp32 math.
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    rmask = rows < M
    mask = rmask[:, None] & (cols[None, :] < N)
    x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    # the module rounds the normalized row to its input dtype before the weight multiplies it: so do we
    n = (x * rstd[:, None]).to(x_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(
        y_ptr + rows.to(tl.int64)[:, None] * stride_y + cols[None, :],
        (n * w[None, :]).to(y_ptr.dtype.element_ty),
        mask=mask,
    )
    tl.store(rstd_ptr + rows, rstd, mask=rmask)


@triton.jit
def rmsnorm_bwd_kernel(
    g_ptr,
    x_ptr,
    w_ptr,
    rstd_ptr,
    dx_ptr,
    dw_part_ptr,
    M,
    N,
    stride_g,
    stride_x,
    stride_dx,
    ROWS_PER_PROG: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # dx = rstd * (g*w - n * mean(g*w*n)), n = x*rstd; this program's rows' share of dw = sum(g * n) goes to a
    # partial row of its own (summed by colsum_kernel): no atomics, a deterministic sum.
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    cmask = cols < N
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    for i in range(ROWS_PER_PROG):
        row = pid * ROWS_PER_PROG + i
        live = row < M
        m = cols < tl.where(live, N, 0)  # a row past the end: no column
        r64 = row.to(tl.int64)
        x = tl.load(x_ptr + r64 * stride_x + cols, mask=m, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + r64 * stride_g + cols, mask=m, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + row, mask=live, other=0.0)
        n = x * rstd
        gw = g * w
        dx = rstd * (gw - n * (tl.sum(gw * n, axis=0) / N))
        tl.store(dx_ptr + r64 * stride_dx + cols, dx.to(dx_ptr.dtype.element_ty), mask=m)
        dw += g * n.to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(dw_part_ptr + pid.to(tl.int64) * N + cols, dw, mask=cmask)


@triton.jit
def colsum_kernel(part_ptr, out_ptr, P, N, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    # out[c] = sum over the P partial rows of part[p, c], in fp32
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for p0 in range(0, P, BLOCK_P):
        p = p0 + tl.arange(0, BLOCK_P)
        m = (p[:, None] < P) & (cols[None, :] < N)
        acc += tl.sum(tl.load(part_ptr + p[:, None] * N + cols[None, :], mask=m, other=0.0), axis=0)
    tl.store(out_ptr + cols, acc.to(out_ptr.dtype.element_ty), mask=cols < N)


def _rows(t, n):
    t2 = t.reshape(-1, n)
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def _promote(a, b):
    # the dtype of weight * normalized (torch's promotion of two floating dtypes), without a dispatched op
    if a == b:
        return a
    return (a if a.itemsize > b.itemsize else b) if a.itemsize != b.itemsize else torch.float32


def _block_n(n):
    return triton.next_power_of_2(n)


def rmsnorm_forward(x, w, eps):
    n = x.shape[-1]
    x2 = _rows(x, n)
    m = x2.shape[0]
    y = torch.empty((m, n), device=x.device, dtype=_promote(x.dtype, w.dtype))
    rstd = torch.empty((m,), device=x.device, dtype=torch.float32)
    block_n = _block_n(n)
    block_m = max(
        1, min(64, 4096 // block_n)
    )  # about 4096 elements a program: wide rows one by one, head-sized rows in groups
    warps = 8 if block_n * block_m >= 4096 else 4
    rmsnorm_fwd_kernel[(triton.cdiv(m, block_m),)](
        x2, w, y, rstd, m, n, x2.stride(0), y.stride(0), eps=eps, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps
    )
    return y.view(x.shape), x2, rstd


def rmsnorm_backward(g, x2, w, rstd):
    """dx (shaped as g) and dweight from the cotangent g, the rows x2 and their rstd."""
    m, n = x2.shape
    g2 = _rows(g, n)
    dx = torch.empty_like(x2)
    rows_per_prog = 16 if m >= 4096 else 4
    progs = triton.cdiv(m, rows_per_prog)
    part = torch.empty((progs, n), device=x2.device, dtype=torch.float32)
    block_n = _block_n(n)
    rmsnorm_bwd_kernel[(progs,)](
        g2,
        x2,
        w,
        rstd,
        dx,
        part,
        m,
        n,
        g2.stride(0),
        x2.stride(0),
        dx.stride(0),
        ROWS_PER_PROG=rows_per_prog,
        BLOCK_N=block_n,
        num_warps=8 if block_n >= 2048 else 4,
    )
    dw = torch.empty_like(w)
    colsum_kernel[(triton.cdiv(n, 128),)](part, dw, progs, n, BLOCK_P=32, BLOCK_N=128)
    return dx.view(g.shape), dw


class RMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps):
        y, x2, rstd = rmsnorm_forward(x, w, eps)
        ctx.save_for_backward(x2, w, rstd)  # the row's rstd (fp32) saves recomputing its sum of squares
        return y

    @staticmethod
    def backward(ctx, g):
        x2, w, rstd = ctx.saved_tensors
        dx, dw = rmsnorm_backward(g, x2, w, rstd)
        return dx, dw, None


class ModelNew(nn.Module):
    """RMSNorm (Llama's, Qwen3's, Mixtral's: weight * (x * rsqrt(mean(x^2) + eps)).to(x.dtype)) in one pass."""

    def __init__(self, weights: str):
        super().__init__()
        w = torch.load(weights, map_location="cpu", weights_only=True)
        self.weight = nn.Parameter(w["weight"])

    def forward(self, hidden_states):
        return RMSNormFn.apply(hidden_states, self.weight, EPS)
