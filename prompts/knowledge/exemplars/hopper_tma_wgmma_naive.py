"""y = silu(x @ w + b) in float16 with the same fused epilogue, but configured like an Ampere kernel:
num_warps=2 (wgmma needs a warpgroup of 4 warps, so tl.dot compiles to the older mma.sync, HMMA in SASS)
and num_stages=1 (no software pipelining: every K-step waits for its loads before the tensor cores start).
Correct, and far from Hopper's peak."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_silu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(
            x_ptr + rm[:, None].to(tl.int64) * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0
        )
        b = tl.load(
            w_ptr + kk[:, None].to(tl.int64) * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0
        )
        acc = tl.dot(a, b, acc)  # mma.sync with 2 warps
    z = acc + tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(y_ptr + rm[:, None].to(tl.int64) * N + rn[None, :], (z * tl.sigmoid(z)).to(tl.float16), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        x, w, b = x.contiguous(), w.contiguous(), b.contiguous()
        (M, K), N = x.shape, w.shape[1]
        y = torch.empty(M, N, device=x.device, dtype=torch.float16)
        linear_silu_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](
            x, w, b, y, M, N, K, BM=64, BN=64, BK=32, num_warps=2, num_stages=1
        )
        return y
