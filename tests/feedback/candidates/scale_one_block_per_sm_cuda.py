# task: scale_2d
# defect: small_grid
# line:
"""y = 2x + 1 by a grid-stride loop over one block of 256 threads per SM (the grid read off the device):
every SM works, but with 8 of its 64 warp slots filled, too few loads are in flight to cover DRAM latency.
An SM holds 8 such blocks at once."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = x[i] * 2.0f + 1.0f;
}

void launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    static int sms = 0;
    if (sms == 0) {
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    }
    scale_kernel<<<sms, 256, 0, stream>>>(x, y, rows * cols);
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

ext = load_inline(name="kf_fb_scale_one_block_per_sm_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["run"],
                  no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.run(x)
