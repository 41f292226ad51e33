"""Sums of 64 long rows (64 x 65536, 16 MiB in): sum over dim 1, keepdim."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=1, keepdim=True)


rows, cols = 64, 65536


def get_inputs():
    return [torch.rand(rows, cols)]


def get_init_inputs():
    return []
