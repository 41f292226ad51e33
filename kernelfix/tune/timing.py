"""Time the model's forward (or training step) in paired rounds, end to end.

Each call is timed alone: on a GPU between two CUDA events with a synchronize after it (the forward's
latency as the caller sees it, launch gaps included), on a CPU by the wall clock. Every callable is
warmed up first (compilation, autotuning, caches). Then ``rounds`` rounds: in each, every callable
runs the same number of calls back to back, in an order that rotates from round to round, and the
round keeps each one's median call. :func:`kernelfix.tune.decide.compare` reads the pairs.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

WARMUP_CALLS = 3
MIN_CALLS, MAX_CALLS = 3, 200


def call_ms(fn: Callable[[], object], device: torch.device) -> float:
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    fn()
    return 1e3 * (time.perf_counter() - t0)


def paired_rounds(
    fns: list[Callable[[], object]], device: torch.device, *, rounds: int, round_ms: float
) -> tuple[list[list[float]], int]:
    """Per callable, its median call in each round; and the calls per round (the same for all)."""
    slowest = 0.0
    for fn in fns:
        for _ in range(WARMUP_CALLS - 1):
            fn()
        slowest = max(slowest, call_ms(fn, device))
    calls = max(MIN_CALLS, min(MAX_CALLS, int(round_ms / max(slowest, 1e-3))))
    out: list[list[float]] = [[] for _ in fns]
    n = len(fns)
    for r in range(rounds):
        for k in [(r + j) % n for j in range(n)]:
            out[k].append(statistics.median(call_ms(fns[k], device) for _ in range(calls)))
    return out, calls
