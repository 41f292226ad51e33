"""(|x| + 1) ** 2.5 in float32 arithmetic: float literals (`1.0f`, `2.5f`) and `powf`, so no value is
widened to double; with 16-byte loads the kernel is then limited by DRAM, not by the FP64 pipe."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__device__ __forceinline__ float f(float v) { return powf(fabsf(v) + 1.0f, 2.5f); }

__global__ void pow_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, bool aligned) {
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    int64_t done = 0;
    if (aligned) {
        const float4* x4 = reinterpret_cast<const float4*>(x);
        float4* y4 = reinterpret_cast<float4*>(y);
        for (int64_t i = tid; i < n / 4; i += stride) {
            float4 v = x4[i];
            y4[i] = make_float4(f(v.x), f(v.y), f(v.z), f(v.w));
        }
        done = n / 4 * 4;
    }
    for (int64_t i = done + tid; i < n; i += stride) y[i] = f(x[i]);
}

void pow_launch(const float* x, float* y, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    const int64_t blocks = (n / 4 + 255) / 256;
    const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
    const int64_t grid = blocks < ((int64_t)1 << 30) ? (blocks > 0 ? blocks : 1) : ((int64_t)1 << 30);  // grid-stride beyond that
    pow_kernel<<<(unsigned)grid, 256, 0, stream>>>(x, y, n, aligned);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void pow_launch(const float* x, float* y, int64_t n, cudaStream_t stream);

torch::Tensor pow_mix(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be a float32 CUDA tensor");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    pow_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(), c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

ext = load_inline(
    name="kf_kb_pow_float",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["pow_mix"],
    no_implicit_headers=True,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.pow_mix(x)
