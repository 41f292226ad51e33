# task: kernelbench/level1/50_conv_standard_2D__square_input__square_kernel
# defect: fairness
# line:
"""KernelBench level-1 50_conv as a direct convolution in float32: one thread per output element,
every product an fp32 FMA. cuDNN runs the reference in TF32 (PyTorch's default for convolutions),
so this kernel is closer to the exact result than the reference it is compared with."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void conv_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias, float* __restrict__ y,
                            int nb, int cin, int h, int wd, int cout, int k, int stride, int pad, int oh, int ow) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int64_t total = (int64_t)nb * cout * oh * ow;
    if (i >= total) return;
    int ox = i % ow, oy = (i / ow) % oh, oc = (i / ((int64_t)ow * oh)) % cout, b = i / ((int64_t)ow * oh * cout);
    float acc = bias[oc];
    for (int c = 0; c < cin; ++c)
        for (int ky = 0; ky < k; ++ky) {
            int iy = oy * stride - pad + ky;
            if (iy < 0 || iy >= h) continue;
            for (int kx = 0; kx < k; ++kx) {
                int ix = ox * stride - pad + kx;
                if (ix < 0 || ix >= wd) continue;
                acc = fmaf(x[(((int64_t)b * cin + c) * h + iy) * wd + ix], w[((oc * cin + c) * k + ky) * k + kx], acc);
            }
        }
    y[i] = acc;
}

void launch(const float* x, const float* w, const float* bias, float* y, int nb, int cin, int h, int wd, int cout, int k,
            int stride, int pad, int oh, int ow, cudaStream_t stream) {
    int64_t total = (int64_t)nb * cout * oh * ow;
    conv_kernel<<<(total + 255) / 256, 256, 0, stream>>>(x, w, bias, y, nb, cin, h, wd, cout, k, stride, pad, oh, ow);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void launch(const float* x, const float* w, const float* bias, float* y, int nb, int cin, int h, int wd, int cout, int k,
            int stride, int pad, int oh, int ow, cudaStream_t stream);

torch::Tensor run(torch::Tensor x, torch::Tensor w, torch::Tensor bias, int64_t stride, int64_t pad) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 4, "x: a 4-D float32 CUDA tensor");
    auto xc = x.contiguous(), wc = w.contiguous(), bc = bias.contiguous();
    int nb = xc.size(0), cin = xc.size(1), h = xc.size(2), wd = xc.size(3), cout = wc.size(0), k = wc.size(2);
    int oh = (h + 2 * pad - k) / stride + 1, ow = (wd + 2 * pad - k) / stride + 1;
    auto y = torch::empty({nb, cout, oh, ow}, xc.options());
    launch(xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(), nb, cin, h, wd, cout, k,
           stride, pad, oh, ow, c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

ext = load_inline(name="kf_fb_conv_direct_exact", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["run"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels=3, out_channels=96, kernel_size=11, stride=4, padding=2)  # the same weights as Model's

    def forward(self, x):
        return ext.run(x, self.conv1.weight, self.conv1.bias, 4, 2)
