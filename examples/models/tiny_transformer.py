"""A small decoder-only transformer, as a user's own training or inference script would build it.

    python examples/models/tiny_transformer.py [--device cuda] [--dim 32] [--seq 8] [--batch 2] [--train]

Token and position embeddings, --layers blocks of causal self-attention and an MLP
(pre-norm, residual), a final norm and a language-model head. It builds the model
under a fixed seed, runs one forward over random token ids and prints a checksum of
the logits (with --train: one training step, and the loss). `kernelfix capture` runs it unchanged to lift one submodule out as a
task (docs/capture.md):

    kernelfix capture examples/models/tiny_transformer.py --module model.blocks.0.attn --out captured/attn.py
    kernelfix capture examples/models/tiny_transformer.py --module model.blocks.1.mlp --out captured/mlp.py
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, max_seq: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("causal", torch.tril(torch.ones(max_seq, max_seq, dtype=torch.bool)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        D = C // self.heads
        q, k, v = self.qkv(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.heads, D).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        att = att.masked_fill(~self.causal[:T, :T], float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.fc = nn.Linear(dim, 4 * dim)
        self.act = nn.SiLU()
        self.proj = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, max_seq: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, max_seq)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int = 256, dim: int = 32, heads: int = 2, layers: int = 2, max_seq: int = 64):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, max_seq) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def build(device: str = "cpu", dim: int = 32, seq: int = 8, layers: int = 2) -> TinyTransformer:
    torch.manual_seed(0)
    return TinyTransformer(dim=dim, layers=layers, max_seq=max(seq, 64)).to(device).eval()


def tokens(device: str = "cpu", batch: int = 2, seq: int = 8, vocab: int = 256) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, vocab, (batch, seq), generator=g).to(device)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--seq", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument(
        "--train", action="store_true", help="one training step (next-token cross-entropy, SGD) instead of a forward"
    )
    args = p.parse_args()
    model = build(args.device, args.dim, args.seq, args.layers)
    ids = tokens(args.device, args.batch, args.seq)
    if args.train:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        logits = model(ids)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        print(f"loss {loss.item():.6f}")
        return
    with torch.no_grad():
        logits = model(ids)
    print(f"logits {list(logits.shape)}, checksum {logits.double().sum().item():.6f}")


if __name__ == "__main__":
    main()
