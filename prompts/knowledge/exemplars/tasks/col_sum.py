"""Column sums of a tall matrix (256 MiB in, 8 KiB out): y = x.sum(dim=0), x 32768 x 2048."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=0)


rows, cols = 32768, 2048


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
