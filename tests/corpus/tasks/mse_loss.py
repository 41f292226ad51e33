"""Mean squared error of two randn tensors: its expected value is 2, and on 2^19
elements each trial's loss lies within 0.02 of it, inside atol + rtol * 2."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean((predictions - targets) ** 2)


def get_inputs():
    return [torch.randn(128, 4096), torch.randn(128, 4096)]


def get_init_inputs():
    return []
