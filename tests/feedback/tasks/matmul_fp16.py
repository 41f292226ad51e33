"""A half-precision square matrix product (tensor-core work): C = A @ B, 4096 x 4096."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


n = 4096


def get_inputs():
    return [torch.randn(n, n, dtype=torch.float16), torch.randn(n, n, dtype=torch.float16)]


def get_init_inputs():
    return []
