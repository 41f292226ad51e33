"""Elementwise GELU in the fast layout: bench/compile_candidates/elementwise_gelu.py with the same
kernel, its torch-facing wrapper moved to cpp_sources (see examples/candidates/relu_cuda_fast.py)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline


class Model(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x, approximate="tanh")


def get_inputs():
    return [torch.randn(4096, 1024)]


def get_init_inputs():
    return []


cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        y[i] = 0.5f * v * (1.0f + tanhf(inner));
    }
}

void gelu_launch(const float* x, float* y, int64_t n, cudaStream_t stream) {
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    gelu_kernel<<<blocks, threads, 0, stream>>>(x, y, n);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void gelu_launch(const float* x, float* y, int64_t n, cudaStream_t stream);

torch::Tensor gelu_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be a float32 CUDA tensor");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    gelu_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(), c10::cuda::getCurrentCUDAStream());
    return y;
}
"""

gelu_ext = load_inline(
    name="bench_gelu_fast_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["gelu_cuda"],
    extra_cuda_cflags=["-O3"],
    no_implicit_headers=True,
    verbose=False,
)


class ModelNew(nn.Module):
    def forward(self, x):
        return gelu_ext.gelu_cuda(x)
