# task: matmul_fp16
# defect: no_reuse
# line: for k0 in range(0, n, BK):
"""C = A @ B in Triton on 32 x 32 tiles stepping 8 along K, the products summed by broadcast and
tl.sum. Triton turns that sum into a tensor-core dot, but tiles this small fetch each operand from
L2 for every 32 outputs it feeds: the kernel re-reads far more than it computes."""

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
        a = tl.load(a_ptr + rm[:, None] * n + (k0 + rk)[None, :]).to(tl.float32)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * n + rn[None, :]).to(tl.float32)
        acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)
    tl.store(c_ptr + rm[:, None] * n + rn[None, :], acc.to(tl.float16))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = a.contiguous(), b.contiguous()
        n = a.shape[0]  # a multiple of 32
        c = torch.empty_like(a)
        matmul_kernel[(n // 32, n // 32)](a, b, c, n, BM=32, BN=32, BK=8)
        return c
