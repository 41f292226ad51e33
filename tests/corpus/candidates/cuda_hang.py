# devices: cuda
# expect: runtime_error:timeout
# config: {"run_timeout_s": 30}
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void spin_kernel(const float* x, float* y, int64_t n, volatile int* flag) {
    while (*flag == 0) { }  // nobody ever sets it
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    auto flag = torch::zeros({1}, x.options().dtype(torch::kInt));
    spin_kernel<<<1, 32, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), flag.data_ptr<int>());
    return y;
}
"""

ext = load_inline(name="spin_ext", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["relu_cuda"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_cuda(x)
