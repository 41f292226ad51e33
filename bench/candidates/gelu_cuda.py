"""88_MinGPTNewGelu (KernelBench level 1) in CUDA C++ through load_inline."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long stride = (long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        float v = x[i];
        float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        y[i] = 0.5f * v * (1.0f + tanhf(inner));
    }
}

torch::Tensor gelu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    int threads = 256;
    int blocks = (int)std::min<long>((n + threads - 1) / threads, 132L * 32);
    gelu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
cpp_src = "torch::Tensor gelu(torch::Tensor x);"
ext = load_inline(name="kb_gelu", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["gelu"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.gelu(x.contiguous())
