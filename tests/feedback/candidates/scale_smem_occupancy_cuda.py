# task: scale_2d
# defect: occupancy_shared_memory
# line:
"""y = 2x + 1 staged through 160 KB of shared memory per 128-thread block: one block fits an SM, 4 warps of 64."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    extern __shared__ float stage[];
    int64_t base = (int64_t)blockIdx.x * 8192;
    for (int k = threadIdx.x; k < 8192; k += blockDim.x) {
        int64_t i = base + k;
        stage[k] = i < n ? x[i] : 0.0f;
    }
    __syncthreads();
    for (int k = threadIdx.x; k < 8192; k += blockDim.x) {
        int64_t i = base + k;
        if (i < n) y[i] = stage[k] * 2.0f + 1.0f;
    }
}

void launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    int64_t n = rows * cols;
    const int smem = 160 * 1024;  // far more than the 32 KB the block uses
    cudaFuncSetAttribute(scale_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    scale_kernel<<<(n + 8191) / 8192, 128, smem, stream>>>(x, y, n);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);

torch::Tensor run(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 2, "x must be a 2-D float32 CUDA tensor");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.size(0), xc.size(1), c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

ext = load_inline(name="kf_fb_scale_smem_occupancy_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["run"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.run(x)
