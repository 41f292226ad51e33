"""A per-column affine map of a row-major matrix (256 MiB in, 256 MiB out): y = x * w + b, w and b per column."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return x * w + b


rows, cols = 8192, 8192


def get_inputs():
    return [torch.randn(rows, cols), torch.randn(cols), torch.randn(cols)]


def get_init_inputs():
    return []
