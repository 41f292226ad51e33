# task: row_sum
# defect: global_race
# expect: correctness_error:numerical
# line: if (threadIdx.x == 0) y[blockIdx.y] += part[0];
"""Row sums with four blocks per row (blockIdx.x: the quarter of the row, blockIdx.y: the row), each adding its
partial sum into y[row] with a plain += instead of an atomic: the four blocks of a row run at once, read the same
y[row], and their writes overwrite each other. Racecheck sees shared memory only (the block's own tree is right)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void row_sum_split_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    __shared__ float part[256];
    int64_t chunk = (cols + 3) / 4;
    int64_t start = blockIdx.x * chunk;
    int64_t stop = start + chunk < cols ? start + chunk : cols;
    const float* row = x + blockIdx.y * cols;
    float acc = 0.0f;
    for (int64_t c = start + threadIdx.x; c < stop; c += 256) acc += row[c];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) y[blockIdx.y] += part[0];
}

void launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    row_sum_split_kernel<<<dim3(4, (unsigned)rows), 256, 0, stream>>>(x, y, cols);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);

torch::Tensor run(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 2, "x must be a 2-D float32 CUDA tensor");
    auto xc = x.contiguous();
    auto y = torch::zeros({xc.size(0), 1}, xc.options());
    launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.size(0), xc.size(1), c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

ext = load_inline(name="kf_san_row_sum_split_race", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["run"],
                  no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.run(x)
