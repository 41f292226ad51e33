"""[workers] CUDA-event timing, the same way for the baselines and the candidate.

Warm-up first (compilation, autotuning, caches), then at least ``runs`` calls,
each between two events on the current stream, with L2 flushed between calls
outside the timed region (a buffer of 4x the L2 size zeroed). Median, mean,
spread. Runs in a worker process, on the entry points :class:`Cuda` binds
before any candidate code exists. ``on_progress`` is called between blocks of
calls (after a device sync): a worker reports progress there, so a kernel that
hangs mid-timing is noticed by the judge's inactivity deadline.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

# Bound before the candidate exists: a candidate that replaces time.perf_counter changes nothing here.
perf_counter = time.perf_counter

BLOCK = 25  # timed calls between device syncs (and progress reports)


class Cuda:
    """The C-level CUDA entry points, taken before candidate code can patch the Python wrappers."""

    sync: Callable[[], None]
    Event: Any
    record: Callable[..., None]
    elapsed: Callable[..., float]
    stream: Any
    empty_cache: Callable[[], None]

    @classmethod
    def bind(cls) -> None:
        import torch

        cls.sync = torch._C._cuda_synchronize
        cls.empty_cache = torch._C._cuda_emptyCache
        cls.Event = torch._C._CudaEventBase
        cls.record = torch._C._CudaEventBase.record
        cls.elapsed = torch._C._CudaEventBase.elapsed_time
        cls.stream = torch.cuda.current_stream()


def stats(times_ms: list[float]) -> dict[str, float]:
    s = sorted(times_ms)

    def q(p: float) -> float:
        return s[min(len(s) - 1, max(0, round(p * (len(s) - 1))))]

    return {
        "median_ms": statistics.median(s),
        "mean_ms": statistics.fmean(s),
        "std_ms": statistics.pstdev(s) if len(s) > 1 else 0.0,
        "min_ms": s[0],
        "p10_ms": q(0.10),
        "p90_ms": q(0.90),
        "runs": len(s),
    }


def l2_flush_buffer(enabled: bool):
    import torch

    if not enabled:
        return None
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    return torch.empty(max(4 * l2, 64 << 20) // 4, dtype=torch.int32, device="cuda")


def time_cuda(
    fn: Callable[[], Any], runs: int, warmup_ms: float, budget_s: float, flush, on_progress: Callable[[int], None] | None = None
) -> dict[str, float]:
    """CUDA events around each call; L2 flushed between calls outside the timed region."""
    Cuda.sync()
    t0 = perf_counter()
    n = 0
    while True:
        fn()
        Cuda.sync()
        n += 1
        elapsed = perf_counter() - t0
        if (elapsed * 1000 >= warmup_ms and n >= 3) or n >= 1000 or elapsed > budget_s / 4:
            break
    per_call = max(elapsed / n, 1e-6)
    runs = max(min(runs, int(budget_s / per_call)), min(runs, 10))
    times: list[float] = []
    for block in range(0, runs, BLOCK):
        k = min(BLOCK, runs - block)
        starts = [Cuda.Event(enable_timing=True) for _ in range(k)]
        ends = [Cuda.Event(enable_timing=True) for _ in range(k)]
        for i in range(k):
            if flush is not None:
                flush.zero_()
            Cuda.record(starts[i], Cuda.stream)
            fn()
            Cuda.record(ends[i], Cuda.stream)
        Cuda.sync()
        times += [Cuda.elapsed(s, e) for s, e in zip(starts, ends)]
        if on_progress is not None:
            on_progress(len(times))
    return stats(times)


def bandwidth_gbps() -> float:
    """Device-memory bandwidth, counting bytes read plus written, by a large copy."""
    import torch

    n = 256 << 20
    a = torch.empty(n // 4, dtype=torch.float32, device="cuda").normal_()
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    s, e = Cuda.Event(enable_timing=True), Cuda.Event(enable_timing=True)
    Cuda.record(s, Cuda.stream)
    for _ in range(10):
        b.copy_(a)
    Cuda.record(e, Cuda.stream)
    Cuda.sync()
    ms = Cuda.elapsed(s, e) / 10
    del a, b
    return 2 * n / (ms / 1000) / 1e9
