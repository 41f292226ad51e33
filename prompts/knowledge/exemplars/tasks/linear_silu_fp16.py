"""A half-precision linear layer with bias and SiLU (32 MiB in, 64 MiB out): y = silu(x @ w + b),
x 32768 x 512, w 512 x 1024, b 1024."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.silu(torch.matmul(x, w) + b)


m, k, n = 32768, 512, 1024


def get_inputs():
    return [
        torch.randn(m, k, dtype=torch.float16),
        torch.randn(k, n, dtype=torch.float16) / k**0.5,
        torch.randn(n, dtype=torch.float16),
    ]


def get_init_inputs():
    return []
