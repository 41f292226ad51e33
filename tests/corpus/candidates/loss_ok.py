# task: mse_loss
# expect: ok
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sq_diff_partial_kernel(p_ptr, t_ptr, part_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    d = tl.load(p_ptr + offs, mask=mask, other=0.0) - tl.load(t_ptr + offs, mask=mask, other=0.0)
    tl.store(part_ptr + pid, tl.sum(d * d, 0))


@triton.jit
def mean_kernel(part_ptr, y_ptr, n_parts, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_parts, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(part_ptr + offs, mask=offs < n_parts, other=0.0)
    tl.store(y_ptr, tl.sum(acc, 0) / n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        p, t = predictions.contiguous(), targets.contiguous()
        n = p.numel()
        block = 4096
        parts = torch.empty(triton.cdiv(n, block), device=p.device, dtype=torch.float32)
        sq_diff_partial_kernel[(parts.numel(),)](p, t, parts, n, BLOCK=block)
        y = torch.empty((), device=p.device, dtype=p.dtype)
        mean_kernel[(1,)](parts, y, parts.numel(), n, BLOCK=128)
        return y
