# expect: runtime_error:timeout
# config: {"forward_timeout_s": 3, "cpu_forward_timeout_s": 3}
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def spin_kernel(x_ptr, y_ptr, flag_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    # Waits for a flag nobody sets. The atomic keeps the compiler from proving the loop
    # side-effect free (an infinite loop without side effects is undefined, and gets removed).
    while tl.atomic_add(flag_ptr, 0) == 0:
        pass
    tl.store(y_ptr + offs, x, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        flag = torch.zeros(1, dtype=torch.int32, device=x.device)
        spin_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, flag, x.numel(), BLOCK=1024)
        return y
