"""A batched transpose into a new contiguous tensor (256 MiB in, 256 MiB out): y[b] = x[b].T."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2).contiguous()


batch, rows, cols = 4, 4096, 4096


def get_inputs():
    return [torch.randn(batch, rows, cols)]


def get_init_inputs():
    return []
