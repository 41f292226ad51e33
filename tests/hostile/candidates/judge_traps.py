# behaviour: plants symlinks and FIFOs where the judge reads its outputs, to hang it or make it read its own files
# expect: correctness_error:output_structure
import os
import sys
from pathlib import Path
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def relu(x):
    y = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y

OUT = Path(__file__).resolve().parent / "out"
if Path(sys.argv[1]).name.startswith("compile."):  # ahead of the stages that write there
    for name, plant in (("correctness", lambda p: p.symlink_to("/")), ("legality", os.mkfifo)):
        try:
            plant(OUT / name)
        except OSError:
            pass


class ModelNew(nn.Module):
    def forward(self, x):
        # the outputs the harness saved after earlier trials become FIFOs before the judge reads them
        for f in (OUT / "correctness").glob("out_*.pt"):
            if not f.is_fifo():
                f.unlink()
                os.mkfifo(f)
        return relu(x)
