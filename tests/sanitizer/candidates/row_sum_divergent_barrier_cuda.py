# task: row_sum
# defect: divergent_barrier
# line: __syncthreads();  // inside the if: not every thread of the block reaches it
"""Row sums whose tree step puts __syncthreads() inside `if (threadIdx.x < s)`: from s = 64 on, threads of
the block skip the barrier that others wait at (a barrier in divergent code)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void row_sum_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    __shared__ float part[256];
    const float* row = x + blockIdx.x * cols;
    float acc = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += 256) acc += row[c];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            part[threadIdx.x] += part[threadIdx.x + s];
            __syncthreads();  // inside the if: not every thread of the block reaches it
        }
    }
    if (threadIdx.x == 0) y[blockIdx.x] = part[0];
}

void launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    row_sum_kernel<<<rows, 256, 0, stream>>>(x, y, cols);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);

torch::Tensor run(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 2, "x must be a 2-D float32 CUDA tensor");
    auto xc = x.contiguous();
    auto y = torch::empty({xc.size(0), 1}, xc.options());
    launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.size(0), xc.size(1), c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

ext = load_inline(name="kf_san_row_sum_divergent", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["run"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.run(x)
