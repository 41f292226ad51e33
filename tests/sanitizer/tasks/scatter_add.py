"""A scatter-add with repeated indices: 4M values added into 4096 bins by an index tensor (each bin gets about a
thousand), as torch's index_add_ does it."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, src: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return torch.zeros(bins, device=src.device, dtype=src.dtype).index_add_(0, idx, src)


n, bins = 4 * 1024 * 1024, 4096


def get_inputs():
    return [torch.rand(n), torch.randint(0, bins, (n,))]


def get_init_inputs():
    return []
