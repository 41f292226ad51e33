"""[workers] CUDA-event timing, the same way for the baselines and the candidate.

Warm-up first (compilation, autotuning, caches), then up to ``timing_runs`` calls,
each between two events on the current stream, with L2 flushed between calls
outside the timed region (a buffer of 4x the L2 size zeroed), in blocks: after
a block the calls stop early once the median has settled (``settled``). Median,
mean, spread. Runs in a worker process, on the entry points :class:`Cuda` binds
before any candidate code exists. ``on_progress`` is called between blocks of
calls (after a device sync): a worker reports progress there, so a kernel that
hangs mid-timing is noticed by the judge's inactivity deadline.
"""

from __future__ import annotations

import math
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
    _current_stream: Callable[[], Any]

    @classmethod
    def bind(cls, *, stream: bool = True) -> None:
        """``stream=False``: all but the current stream, whose query starts CUDA: ``start`` queries it later (the
        sanitizer's tool runs bind before the candidate's import and start CUDA once the stage has room on the GPU)."""
        import torch

        cls.sync = torch._C._cuda_synchronize
        cls.empty_cache = torch._C._cuda_emptyCache
        cls.Event = torch._C._CudaEventBase
        cls.record = torch._C._CudaEventBase.record
        cls.elapsed = torch._C._CudaEventBase.elapsed_time
        cls._current_stream = torch.cuda.current_stream
        if stream:
            cls.start()

    @classmethod
    def start(cls) -> None:
        """CUDA started, through the current stream's query as it was when bound."""
        cls.stream = cls._current_stream()


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
    fn: Callable[[], Any], timing: dict[str, Any], flush, on_progress: Callable[[int], None] | None = None
) -> dict[str, float]:
    """CUDA events around each call; L2 flushed between calls outside the timed region. ``timing``: the judge's
    timing settings (``timing.baselines.timing_settings``), the same for the baselines and the candidate."""
    runs, warmup_ms, budget_s = timing["timing_runs"], timing["warmup_ms"], timing["timing_budget_s"]
    settle_s, precision = timing.get("timing_settle_s", 0.0), timing.get("timing_precision", 0.0)
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
        if settled(times, settle_s, precision):
            break
    return stats(times)


def settled(times_ms: list[float], settle_s: float, precision: float) -> bool:
    """Whether the timed calls may stop before ``timing_runs``: they hold at least ``settle_s`` of the GPU's time
    (Triton's ``do_bench`` times 100 ms) and the median is pinned, its 95% confidence interval (distribution-free:
    order statistics around the middle rank) within ``precision`` of it. A 4.2 ms kernel stops after one block of
    25 calls where 100 took 0.42 s; a kernel under 1.3 ms makes every call it made before; a noisy one too.
    ``settle_s`` 0: never early."""
    n = len(times_ms)
    if settle_s <= 0 or n < BLOCK or sum(times_ms) < settle_s * 1e3:
        return False
    s = sorted(times_ms)
    half = 0.98 * math.sqrt(n)  # 1.96 standard deviations of the rank of the median, sqrt(n)/2
    lo, hi = max(0, math.floor(n / 2 - half) - 1), min(n - 1, math.ceil(n / 2 + 1 + half) - 1)
    med = statistics.median(s)
    return med > 0 and (s[hi] - s[lo]) <= precision * med


# The wall-clock check's length: back-to-back calls filling about WALL_WINDOW_S, at least WALL_MIN_CALLS and at most
# WALL_MAX_CALLS. What it resolves is the judge's stamps' error (the channel's latency and one sync: under a
# millisecond) over the calls, against a threshold of half the events' time per call: 11 calls of a 4.2 ms kernel
# leave it under 2.2%. A kernel under 25 us still makes 2000 calls, one between 25 us and 0.1 ms 500 to 2000 (was
# 2000). It was 0.2 s; 0.05 s took 0.15 s off a 6 GiB ReLU's verdict (docs/service.md, "A warm verdict's last second").
WALL_WINDOW_S = 0.05
WALL_MIN_CALLS = 10
WALL_MAX_CALLS = 2000


def wall_check_calls(median_ms: float) -> int:
    """The wall-clock check's number of back-to-back calls, for a callable of this median time (above)."""
    return int(min(WALL_MAX_CALLS, max(WALL_MIN_CALLS, WALL_WINDOW_S / max(median_ms / 1000, 1e-6))))


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
