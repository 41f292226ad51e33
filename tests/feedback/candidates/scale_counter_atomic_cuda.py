# task: scale_2d
# defect: contended_atomics
# line: while ((i = atomicAdd(next, 1)) < n) y[i] = x[i] * 2.0f + 1.0f;
"""y = 2x + 1 with the work handed out through one global counter: every thread claims its next element with
atomicAdd(next, 1), so each of the 64M elements costs an atomic on one address, which the L2 performs one after
another. Correct, and slow for that alone: a grid-stride loop needs no counter."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void scale_counter_kernel(const float* __restrict__ x, float* __restrict__ y, int* __restrict__ next, int n) {
    int i;
    while ((i = atomicAdd(next, 1)) < n) y[i] = x[i] * 2.0f + 1.0f;
}

void launch(const float* x, float* y, int* next, int64_t n, cudaStream_t stream) {
    cudaMemsetAsync(next, 0, sizeof(int), stream);
    scale_counter_kernel<<<132 * 8, 256, 0, stream>>>(x, y, next, (int)n);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void launch(const float* x, float* y, int* next, int64_t n, cudaStream_t stream);

torch::Tensor run(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.numel() < (1LL << 31), "x must be a float32 CUDA tensor under 2^31 elements");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    auto next = torch::empty({1}, xc.options().dtype(torch::kInt32));
    launch(xc.data_ptr<float>(), y.data_ptr<float>(), next.data_ptr<int>(), xc.numel(), c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

ext = load_inline(name="kf_fb_scale_counter_atomic", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["run"],
                  no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.run(x)
