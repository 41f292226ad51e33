import this_module_does_not_exist  # noqa: F401
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x


def get_inputs():
    return [torch.randn(4)]


def get_init_inputs():
    return []
