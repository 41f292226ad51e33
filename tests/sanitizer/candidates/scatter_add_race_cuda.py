# task: scatter_add
# defect: global_race
# expect: correctness_error:numerical
# line: if (i < n) out[idx[i]] += src[i];
"""A scatter-add with out[idx[i]] += src[i] and no atomic: about a thousand threads add into each bin, those that
read the bin at the same time write back their own sum, and the other updates are lost. Memcheck, racecheck
(shared memory only), synccheck and initcheck have nothing to report."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void scatter_add_kernel(const float* __restrict__ src, const int64_t* __restrict__ idx, float* __restrict__ out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[idx[i]] += src[i];
}

void launch(const float* src, const int64_t* idx, float* out, int64_t n, cudaStream_t stream) {
    if (n > 0) scatter_add_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(src, idx, out, n);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void launch(const float* src, const int64_t* idx, float* out, int64_t n, cudaStream_t stream);

torch::Tensor run(torch::Tensor src, torch::Tensor idx, int64_t bins) {
    TORCH_CHECK(src.is_cuda() && src.scalar_type() == torch::kFloat32 && idx.scalar_type() == torch::kInt64, "float32 src, int64 idx");
    auto s = src.contiguous();
    auto i = idx.contiguous();
    auto out = torch::zeros({bins}, s.options());
    launch(s.data_ptr<float>(), i.data_ptr<int64_t>(), out.data_ptr<float>(), s.numel(), c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

ext = load_inline(name="kf_san_scatter_add_race", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["run"],
                  no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, src: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return ext.run(src, idx, 4096)
