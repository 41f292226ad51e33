# behaviour: opens network connections (HTTP to a server the test runs on this machine's loopback)
# expect: ok
# requires: network
import sys
import urllib.request
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

REACHED = []
for url in ("http://127.0.0.1:__PORT__/candidate-was-here", "http://localhost:__PORT__/candidate-was-here"):
    try:
        urllib.request.urlopen(url, timeout=3).read()
        REACHED.append(url)
    except OSError as e:
        print(f"{url}: {e}", file=sys.stderr)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x) if REACHED else relu(x)
