"""The replay files of examples/tune/hf/ (one per transformers module class), written from the kernels in src/.

    python examples/tune/hf/make_replays.py            # write every <ModuleClass>.jsonl
    python examples/tune/hf/make_replays.py --check    # exit 1 if a .jsonl differs from what src/ gives

Every kernel here is hand-written for `kernelfix tune`'s proof on an H200 (docs/tune.md, "Hand-written kernels for
the H200 proof"): no language model wrote them. `kernelfix tune --model replay:examples/tune/hf` answers a module's
session by its class name (`LlamaMLP.jsonl`), with one assistant message: the prose and the kernel's source in a
```python block, as a model's reply would hold it. One source may serve several classes (an RMSNorm is an RMSNorm);
`SUBST` puts a class's own constants in (Mixtral's RMSNorm epsilon).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
HAND = "Hand-written for kernelfix's H200 proof (no language model wrote this kernel)."


class Replay(NamedTuple):
    source: str  # the file in src/
    what: str  # what the kernel fuses, for the message's prose
    subst: dict[str, str] = {}  # exact source line -> the class's own line


NORM = "One Triton pass per row block: fp32 sum of squares, rsqrt, the cast to the input's dtype and the weight (one read, one write); backward one pass for dx plus a deterministic two-step sum for dweight (no atomics)."
MLP = "cuBLAS GEMMs for gate, up and down; silu(gate) * up in one Triton pass, and its backward in one pass; x's two gradients summed in cuBLAS's epilogue (addmm)."
ATTN = "cuBLAS GEMMs for the q/k/v/o projections; RoPE on q and k plus the cache's k/v layout in one Triton pass (its transpose in backward, also the cos/sin gradients when asked); attention as torch's scaled_dot_product_attention (cuDNN/flash), causal, GQA native."
EXPERTS = "The routed choices counting-sorted by expert in one Triton program (offsets and destination rows, no atomics), the tokens gathered in Triton, both projections as torch's grouped GEMM, silu(gate) * up in one Triton pass between them, and the routing-weighted combine in one Triton pass (fp32 sums, no scatter)."
MIXTRAL_ATTN = {
    "    def forward(self, hidden_states, position_ids, cos, sin):": "    def forward(self, hidden_states, cos, sin, position_ids):"
}
MIXTRAL_EPS = {
    "EPS = 1e-6  # the module's variance_epsilon (Llama's and Qwen3's default)": "EPS = 1e-5  # the module's variance_epsilon (Mixtral's default)"
}

REPLAYS: dict[str, Replay] = {
    "LlamaRMSNorm": Replay("rmsnorm.py", NORM),
    "Qwen3MoeRMSNorm": Replay("rmsnorm.py", NORM),
    "Qwen3RMSNorm": Replay("rmsnorm.py", NORM),
    "MixtralRMSNorm": Replay("rmsnorm.py", NORM, MIXTRAL_EPS),
    "LlamaMLP": Replay("swiglu_mlp.py", MLP),
    "Qwen3MLP": Replay("swiglu_mlp.py", MLP),
    "LlamaAttention": Replay("rope_attention.py", ATTN),
    "MixtralAttention": Replay("rope_attention.py", ATTN, MIXTRAL_ATTN),  # its forward takes position_ids last
    "Qwen3MoeExperts": Replay("moe_experts.py", EXPERTS),
    "MixtralExperts": Replay("moe_experts.py", EXPERTS),
}


def source(name: str) -> str:
    """The kernel's source for one module class, its constants put in."""
    r = REPLAYS[name]
    text = (SRC / r.source).read_text(encoding="utf-8")
    for old, new in r.subst.items():
        if old not in text:
            raise ValueError(f"src/{r.source} has no line {old!r} for {name}")
        text = text.replace(old, new)
    return text


def replay_line(name: str) -> str:
    """The replay file's one line for a module class: an assistant message with the kernel in a python block."""
    r = REPLAYS[name]
    content = f"{HAND} {r.what}\n\n```python\n{source(name)}```"
    return (
        json.dumps({"content": content, "reasoning_content": f"{name}: hand-written kernel (src/{r.source})."}) + "\n"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = ap.parse_args()
    stale = []
    for name in REPLAYS:
        path = HERE / f"{name}.jsonl"
        line = replay_line(name)
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != line:
                stale.append(path.name)
        else:
            path.write_text(line, encoding="utf-8")
    if stale:
        print(
            f"stale replay files (run python {Path(__file__).relative_to(Path.cwd()) if Path.cwd() in Path(__file__).parents else __file__}): {', '.join(stale)}"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
