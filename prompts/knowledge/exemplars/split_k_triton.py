"""C = A @ B with a long K and a small C (512 x 512 from K = 32768, float32): 128 x 128 output tiles give only
16 programs for 132 SMs, so K is split too. Program (tile, s) multiplies one K-slice and writes an fp32
partial tile; a second small kernel adds the SPLIT partials in a fixed order (deterministic). 16 tiles x 16
slices = 256 programs. The products use tl.dot(..., input_precision="ieee"): exact float32, as the task's
float64-checked precision needs."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_splitk_kernel(a_ptr, b_ptr, p_ptr, M, N, K, K_SLICE, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    k_lo = s * K_SLICE
    k_hi = min(k_lo + K_SLICE, K)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BK):
        kk = k0 + rk
        a = tl.load(
            a_ptr + rm[:, None].to(tl.int64) * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < k_hi), other=0.0
        )
        b = tl.load(
            b_ptr + kk[:, None].to(tl.int64) * N + rn[None, :], mask=(kk[:, None] < k_hi) & (rn[None, :] < N), other=0.0
        )
        acc = tl.dot(a, b, acc, input_precision="ieee")
    p = p_ptr + s.to(tl.int64) * M * N + rm[:, None] * N + rn[None, :]
    tl.store(p, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def sum_partials_kernel(p_ptr, c_ptr, MN, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(SPLIT):  # fixed order: the same bits every run
        acc += tl.load(p_ptr + s * MN + offs, mask=mask, other=0.0)
    tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = a.contiguous(), b.contiguous()
        (M, K), N = a.shape, b.shape[1]
        BM, BN, BK = 128, 128, 32
        tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
        sms = torch.cuda.get_device_properties(a.device).multi_processor_count if a.is_cuda else 132
        split = max(
            1, min(2 * sms // tiles, triton.cdiv(K, 4 * BK))
        )  # enough programs for ~2 per SM, each >= 4 K-steps
        k_slice = triton.cdiv(triton.cdiv(K, split), BK) * BK
        split = triton.cdiv(K, k_slice)
        partial = torch.empty(split, M, N, device=a.device, dtype=torch.float32)
        matmul_splitk_kernel[(triton.cdiv(M, BM), triton.cdiv(N, BN), split)](
            a, b, partial, M, N, K, k_slice, BM=BM, BN=BN, BK=BK, num_warps=8, num_stages=3
        )
        c = torch.empty(M, N, device=a.device, dtype=a.dtype)
        sum_partials_kernel[(triton.cdiv(M * N, 1024),)](partial, c, M * N, SPLIT=split, BLOCK=1024, num_warps=4)
        return c
