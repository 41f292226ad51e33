"""y = 2x: a tiny elementwise task (the batch example and tests)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2.0


def get_inputs():
    return [torch.randn(8, 1024)]


def get_init_inputs():
    return []
