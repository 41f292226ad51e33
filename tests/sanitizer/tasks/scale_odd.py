"""y = 2x + 1 on a matrix whose row (1001 floats) is no multiple of a block or of a float4: the
sanitizer's out-of-bounds and misaligned cases run on it."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2.0 + 1.0


rows, cols = 4099, 1001


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
