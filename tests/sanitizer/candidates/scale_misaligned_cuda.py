# task: scale_odd
# defect: misaligned
# expect: runtime_error:illegal_memory_access
# line: float4 v = reinterpret_cast<const float4*>(xr)[j];
"""y = 2x + 1 a row at a time with float4 loads and stores: a row of 1001 floats is 4004 bytes, so
from row 1 on, a row's start is not 16-byte aligned and the float4 access is misaligned."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void scale_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    const float* xr = x + blockIdx.x * cols;
    float* yr = y + blockIdx.x * cols;
    int64_t quads = cols / 4;
    for (int64_t j = threadIdx.x; j < quads; j += blockDim.x) {
        float4 v = reinterpret_cast<const float4*>(xr)[j];
        v.x = v.x * 2.0f + 1.0f; v.y = v.y * 2.0f + 1.0f; v.z = v.z * 2.0f + 1.0f; v.w = v.w * 2.0f + 1.0f;
        reinterpret_cast<float4*>(yr)[j] = v;
    }
    for (int64_t c = quads * 4 + threadIdx.x; c < cols; c += blockDim.x) yr[c] = xr[c] * 2.0f + 1.0f;
}

void launch(const float* x, float* y, int64_t n, int64_t cols, cudaStream_t stream) {
    scale_rows_kernel<<<n / cols, 128, 0, stream>>>(x, y, cols);
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

ext = load_inline(name="kf_san_scale_misaligned", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["run"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.run(x)
