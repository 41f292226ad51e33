# task: transpose
# defect: bank_conflicts
# line: y[(bx + ty + j) * n + by + tx] = tile[tx][ty + j];
"""A tiled transpose through shared memory without padding: reading a tile column hits one bank 32 times."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void transpose_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    __shared__ float tile[32][32];
    int64_t bx = blockIdx.x * 32, by = blockIdx.y * 32;
    int tx = threadIdx.x, ty = threadIdx.y;  // a 32 x 8 block: each thread moves 4 elements
    for (int j = 0; j < 32; j += 8) tile[ty + j][tx] = x[(by + ty + j) * n + bx + tx];
    __syncthreads();
    for (int j = 0; j < 32; j += 8) y[(bx + ty + j) * n + by + tx] = tile[tx][ty + j];
}

void launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    dim3 grid(cols / 32, rows / 32), block(32, 8);  // square, a multiple of 32
    transpose_kernel<<<grid, block, 0, stream>>>(x, y, rows);
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

ext = load_inline(name="kf_fb_transpose_bank_conflicts_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["run"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.run(x)
