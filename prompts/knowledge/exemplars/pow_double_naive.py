"""(|x| + 1) ** 2.5 with a double literal: `+ 1.0` makes the sum a double, so `pow` is the double-precision
one (about 90 FP64 instructions per element) on a GPU with half the FP64 rate of FP32, and a conversion
each way."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void pow_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = pow(fabs(x[i]) + 1.0, 2.5);
}

void pow_launch(const float* x, float* y, int64_t n, cudaStream_t stream) {
    if (n > 0) pow_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
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
    name="kf_kb_pow_double",
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
