"""C = A @ B in float16, written for Hopper (sm_90): tiles arrive through TMA (tensor descriptors: one
thread issues a bulk copy of a whole tile into shared memory, out-of-bounds parts zero-filled), tl.dot
with num_warps=8 compiles to wgmma (asynchronous warpgroup MMA, operands straight from shared memory),
and num_stages=4 keeps three tiles in flight while the tensor cores work on the fourth."""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def matmul_tma_kernel(a_desc, b_desc, c_desc, M, N, K,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    grid_m, grid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP_M * grid_n)
    first_m = group * GROUP_M
    size_m = min(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * grid_n)) % size_m
    pid_n = (pid % (GROUP_M * grid_n)) // size_m
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = a_desc.load([pid_m * BM, k0])  # TMA: [BM, BK] tile, zero outside the tensor
        b = b_desc.load([k0, pid_n * BN])
        acc = tl.dot(a, b, acc)  # wgmma on sm_90
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.float16))  # TMA store clips at the edges


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = a.contiguous(), b.contiguous()
        (M, K), N = a.shape, b.shape[1]
        assert K % 8 == 0 and N % 8 == 0, "TMA needs 16-byte aligned row strides"
        c = torch.empty(M, N, device=a.device, dtype=torch.float16)
        BM, BN, BK = 128, 128, 64
        a_desc = TensorDescriptor.from_tensor(a, [BM, BK])
        b_desc = TensorDescriptor.from_tensor(b, [BK, BN])
        c_desc = TensorDescriptor.from_tensor(c, [BM, BN])
        grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
        matmul_tma_kernel[grid](a_desc, b_desc, c_desc, M, N, K, BM=BM, BN=BN, BK=BK, GROUP_M=8, num_warps=8, num_stages=4)
        return c
