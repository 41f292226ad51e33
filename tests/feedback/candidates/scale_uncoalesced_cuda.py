# task: scale_2d
# defect: uncoalesced
# line: y[k] = x[k] * 2.0f + 1.0f;
"""y = 2x + 1 with neighbouring threads walking down a column of the row-major matrix: every warp touches 32 rows."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t cols) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    int64_t r = i % rows, c = i / rows;  // thread i takes row i % rows: a warp spans 32 rows of one column
    int64_t k = r * cols + c;
    y[k] = x[k] * 2.0f + 1.0f;
}

void launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    int64_t n = rows * cols;
    scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, rows, cols);
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

ext = load_inline(name="kf_fb_scale_uncoalesced_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["run"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.run(x)
