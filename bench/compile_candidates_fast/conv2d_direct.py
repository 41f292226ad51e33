"""Direct 3x3 conv2d in the fast layout: bench/compile_candidates/conv2d_direct.py with the same
kernel, its torch-facing wrapper (device guard included) moved to cpp_sources."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline


class Model(nn.Module):
    def __init__(self, cin=16, cout=32):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=True)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(8, 16, 64, 64)]


def get_init_inputs():
    return [16, 32]


cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void conv3x3_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                               float* __restrict__ y, int N, int C, int H, int W, int K) {
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int64_t total = (int64_t)N * K * H * W;
    if (idx >= total) return;
    int ow = idx % W;
    int oh = (idx / W) % H;
    int k = (idx / ((int64_t)W * H)) % K;
    int n = idx / ((int64_t)W * H * K);
    float acc = bias[k];
    for (int c = 0; c < C; ++c) {
        const float* xp = x + ((int64_t)n * C + c) * H * W;
        const float* wp = w + ((int64_t)k * C + c) * 9;
        for (int r = 0; r < 3; ++r) {
            int ih = oh + r - 1;
            if (ih < 0 || ih >= H) continue;
            for (int s = 0; s < 3; ++s) {
                int iw = ow + s - 1;
                if (iw < 0 || iw >= W) continue;
                acc += xp[ih * W + iw] * wp[r * 3 + s];
            }
        }
    }
    y[idx] = acc;
}

void conv3x3_launch(const float* x, const float* w, const float* b, float* y, int N, int C, int H, int W, int K, cudaStream_t stream) {
    int64_t total = (int64_t)N * K * H * W;
    const int threads = 256;
    conv3x3_kernel<<<(total + threads - 1) / threads, threads, 0, stream>>>(x, w, b, y, N, C, H, W, K);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

void conv3x3_launch(const float* x, const float* w, const float* b, float* y, int N, int C, int H, int W, int K, cudaStream_t stream);

torch::Tensor conv3x3_cuda(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4 && w.dim() == 4 && w.size(2) == 3 && w.size(3) == 3, "bad operands");
    const c10::cuda::OptionalCUDAGuard guard(x.device());
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    auto bc = b.contiguous();
    int N = xc.size(0), C = xc.size(1), H = xc.size(2), W = xc.size(3), K = wc.size(0);
    auto y = torch::empty({N, K, H, W}, xc.options());
    conv3x3_launch(xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(), N, C, H, W, K,
                   c10::cuda::getCurrentCUDAStream());
    return y;
}
"""

conv_ext = load_inline(
    name="bench_conv3x3_fast_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["conv3x3_cuda"],
    no_implicit_headers=True,
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, cin=16, cout=32):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=True)  # holds the weights; forward runs the kernel

    def forward(self, x):
        return conv_ext.conv3x3_cuda(x, self.conv.weight, self.conv.bias)
