# devices: cuda
# task: linear_fp32
# expect: ok
# warns: precision
# config: {"atol": 0.01, "rtol": 0.01}
# Shortcut: products in __half inside a float32 task; within atol/rtol, far above the float32 reference's error.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_fp16.h>

__global__ void linear_half_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                                   float* __restrict__ y, int M, int N, int K) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    int m = blockIdx.y;
    if (n >= N || m >= M) return;
    float acc = 0.f;
    for (int k = 0; k < K; ++k)
        acc += __half2float(__hmul(__float2half(x[m * K + k]), __float2half(w[n * K + k])));
    y[m * N + n] = acc + b[n];
}

torch::Tensor linear_half(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    int M = x.size(0), K = x.size(1), N = w.size(0);
    auto y = torch::empty({M, N}, x.options());
    dim3 grid((N + 127) / 128, M);
    linear_half_kernel<<<grid, 128, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), M, N, K);
    return y;
}
"""

linear_ext = load_inline(
    name="linear_half_ext",
    cpp_sources="torch::Tensor linear_half(torch::Tensor x, torch::Tensor w, torch::Tensor b);",
    cuda_sources=cuda_source,
    functions=["linear_half"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return linear_ext.linear_half(x.contiguous(), self.linear.weight.contiguous(), self.linear.bias.contiguous())
