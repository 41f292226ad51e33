"""C = A @ B in float16 with tl.dot, but configured like an Ampere kernel: num_warps=2 (wgmma needs a
warpgroup of 4 warps, so this compiles to the older mma.sync) and num_stages=1 (no software pipelining:
every K-step waits for its loads before the tensor cores start). Correct, and far from Hopper's peak."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None].to(tl.int64) * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None].to(tl.int64) * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c_ptr + rm[:, None].to(tl.int64) * N + rn[None, :], acc.to(tl.float16), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = a.contiguous(), b.contiguous()
        (M, K), N = a.shape, b.shape[1]
        c = torch.empty(M, N, device=a.device, dtype=torch.float16)
        matmul_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](a, b, c, M, N, K, BM=64, BN=64, BK=32, num_warps=2, num_stages=1)
        return c
