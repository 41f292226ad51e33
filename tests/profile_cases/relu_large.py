"""ReLU over 32M floats (128 MB in, 128 MB out): far beyond the L2, so DRAM bandwidth limits it."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(1 << 25)]


def get_init_inputs():
    return []
