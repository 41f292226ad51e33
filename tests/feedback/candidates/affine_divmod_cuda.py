# task: channel_affine
# defect: int_divmod
# line: int64_t c = (i / (width * height)) % channels;
"""y = x * w[c] + b[c] over NCHW, one thread per element, with the generic index math: the flat index split
into (n, c, h, w) by 64-bit divisions and modulos by run-time sizes, then put back together. Each 64-bit
division is a routine of dozens of integer instructions, so the integer pipes, not memory, set the pace."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void affine_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                              float* __restrict__ y, int64_t n, int64_t channels, int64_t height, int64_t width) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    int64_t col = i % width;
    int64_t row = (i / width) % height;
    int64_t c = (i / (width * height)) % channels;
    int64_t batch = i / (width * height * channels);
    int64_t at = ((batch * channels + c) * height + row) * width + col;
    y[at] = x[at] * w[c] + b[c];
}

void affine_launch(const float* x, const float* w, const float* b, float* y, int64_t n, int64_t channels, int64_t height,
                   int64_t width, cudaStream_t stream) {
    if (n > 0) affine_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, w, b, y, n, channels, height, width);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void affine_launch(const float* x, const float* w, const float* b, float* y, int64_t n, int64_t channels, int64_t height,
                   int64_t width, cudaStream_t stream);

torch::Tensor channel_affine(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 4, "x must be a 4-D float32 CUDA tensor");
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    auto bc = b.contiguous();
    TORCH_CHECK(wc.numel() == xc.size(1) && bc.numel() == xc.size(1), "one weight and bias per channel");
    auto y = torch::empty_like(xc);
    affine_launch(xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(),
                  xc.size(1), xc.size(2), xc.size(3), c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

ext = load_inline(name="kf_fb_affine_divmod_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["channel_affine"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, channels: int = 64):
        super().__init__()
        self.w = nn.Parameter(torch.randn(channels))
        self.b = nn.Parameter(torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.channel_affine(x, self.w, self.b)
