"""``[tune]`` in kernelfix.toml: how `kernelfix tune` ranks a model and decides what to keep.

    [tune]
    top = 3                  # modules to optimize (--top)
    min_share = 0.01         # a module under this share of the forward is not worth a kernel
    profile_steps = 10       # forwards (forward+backward with --backward) profiled for the ranking
    rounds = 20              # timing rounds of the keep decision (each times both models)
    round_ms = 50.0          # each model's calls per round: about this long, at least 3
    min_gain = 0.01          # a kept swap makes the forward at least this much faster (median)
    noise_quantile = 0.1     # ... and faster in all but this share of the rounds
    compile_backend = "inductor"
    trials = "each"          # or "together": every correct swap at once first (one compile of a large model)
    library_ops = ["mm", "addmm", ...]   # ATen ops kernels may call: the vendor's GEMM and attention

Light at import (pydantic only): kernelfix.cli.config_file reads it for every command.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelfix.tools.legality.allowlist import LIBRARY_GEMM_ATTENTION as LIBRARY_OPS  # light: no torch


class TuneConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    top: int = Field(3, ge=1, description="modules to capture and optimize, in the ranking's order")
    min_share: float = Field(
        0.01, ge=0, lt=1, description="below this share of the forward a module is not worth a kernel"
    )
    profile_steps: int = Field(
        10, ge=1, description="forwards (or forward+backward steps) profiled for the ranking, after 3 untimed"
    )
    max_calls: int = Field(8, ge=1, description="capture --calls all: at most this many signatures per module")
    rounds: int = Field(
        20, ge=3, description="timing rounds of the keep decision; each times the original and the swapped model"
    )
    round_ms: float = Field(
        50.0, gt=0, description="each model's calls in a round last about this long (at least 3 calls)"
    )
    min_gain: float = Field(
        0.01, ge=0, description="a kept swap's median speedup of the forward is at least 1 + min_gain"
    )
    noise_quantile: float = Field(
        0.1,
        gt=0,
        lt=0.5,
        description="a kept swap is faster in the rounds' ratios down to this quantile: the lower end of its own spread is above 1",
    )
    compile_backend: str = Field(
        "inductor", description="torch.compile backend of the compiled timing (fullgraph=True)"
    )
    trials: Literal["each", "together"] = Field(
        "each",
        description="each: every swap tried alone, then the kept and promising ones together; together: all correct swaps "
        "at once first (one compile of the model: for a large model, where each compile takes a minute), each alone only "
        "when together they are not kept",
    )
    library_ops: list[str] = Field(
        default_factory=lambda: list(LIBRARY_OPS),
        description="ATen ops a tune's kernels may call (the vendor's GEMM and attention): they fuse everything around them, "
        "as Liger Kernel does; [] for kernels that do all the work themselves",
    )
