# task: matmul_fp16
# defect: no_reuse, tensor_cores_unused
# line: acc += __half2float(a[row * n + k]) * __half2float(b[k * n + col]);
"""C = A @ B in half precision, one thread per output, every operand read from global memory for
every product: no tile is reused on chip, and the tensor cores sit idle."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

__global__ void matmul_kernel(const __half* __restrict__ a, const __half* __restrict__ b, __half* __restrict__ c, int64_t n) {
    int64_t row = blockIdx.y * (int64_t)blockDim.y + threadIdx.y;
    int64_t col = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (row >= n || col >= n) return;
    float acc = 0.0f;
    for (int64_t k = 0; k < n; ++k)
        acc += __half2float(a[row * n + k]) * __half2float(b[k * n + col]);
    c[row * n + col] = __float2half(acc);
}

void launch(const void* a, const void* b, void* c, int64_t n, cudaStream_t stream) {
    dim3 block(16, 16), grid((n + 15) / 16, (n + 15) / 16);
    matmul_kernel<<<grid, block, 0, stream>>>((const __half*)a, (const __half*)b, (__half*)c, n);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void launch(const void* a, const void* b, void* c, int64_t n, cudaStream_t stream);

torch::Tensor run(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && a.scalar_type() == torch::kHalf && b.scalar_type() == torch::kHalf, "half CUDA tensors");
    TORCH_CHECK(a.dim() == 2 && a.size(0) == a.size(1) && a.sizes() == b.sizes(), "square matrices of one size");
    auto ac = a.contiguous(), bc = b.contiguous();
    auto c = torch::empty_like(ac);
    launch(ac.data_ptr(), bc.data_ptr(), c.data_ptr(), ac.size(0), c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return c;
}
"""

ext = load_inline(name="kf_fb_matmul_naive_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["run"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return ext.run(a, b)
