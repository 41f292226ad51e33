"""SiLU of a flat vector (256 MiB in, 256 MiB out): y = x * sigmoid(x)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


n = 64 * 1024 * 1024


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
