"""y = relu(x * w + b) + r in one pass: each element of x and r is read once and y written once (384 MiB),
the intermediate values never leave registers. At the DRAM roofline this is the whole game: the only way
to go faster is to move fewer bytes."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fused_kernel(x_ptr, w_ptr, b_ptr, r_ptr, y_ptr, rows, cols, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask_n = rn < cols
    w = tl.load(w_ptr + rn, mask=mask_n)
    b = tl.load(b_ptr + rn, mask=mask_n)
    mask = (rm[:, None] < rows) & mask_n[None, :]
    offs = rm[:, None].to(tl.int64) * cols + rn[None, :]
    x = tl.load(x_ptr + offs, mask=mask)
    r = tl.load(r_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x * w[None, :] + b[None, :], 0.0) + r, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        x, w, b, r = x.contiguous(), w.contiguous(), b.contiguous(), r.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        BM, BN = 8, 512
        fused_kernel[(triton.cdiv(rows, BM), triton.cdiv(cols, BN))](
            x, w, b, r, y, rows, cols, BM=BM, BN=BN, num_warps=4
        )
        return y
