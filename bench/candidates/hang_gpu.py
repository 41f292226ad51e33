"""A kernel that never ends (spins on an atomic the GPU cannot elide)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def spin_kernel(flag_ptr, y_ptr):
    v = tl.atomic_add(flag_ptr, 0)
    while v == 0:
        v = tl.atomic_add(flag_ptr, 0)
    tl.store(y_ptr, v)


class ModelNew(nn.Module):
    def forward(self, x):
        flag = torch.zeros(1, dtype=torch.int32, device=x.device)
        y = torch.empty(1, dtype=torch.int32, device=x.device)
        spin_kernel[(1,)](flag, y)
        return x
