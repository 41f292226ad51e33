"""C = A @ B with a long K and a small C, one program per 128 x 128 output tile walking all of K: 16 programs,
so 16 of the H100's 132 SMs work and the rest idle for the whole kernel (a small grid). It accumulates each
2048-long K-chunk separately and adds the chunks, like the split-K exemplar's partials: one fp32 accumulator
over all 32768 steps was measured 8x less accurate than the float32 reference and failed the judge."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, K_CHUNK, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k_chunk in range(0, K, K_CHUNK):  # serial: this one program walks all of K
        part = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(k_chunk, min(k_chunk + K_CHUNK, K), BK):
            kk = k0 + rk
            a = tl.load(
                a_ptr + rm[:, None].to(tl.int64) * K + kk[None, :],
                mask=(rm[:, None] < M) & (kk[None, :] < K),
                other=0.0,
            )
            b = tl.load(
                b_ptr + kk[:, None].to(tl.int64) * N + rn[None, :],
                mask=(kk[:, None] < K) & (rn[None, :] < N),
                other=0.0,
            )
            part = tl.dot(a, b, part, input_precision="ieee")
        acc += part
    tl.store(
        c_ptr + rm[:, None] * N + rn[None, :],
        acc.to(c_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = a.contiguous(), b.contiguous()
        (M, K), N = a.shape, b.shape[1]
        c = torch.empty(M, N, device=a.device, dtype=a.dtype)
        matmul_kernel[(triton.cdiv(M, 128), triton.cdiv(N, 128))](
            a, b, c, M, N, K, 2048, BM=128, BN=128, BK=32, num_warps=8, num_stages=3
        )
        return c
