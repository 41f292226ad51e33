"""Row softmax in the fast layout: bench/compile_candidates/reduction_softmax.py with the same
kernels, its torch-facing wrapper moved to cpp_sources."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(2048, 4096)]


def get_init_inputs():
    return []


cuda_source = r"""
#include <cuda_runtime.h>
#include <cfloat>
#include <cstdint>

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

// blockDim.x is a multiple of 32, at most 1024
__device__ float block_reduce(float v, bool is_max, float* shared) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float r = threadIdx.x < warps ? shared[threadIdx.x] : (is_max ? -FLT_MAX : 0.f);
    if (warp == 0) r = is_max ? warp_max(r) : warp_sum(r);
    if (threadIdx.x == 0) shared[0] = r;
    __syncthreads();
    r = shared[0];
    __syncthreads();
    return r;
}

__global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float shared[32];
    const float* row = x + (int64_t)blockIdx.x * cols;
    float* out = y + (int64_t)blockIdx.x * cols;
    float m = -FLT_MAX;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    m = block_reduce(m, true, shared);
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += __expf(row[c] - m);
    s = block_reduce(s, false, shared);
    float inv = 1.f / s;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = __expf(row[c] - m) * inv;
}

void softmax_launch(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    softmax_kernel<<<rows, 256, 0, stream>>>(x, y, cols);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void softmax_launch(const float* x, float* y, int rows, int cols, cudaStream_t stream);

torch::Tensor softmax_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.scalar_type() == torch::kFloat32, "x must be a 2-D float32 CUDA tensor");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    softmax_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.size(0), xc.size(1), c10::cuda::getCurrentCUDAStream());
    return y;
}
"""

softmax_ext = load_inline(
    name="bench_softmax_fast_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["softmax_cuda"],
    no_implicit_headers=True,
    verbose=False,
)


class ModelNew(nn.Module):
    def forward(self, x):
        return softmax_ext.softmax_cuda(x)
