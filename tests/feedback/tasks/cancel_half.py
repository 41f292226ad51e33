"""cancel.py in half precision: (x + 100) - 100 keeps x only to the spacing of float16 numbers near
100 (1/16), where the function is x exactly. A kernel that returns x is right and fails float16's
atol/rtol against this reference; a float64 run of the task shows who is right."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + 100.0) - 100.0


def get_inputs():
    return [torch.randn(32, 1024).half()]


def get_init_inputs():
    return []
