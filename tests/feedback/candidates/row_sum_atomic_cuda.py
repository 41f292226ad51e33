# task: row_sum_wide
# defect: contended_atomics
# line: atomicAdd(&y[i / cols], x[i]);
"""Row sums where every thread adds its element straight into its row's sum: 4M atomicAdds onto 64 addresses,
65536 per address, which the L2 performs one after another. Correct (float additions in another order, within
rounding) and slow for that alone: reduce per warp and block first, then one atomic per block."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void row_sum_atomic_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, int64_t cols) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
        atomicAdd(&y[i / cols], x[i]);
    }
}

void launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    row_sum_atomic_kernel<<<132 * 8, 256, 0, stream>>>(x, y, rows * cols, cols);
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

ext = load_inline(name="kf_fb_row_sum_atomic", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["run"],
                  no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.run(x)
