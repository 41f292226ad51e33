"""Fused linear + bias + ReLU in the fast layout: bench/compile_candidates/fused_linear_relu.py with
the same kernel template. The .cu instantiates its launcher for float and double; the dtype
dispatch (AT_DISPATCH_FLOATING_TYPES) stays in the torch-facing wrapper in cpp_sources."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline


class Model(nn.Module):
    def __init__(self, fin=1024, fout=1024):
        super().__init__()
        self.fc = nn.Linear(fin, fout)

    def forward(self, x):
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.randn(512, 1024)]


def get_init_inputs():
    return [1024, 1024]


cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

constexpr int TILE = 16;

template <typename scalar_t>
__global__ void linear_relu_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ w, const scalar_t* __restrict__ b,
                                   scalar_t* __restrict__ y, int M, int N, int K) {
    __shared__ scalar_t xs[TILE][TILE];
    __shared__ scalar_t ws[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;  // sample
    int col = blockIdx.x * TILE + threadIdx.x;  // output feature
    scalar_t acc = 0;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        xs[threadIdx.y][threadIdx.x] = (row < M && k0 + threadIdx.x < K) ? x[(int64_t)row * K + k0 + threadIdx.x] : scalar_t(0);
        // w is [N, K]: tile element (k, col) is w[col][k]
        int wcol = blockIdx.x * TILE + threadIdx.y;
        ws[threadIdx.x][threadIdx.y] = (wcol < N && k0 + threadIdx.x < K) ? w[(int64_t)wcol * K + k0 + threadIdx.x] : scalar_t(0);
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += xs[threadIdx.y][k] * ws[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) {
        scalar_t v = acc + b[col];
        y[(int64_t)row * N + col] = v > scalar_t(0) ? v : scalar_t(0);
    }
}

template <typename scalar_t>
void linear_relu_launch(const scalar_t* x, const scalar_t* w, const scalar_t* b, scalar_t* y, int M, int N, int K, cudaStream_t stream) {
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    linear_relu_kernel<scalar_t><<<grid, block, 0, stream>>>(x, w, b, y, M, N, K);
}

template void linear_relu_launch<float>(const float*, const float*, const float*, float*, int, int, int, cudaStream_t);
template void linear_relu_launch<double>(const double*, const double*, const double*, double*, int, int, int, cudaStream_t);
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

template <typename scalar_t>
void linear_relu_launch(const scalar_t* x, const scalar_t* w, const scalar_t* b, scalar_t* y, int M, int N, int K, cudaStream_t stream);

torch::Tensor linear_relu_cuda(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1) && b.size(0) == w.size(0), "bad operands");
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    auto bc = b.contiguous();
    int M = xc.size(0), K = xc.size(1), N = wc.size(0);
    auto y = torch::empty({M, N}, xc.options());
    AT_DISPATCH_FLOATING_TYPES(xc.scalar_type(), "linear_relu", [&] {
        linear_relu_launch<scalar_t>(xc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(), bc.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), M, N, K,
                                     c10::cuda::getCurrentCUDAStream());
    });
    return y;
}
"""

fused_ext = load_inline(
    name="bench_linear_relu_fast_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["linear_relu_cuda"],
    extra_cuda_cflags=["-O3"],
    no_implicit_headers=True,
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, fin=1024, fout=1024):
        super().__init__()
        self.fc = nn.Linear(fin, fout)

    def forward(self, x):
        return fused_ext.linear_relu_cuda(x, self.fc.weight, self.fc.bias)
