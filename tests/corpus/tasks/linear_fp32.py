"""A float32 linear layer (KernelBench level-2 style Gemm), small enough for the CPU
Triton interpreter. nn.Linear's init keeps outputs near unit scale, so fp16
arithmetic inside it lands well within atol=rtol=1e-2 of the reference."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def get_inputs():
    return [torch.randn(32, 512)]


def get_init_inputs():
    return [512, 128]
