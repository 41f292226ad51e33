# task: scale_2d
# defect: local_memory
# line: buf[(s * step + pick) % 48] = v + s * zero;
"""y = 2x + 1 through a per-thread array indexed at run time: the array lives in local memory (DRAM through L1), not registers."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, float zero, int pick, int step) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float buf[48];
    float v = x[i];
    for (int s = 0; s < 48; ++s) buf[(s * step + pick) % 48] = v + s * zero;  // slots known only at run time
    int j = (pick + (int)threadIdx.x) % 48;
    y[i] = buf[j] * 2.0f + 1.0f;  // every slot holds v (zero is 0)
}

void launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    int64_t n = rows * cols;
    scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n, 0.0f, 7, 5);  // 5 is prime to 48: a permutation
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

ext = load_inline(name="kf_fb_scale_local_memory_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["run"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.run(x)
