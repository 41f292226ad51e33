# behaviour: infinite GPU loop on every block of a large grid
# devices: cuda
# expect: runtime_error:timeout
# config: {"run_timeout_s": 15, "max_processes": 128, "output_limit_mb": 16}
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def spin_kernel(x_ptr, y_ptr, flag_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    # Waits on a flag nobody sets. The atomic is what makes this spin on the GPU: a loop
    # with no side effect (a counter, say) may be deleted by LLVM, and on the H100 it was,
    # so the kernel ended and was judged merely wrong.
    while tl.atomic_add(flag_ptr, 0) == 0:
        pass
    tl.store(y_ptr + offs, x, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        flag = torch.zeros(1, dtype=torch.int32, device=x.device)
        spin_kernel[(4096,)](x, y, flag, x.numel(), BLOCK=128)
        return y
