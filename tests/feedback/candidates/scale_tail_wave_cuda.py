# task: scale_2d
# defect: tail_wave
# line:
"""y = 2x + 1 in big blocks sized so the grid is a little over one full wave: the last wave runs a few blocks on an otherwise idle GPU."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void __launch_bounds__(1024) scale_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, int64_t per_block) {
    int64_t start = blockIdx.x * per_block;
    int64_t end = start + per_block < n ? start + per_block : n;
    for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x)
        y[i] = x[i] * 2.0f + 1.0f;
}

void launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    int64_t n = rows * cols;
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    int blocks = 2 * sms + sms / 8;  // two 1024-thread blocks fit an SM: one full wave and an eighth of another
    int64_t per_block = (n + blocks - 1) / blocks;
    scale_kernel<<<blocks, 1024, 0, stream>>>(x, y, n, per_block);
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

ext = load_inline(name="kf_fb_scale_tail_wave_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["run"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.run(x)
