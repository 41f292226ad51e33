"""A forward that never returns: a Python loop."""

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        n = 0
        while True:
            n += 1
