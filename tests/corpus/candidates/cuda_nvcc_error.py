# expect: compile_error:nvcc
# The kernel misses a ";". Written in the fast layout (docs/compile.md): the .cu holds no torch
# header, so nvcc reaches the error in about a second rather than after the torch headers.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void relu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f
}

void relu_launch(const float* x, float* y, int64_t n, cudaStream_t stream) {
    relu_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void relu_launch(const float* x, float* y, int64_t n, cudaStream_t stream);

torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    relu_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), c10::cuda::getCurrentCUDAStream());
    return y;
}
"""

relu_ext = load_inline(
    name="relu_bad_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu_cuda"],
    no_implicit_headers=True,
)


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_ext.relu_cuda(x)
