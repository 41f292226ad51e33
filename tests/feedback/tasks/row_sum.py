"""Row sums of a wide matrix (512 MiB in): sum over dim 1, keepdim."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=1, keepdim=True)


rows, cols = 16384, 8192


def get_inputs():
    return [torch.rand(rows, cols)]


def get_init_inputs():
    return []
