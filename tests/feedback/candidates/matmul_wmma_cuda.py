# task: matmul_fp16
# defect: mma_sync_on_hopper
# line: wmma::mma_sync(acc[i][j], a_frag[i], b_frag[j], acc[i][j]);
"""C = A @ B in float16 with WMMA: 128 x 128 block tiles staged through shared memory, eight warps each
holding a 64 x 32 accumulator in fp32. Tiled and on the tensor cores, so no reuse or tensor-core finding
applies; but WMMA compiles to Ampere's mma.sync (HMMA), which on an H100 issues from each warp
synchronously and leaves much of Hopper's tensor throughput (wgmma, fed by TMA) unused."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <cstdint>

using namespace nvcuda;

constexpr int BM = 128, BN = 128, BK = 32;
constexpr int LDA = BK + 8, LDB = BN + 8;  // padded rows: conflict-free fragment loads, 32-byte aligned

__global__ void __launch_bounds__(256) matmul_wmma_kernel(const half* __restrict__ a, const half* __restrict__ b,
                                                          half* __restrict__ c, int n) {
    __shared__ __align__(128) half As[BM * LDA];
    __shared__ __align__(128) half Bs[BK * LDB];
    __shared__ __align__(128) float stage[8][16 * 16];
    const int t = threadIdx.x, warp = t / 32, lane = t % 32;
    const int wm = warp / 4, wn = warp % 4;  // 2 x 4 warps, each a 64 x 32 piece of the block tile
    const int64_t bm = (int64_t)blockIdx.y * BM, bn = (int64_t)blockIdx.x * BN;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
    for (int k0 = 0; k0 < n; k0 += BK) {
        for (int r = 0; r < 2; ++r) {  // 16-byte copies: A's tile is 128 rows of 4, B's 32 rows of 16
            int ra = t / 4 + r * 64, ca = (t % 4) * 8;
            *reinterpret_cast<uint4*>(&As[ra * LDA + ca]) = *reinterpret_cast<const uint4*>(&a[(bm + ra) * n + k0 + ca]);
            int rb = t / 16 + r * 16, cb = (t % 16) * 8;
            *reinterpret_cast<uint4*>(&Bs[rb * LDB + cb]) = *reinterpret_cast<const uint4*>(&b[(int64_t)(k0 + rb) * n + bn + cb]);
        }
        __syncthreads();
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a_frag[4];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b_frag[2];
            for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(a_frag[i], &As[(wm * 64 + i * 16) * LDA + kk], LDA);
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b_frag[j], &Bs[kk * LDB + wn * 32 + j * 16], LDB);
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 2; ++j)
                    wmma::mma_sync(acc[i][j], a_frag[i], b_frag[j], acc[i][j]);
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 2; ++j) {
            wmma::store_matrix_sync(stage[warp], acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            const int64_t row0 = bm + wm * 64 + i * 16, col0 = bn + wn * 32 + j * 16;
            for (int e = lane; e < 256; e += 32) c[(row0 + e / 16) * n + col0 + e % 16] = __float2half(stage[warp][e]);
            __syncwarp();
        }
}

void matmul_launch(const void* a, const void* b, void* c, int n, cudaStream_t stream) {
    dim3 grid(n / BN, n / BM);
    matmul_wmma_kernel<<<grid, 256, 0, stream>>>((const half*)a, (const half*)b, (half*)c, n);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void matmul_launch(const void* a, const void* b, void* c, int n, cudaStream_t stream);

torch::Tensor wmma_matmul(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.scalar_type() == torch::kHalf && b.scalar_type() == torch::kHalf, "fp16 CUDA tensors");
    TORCH_CHECK(a.dim() == 2 && a.size(0) == a.size(1) && b.sizes() == a.sizes() && a.size(0) % 128 == 0, "square, n a multiple of 128");
    auto ac = a.contiguous();
    auto bc = b.contiguous();
    auto c = torch::empty_like(ac);
    matmul_launch(ac.data_ptr(), bc.data_ptr(), c.data_ptr(), (int)ac.size(0), c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return c;
}
"""

ext = load_inline(name="kf_fb_matmul_wmma_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["wmma_matmul"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return ext.wmma_matmul(a, b)
