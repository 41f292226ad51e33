"""y = silu(x @ w + b) in one kernel: the bias add and the SiLU run on the fp32 accumulator in registers
(the matmul's epilogue) and the result is rounded to fp16 and stored once. No intermediate x @ w ever
goes to DRAM, and there is one launch, not two."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_silu_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr
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
    # epilogue, on the fp32 accumulator while it is still in registers
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
    z = acc + bias[None, :]
    y = z * tl.sigmoid(z)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(y_ptr + rm[:, None].to(tl.int64) * N + rn[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        x, w, b = x.contiguous(), w.contiguous(), b.contiguous()
        (M, K), N = x.shape, w.shape[1]
        y = torch.empty(M, N, device=x.device, dtype=x.dtype)
        BM, BN, BK = 128, 128, 64
        grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
        linear_silu_kernel[grid](x, w, b, y, M, N, K, BM=BM, BN=BN, BK=BK, GROUP_M=8, num_warps=8, num_stages=3)
        return y
