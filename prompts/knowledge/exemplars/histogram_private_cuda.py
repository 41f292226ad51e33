"""torch.histc(x, 256, 0, 1) with privatized histograms: each warp counts into its own 256 bins in shared
memory (integer shared-memory atomics, contended only within the warp), the block adds its warps' copies,
and issues one global atomicAdd per bin: 256 global atomics per block instead of one per element. A
persistent grid (SMs x resident blocks) reads x once with 16-byte loads."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

constexpr int BINS = 256, THREADS = 512, WARPS = THREADS / 32;

__device__ __forceinline__ void count(unsigned* h, float v) {
    if (v >= 0.0f && v <= 1.0f) {  // histc's range; a value equal to max goes to the last bin
        int bin = (int)(v * 256.0f);
        atomicAdd(&h[bin < BINS ? bin : BINS - 1], 1u);
    }
}

__global__ void __launch_bounds__(THREADS) histogram_kernel(const float* __restrict__ x, float* __restrict__ hist, int64_t n,
                                                            bool aligned) {
    __shared__ unsigned h[WARPS][BINS];  // one private histogram per warp
    for (int i = threadIdx.x; i < WARPS * BINS; i += THREADS) (&h[0][0])[i] = 0u;
    __syncthreads();
    unsigned* mine = h[threadIdx.x / 32];
    const int64_t tid = (int64_t)blockIdx.x * THREADS + threadIdx.x, stride = (int64_t)gridDim.x * THREADS;
    int64_t done = 0;
    if (aligned) {  // float4 loads over the bulk, scalars for the last n % 4
        const float4* x4 = reinterpret_cast<const float4*>(x);
        for (int64_t i = tid; i < n / 4; i += stride) {
            float4 v = x4[i];
            count(mine, v.x); count(mine, v.y); count(mine, v.z); count(mine, v.w);
        }
        done = n / 4 * 4;
    }
    for (int64_t i = done + tid; i < n; i += stride) count(mine, x[i]);
    __syncthreads();
    for (int b = threadIdx.x; b < BINS; b += THREADS) {
        unsigned total = 0;
        for (int w = 0; w < WARPS; ++w) total += h[w][b];
        if (total) atomicAdd(&hist[b], (float)total);  // one global atomic per bin per block
    }
}

void histogram_launch(const float* x, float* hist, int64_t n, cudaStream_t stream) {
    static int grid = 0;  // SMs x resident blocks per SM, asked once
    if (grid == 0) {
        int dev = 0, sms = 0, per_sm = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, histogram_kernel, THREADS, 0);
        grid = sms * (per_sm > 0 ? per_sm : 1);
    }
    cudaMemsetAsync(hist, 0, BINS * sizeof(float), stream);
    if (n == 0) return;
    const int64_t needed = (n / 4 + THREADS - 1) / THREADS;
    const int blocks = (int)(needed < grid ? (needed > 0 ? needed : 1) : grid);
    histogram_kernel<<<blocks, THREADS, 0, stream>>>(x, hist, n, reinterpret_cast<uintptr_t>(x) % 16 == 0);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void histogram_launch(const float* x, float* hist, int64_t n, cudaStream_t stream);

torch::Tensor histogram(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be a float32 CUDA tensor");
    auto xc = x.contiguous();
    auto hist = torch::empty({256}, xc.options());
    histogram_launch(xc.data_ptr<float>(), hist.data_ptr<float>(), xc.numel(), c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return hist;
}
"""

ext = load_inline(
    name="kf_kb_histogram_private",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["histogram"],
    no_implicit_headers=True,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.histogram(x)
