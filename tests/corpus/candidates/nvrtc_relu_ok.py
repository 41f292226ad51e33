# expect-cpu: infra:no_gpu
# expect-cuda: ok
# A raw kernel compiled by NVRTC (torch.cuda._compile_kernel), launched on the current stream:
# accepted like a load_inline kernel (docs/compile.md, "NVRTC kernels").
import torch
import torch.nn as nn

relu_source = r"""
extern "C" __global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);
}
"""

relu_kernel = torch.cuda._compile_kernel(relu_source, "relu_kernel")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel(grid=((n + 255) // 256, 1, 1), block=(256, 1, 1), args=[x, y, n])
        return y
