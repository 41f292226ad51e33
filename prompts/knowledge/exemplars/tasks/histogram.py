"""A 256-bin histogram of 64M values in [0, 1) (256 MiB in, 1 KiB out): torch.histc, counts as float32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.histc(x, bins=256, min=0.0, max=1.0)


n = 64 * 1024 * 1024


def get_inputs():
    return [torch.rand(n)]


def get_init_inputs():
    return []
