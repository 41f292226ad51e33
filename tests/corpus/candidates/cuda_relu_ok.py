# devices: cuda
# expect: ok
# On the CPU this layout is built for real and judged infra:no_gpu in tests/test_fast_layout.py (its example).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The fast layout (docs/compile.md): the .cu holds the kernel and a launcher on raw pointers, CUDA headers only, so nvcc
# compiles no torch header; the torch-facing wrapper is the binding TU, which takes the precompiled torch/extension.h.
cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

void relu_launch(const float* x, float* y, int64_t n, cudaStream_t stream) {
    const int threads = 256;
    relu_kernel<<<(n + threads - 1) / threads, threads, 0, stream>>>(x, y, n);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void relu_launch(const float* x, float* y, int64_t n, cudaStream_t stream);

torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    relu_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

relu_ext = load_inline(
    name="relu_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu_cuda"],
    verbose=False,
    no_implicit_headers=True,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu_ext.relu_cuda(x.contiguous())
