# behaviour: copies another evaluation's outputs for the same trials (the judge's earlier, correct candidate) instead of computing
# expect: correctness_error:numerical
# requires: filesystem
# needs-prior-ok: yes
from pathlib import Path

import torch
import torch.nn as nn

EVALS = Path(__file__).resolve().parent.parent
ANSWERS = []  # (inputs, outputs) of other evaluations of this judge
for d in EVALS.iterdir():
    try:
        for out in (d / "out" / "correctness").glob("out_[0-9]*.pt"):
            idx = out.stem.split("_")[1]
            ANSWERS.append((torch.load(d / "inputs" / f"inputs_{idx}.pt")[0], torch.load(out)))
    except OSError:
        pass


class ModelNew(nn.Module):
    def forward(self, x):
        for inputs, output in ANSWERS:
            if inputs.shape == x.shape and torch.equal(inputs, x):
                return output.clone()
        return torch.zeros_like(x)
