"""A single-precision product with a long inner dimension and a small output (128 MiB of operands, a 512 x 512
result): C = A @ B, A 512 x 32768, B 32768 x 512. Output tiles alone give too few programs to fill the GPU."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


m, k, n = 512, 32768, 512


def get_inputs():
    return [torch.randn(m, k), torch.randn(k, n) / k**0.5]


def get_init_inputs():
    return []
