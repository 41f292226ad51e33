"""y = silu(x @ w + b) as two kernels: the matmul stores x @ w (fp16, 64 MiB) to DRAM, then an elementwise
kernel reads it back, adds the bias, applies SiLU and writes y: 128 MiB of extra traffic and a second launch."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(
    x_ptr, w_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr
):
    pid = tl.program_id(0)
    grid_m, grid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP_M * grid_n)
    first_m = group * GROUP_M
    size_m = min(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * grid_n)) % size_m
    pid_n = (pid % (GROUP_M * grid_n)) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(
            x_ptr + rm[:, None].to(tl.int64) * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0
        )
        b = tl.load(w_ptr + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c_ptr + rm[:, None].to(tl.int64) * N + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def bias_silu_kernel(c_ptr, b_ptr, y_ptr, total, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    z = tl.load(c_ptr + offs, mask=mask).to(tl.float32) + tl.load(b_ptr + offs % N, mask=mask).to(tl.float32)
    tl.store(y_ptr + offs, (z * tl.sigmoid(z)).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        x, w, b = x.contiguous(), w.contiguous(), b.contiguous()
        (M, K), N = x.shape, w.shape[1]
        c = torch.empty(M, N, device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(M, 128) * triton.cdiv(N, 128),)
        matmul_kernel[grid](x, w, c, M, N, K, BM=128, BN=128, BK=64, GROUP_M=8, num_warps=8, num_stages=3)
        y = torch.empty_like(c)
        bias_silu_kernel[(triton.cdiv(M * N, 4096),)](c, b, y, M * N, N, BLOCK=4096, num_warps=8)
        return y
