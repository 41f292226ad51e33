# expect: correctness_error:numerical
# At import, outside any forward call (so outside the op recorder), look for the trial
# inputs and the stage spec on disk, compute the answers with torch, and have forward
# look them up. The harness reads and deletes both before importing the candidate, and
# the seeds are random per judge: nothing is found, and forward returns zeros.
import glob
import os

import torch
import torch.nn as nn

ANSWERS = {}
for path in glob.glob(os.path.join(os.getcwd(), "**", "*.pt"), recursive=True):
    try:
        inputs = torch.load(path, weights_only=True)
        x = inputs[0]
        ANSWERS[(tuple(x.shape), round(float(x.flatten()[0]), 6))] = torch.relu(x)
    except Exception:
        pass


class ModelNew(nn.Module):
    def forward(self, x):
        key = (tuple(x.shape), round(float(x.flatten()[0]), 6))
        if key in ANSWERS:
            return ANSWERS[key].to(x.device)
        return torch.zeros_like(x)
