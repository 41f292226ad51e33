"""A transpose into a new contiguous matrix (256 MiB in, 256 MiB out)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.t().contiguous()


n = 8192


def get_inputs():
    return [torch.randn(n, n)]


def get_init_inputs():
    return []
