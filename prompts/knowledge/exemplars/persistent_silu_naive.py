"""SiLU with a grid-stride loop over ONE block per SM: the grid is the SM count (a persistent kernel that
forgot the blocks-per-SM factor), so each SM runs 8 warps where 64 fit. Too few loads are in flight to
cover DRAM latency: DRAM and the SMs both idle (small grid, low achieved occupancy)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

__global__ void silu_one_block_per_sm_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t n4 = n / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (int64_t i = tid; i < n4; i += stride) {
        float4 v = x4[i];
        v.x = silu(v.x); v.y = silu(v.y); v.z = silu(v.z); v.w = silu(v.w);
        y4[i] = v;
    }
    for (int64_t i = n4 * 4 + tid; i < n; i += stride) y[i] = silu(x[i]);
}

void silu_launch(const float* x, float* y, int64_t n, cudaStream_t stream) {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (n > 0) silu_one_block_per_sm_kernel<<<sms, 256, 0, stream>>>(x, y, n);  // one block per SM: too few warps
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void silu_launch(const float* x, float* y, int64_t n, cudaStream_t stream);

torch::Tensor silu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be a float32 CUDA tensor");
    auto xc = x.contiguous();
    TORCH_CHECK(reinterpret_cast<uintptr_t>(xc.data_ptr<float>()) % 16 == 0, "x must be 16-byte aligned");
    auto y = torch::empty_like(xc);
    silu_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(), c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

ext = load_inline(
    name="kf_kb_silu_one_block_per_sm",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["silu_forward"],
    no_implicit_headers=True,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.silu_forward(x)
