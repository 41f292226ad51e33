# task: scale_odd
# defect: out_of_bounds
# expect: ok
# line: y[i] = x[i] * 2.0f + 1.0f;
"""y = 2x + 1 with one thread per element and no bound check: the grid rounds n up to 256, so the
last block reads and writes past the end of x and y. Every element of y is right: only a sanitizer
sees it (kernelfix eval --sanitize)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = x[i] * 2.0f + 1.0f;
}

void launch(const float* x, float* y, int64_t n, int64_t cols, cudaStream_t stream) {
    scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void launch(const float* x, float* y, int64_t n, int64_t cols, cudaStream_t stream);

torch::Tensor run(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 2, "x must be a 2-D float32 CUDA tensor");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(), xc.size(1), c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

ext = load_inline(name="kf_san_scale_oob", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["run"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.run(x)
