# task: scale_2d
# defect: divergence
# line: if (threadIdx.x & 1) {
"""y = 2x + 1 where odd and even lanes of every warp take different long paths: each path runs with half the warp idle."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, float one, float zero, int steps) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    if (threadIdx.x & 1) {
        for (int s = 0; s < steps; ++s) v = fmaf(v, one, zero);  // one = 1, zero = 0 at run time: v unchanged
    } else {
        for (int s = 0; s < steps; ++s) v = v * one - zero;
    }
    y[i] = v * 2.0f + 1.0f;
}

void launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    int64_t n = rows * cols;
    scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n, 1.0f, 0.0f, 64);
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

ext = load_inline(name="kf_fb_scale_divergent_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["run"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.run(x)
