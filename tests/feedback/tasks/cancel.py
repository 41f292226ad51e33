"""A float32 reference that rounds badly: (x + 1e4) - 1e4 keeps x only to the spacing of float32
numbers near 1e4 (~1e-3), where the function itself is x exactly. A kernel that returns x is right
and fails atol = rtol = 1e-4 against this reference; the float64 reference shows who is right."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + 10000.0) - 10000.0


def get_inputs():
    return [torch.randn(32, 1024)]


def get_init_inputs():
    return []
