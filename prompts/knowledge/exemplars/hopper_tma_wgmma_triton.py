"""y = silu(x @ w + b) in float16, written for Hopper (sm_90): tiles arrive through TMA (tensor descriptors:
one thread issues a bulk copy of a whole tile into shared memory, out-of-bounds parts zero-filled), tl.dot
with num_warps=8 compiles to wgmma (asynchronous warpgroup MMA, operands straight from shared memory),
num_stages=4 keeps tiles in flight while the tensor cores work, and the bias and SiLU run on the fp32
accumulator before one TMA store: eager's separate bias and SiLU passes over the output never happen."""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def linear_silu_tma_kernel(
    x_desc, w_desc, y_desc, b_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr
):
    pid = tl.program_id(0)
    grid_m, grid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP_M * grid_n)
    first_m = group * GROUP_M
    size_m = min(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * grid_n)) % size_m
    pid_n = (pid % (GROUP_M * grid_n)) // size_m
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = x_desc.load([pid_m * BM, k0])  # TMA: a [BM, BK] tile, zero outside the tensor
        b = w_desc.load([k0, pid_n * BN])
        acc = tl.dot(a, b, acc)  # wgmma on sm_90
    rn = pid_n * BN + tl.arange(0, BN)
    z = acc + tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]  # epilogue, in registers
    y_desc.store([pid_m * BM, pid_n * BN], (z * tl.sigmoid(z)).to(tl.float16))  # TMA store clips at the edges


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        x, w, b = x.contiguous(), w.contiguous(), b.contiguous()
        (M, K), N = x.shape, w.shape[1]
        assert K % 8 == 0 and N % 8 == 0, "TMA needs 16-byte aligned row strides"
        y = torch.empty(M, N, device=x.device, dtype=torch.float16)
        BM, BN, BK = 128, 128, 64
        x_desc = TensorDescriptor.from_tensor(x, [BM, BK])
        w_desc = TensorDescriptor.from_tensor(w, [BK, BN])
        y_desc = TensorDescriptor.from_tensor(y, [BM, BN])
        grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
        linear_silu_tma_kernel[grid](
            x_desc, w_desc, y_desc, b, M, N, K, BM=BM, BN=BN, BK=BK, GROUP_M=8, num_warps=8, num_stages=4
        )
        return y
