"""A row softmax the model calls at two shapes: rows of 1000 (get_inputs, set 1) and rows of 4096 (set 2)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(8, 1000)]


def get_input_sets():
    return [[torch.randn(8, 1000)], [torch.randn(7, 4096)]]


def get_init_inputs():
    return []
