"""A half-precision square matrix product, 8192 x 8192 (384 MiB of operands and result): C = A @ B."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


n = 8192


def get_inputs():
    return [torch.randn(n, n, dtype=torch.float16), torch.randn(n, n, dtype=torch.float16) / n**0.5]


def get_init_inputs():
    return []
