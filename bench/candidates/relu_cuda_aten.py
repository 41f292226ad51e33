# ReLU in CUDA with ATen headers in the .cu (the judge compiles them with nvcc): the CUDA row of bench/judge_stages.py.
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The CUDA file includes only what it uses (no_implicit_headers: load_inline would add torch/types.h, all of
# ATen): nvcc then compiles it in seconds, not the minute the whole of torch's headers takes.
cuda_source = r"""
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAStream.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

at::Tensor relu_cuda(at::Tensor x) {
    auto y = at::empty_like(x);
    int64_t n = x.numel();
    int threads = 256;
    int blocks = (n + threads - 1) / threads;
    relu_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

relu_ext = load_inline(
    name="relu_ext",
    cpp_sources="#include <torch/extension.h>\ntorch::Tensor relu_cuda(torch::Tensor x);",
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
