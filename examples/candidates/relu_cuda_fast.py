"""ReLU as CUDA C++ in the fast layout: the same kernel as relu_cuda.py, built in seconds.

- cuda_sources: CUDA headers only; the kernel and a launcher on raw pointers, sizes and
  a cudaStream_t. nvcc then compiles just this code, not the torch headers.
- cpp_sources: begins with #include <torch/extension.h> (kernelfix serves it precompiled);
  the torch-facing wrapper checks the tensor, allocates the output and calls the launcher
  on the current stream.
- no_implicit_headers=True: torch adds no torch headers to the .cu.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

void relu_launch(const float* x, float* y, int64_t n, cudaStream_t stream) {
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    relu_kernel<<<blocks, threads, 0, stream>>>(x, y, n);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void relu_launch(const float* x, float* y, int64_t n, cudaStream_t stream);

torch::Tensor relu_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be a float32 CUDA tensor");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    relu_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(), c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

relu_ext = load_inline(
    name="relu_cuda_fast_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu_cuda"],
    no_implicit_headers=True,
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu_ext.relu_cuda(x)
