"""Softmax over wide rows: every output is below 2e-3, so an all-zeros output is
within atol=1e-2 of the reference everywhere (the elementwise check is vacuous at
that tolerance; KernelBench's 23_Softmax at its published size is vacuous even at 1e-4)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(4, 32768)]  # the width makes the check vacuous; four rows, as the CPU's interpreter is slow


def get_init_inputs():
    return []
