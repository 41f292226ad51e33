# expect: compile_error:nvcc
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void relu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

relu_ext = load_inline(
    name="relu_bad_ext",
    cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
    cuda_sources=cuda_source,
    functions=["relu_cuda"],
)


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_ext.relu_cuda(x)
