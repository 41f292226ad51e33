"""Square fp16 matmul, 4096^3 (137 GFLOP on 96 MB): tensor-core compute limits it."""

import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(N, N).half(), torch.randn(N, N).half()]


def get_init_inputs():
    return []
