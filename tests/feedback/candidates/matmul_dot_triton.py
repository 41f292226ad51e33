# task: matmul_fp16
# defect: none
# line:
"""C = A @ B in Triton with tl.dot on 128 x 128 tiles: tensor cores, operands reused from shared memory (the control)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, n, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, n, BK):
        a = tl.load(a_ptr + rm[:, None] * n + (k0 + rk)[None, :])
        b = tl.load(b_ptr + (k0 + rk)[:, None] * n + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * n + rn[None, :], acc.to(tl.float16))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = a.contiguous(), b.contiguous()
        n = a.shape[0]  # a multiple of 128
        c = torch.empty_like(a)
        matmul_kernel[(n // 128, n // 128)](a, b, c, n, BM=128, BN=128, BK=64, num_warps=8, num_stages=3)
        return c
