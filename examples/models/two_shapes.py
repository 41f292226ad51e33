"""A model whose softmax gate runs at two shapes, as a user's script.

The gate scores a batch against 1000 local slots and, for all rows but the last, 4096 wide slots: one
module, two calls, rows of 1000 and rows of 4096. `kernelfix capture --calls all` captures both
(docs/capture.md); a kernel judged at one of them only may be wrong at the other.

    python examples/models/two_shapes.py [--device cpu] [--batch 8] [--local 1000] [--wide 4096]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn


class Gate(nn.Module):
    """Softmax over the last dimension, whatever its length."""

    def forward(self, x):
        return torch.softmax(x, dim=-1)


class TwoScales(nn.Module):
    def __init__(self, width: int = 64, local: int = 1000, wide: int = 4096):
        super().__init__()
        self.local_in, self.wide_in = nn.Linear(width, local), nn.Linear(width, wide)
        self.gate = Gate()
        self.local_out, self.wide_out = nn.Linear(local, width, bias=False), nn.Linear(wide, width, bias=False)

    def forward(self, h):
        a = self.local_out(self.gate(self.local_in(h)))  # rows of `local`
        b = self.wide_out(self.gate(self.wide_in(h[1:])))  # rows of `wide`, one row fewer
        return torch.cat([a, b])


def build(device: str = "cpu", local: int = 1000, wide: int = 4096) -> TwoScales:
    torch.manual_seed(0)
    return TwoScales(local=local, wide=wide).to(device).eval()


def inputs(device: str = "cpu", batch: int = 8) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randn(batch, 64, generator=g).to(device)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--local", type=int, default=1000)
    ap.add_argument("--wide", type=int, default=4096)
    args = ap.parse_args()
    model = build(args.device, args.local, args.wide)
    with torch.no_grad():
        out = model(inputs(args.device, args.batch))
    print(f"output {list(out.shape)}, checksum {out.sum().item():.6f}")
