"""C = A @ B in half precision on the tensor cores: tl.dot on fp16 tiles (128 x 128 x 64) accumulating in
fp32, operands staged through shared memory in 3 stages, programs grouped along M so neighbouring programs
share tiles in L2, one rounding to fp16 at the store."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr
):
    pid = tl.program_id(0)
    grid_m, grid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP_M * grid_n)  # grouped order: GROUP_M rows of tiles share each B column in L2
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
            a_ptr + rm[:, None].to(tl.int64) * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0
        )
        b = tl.load(
            b_ptr + kk[:, None].to(tl.int64) * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0
        )
        acc = tl.dot(a, b, acc)  # fp16 x fp16 -> fp32 on the tensor cores
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c_ptr + rm[:, None].to(tl.int64) * N + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = a.contiguous(), b.contiguous()
        (M, K), N = a.shape, b.shape[1]
        c = torch.empty(M, N, device=a.device, dtype=a.dtype)
        BM, BN, BK = 128, 128, 64
        grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
        matmul_kernel[grid](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK, GROUP_M=8, num_warps=8, num_stages=3)
        return c
