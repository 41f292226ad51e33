"""The timed calls stop early once the median has settled (tools/timing/clock.py, ``settled``).

A 6 GiB ReLU (4.2 ms) made 100 timed calls, 0.42 s of a 2.07 s warm verdict on the H100; Triton's
``do_bench`` times 100 ms. Here ``time_cuda`` runs on the CPU against scripted CUDA events: the loop
itself, its blocks and its stopping rule, as the candidate's worker and the reference's run it.
"""

from __future__ import annotations

import itertools

import pytest

from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.timing import baselines, clock


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def scripted(monkeypatch):
    """``run(times_ms)``: time a callable whose k-th call takes times_ms[k] ms; returns (stats, calls made)."""
    fake = _Clock()
    monkeypatch.setattr(clock, "perf_counter", fake)

    def run(durations, settings: dict):
        calls = itertools.count()
        made = []
        recorded: dict[int, float] = {}

        def fn() -> None:
            ms = next(durations)
            made.append(ms)
            fake.now += ms / 1e3

        class Event:
            def __init__(self, enable_timing: bool = True) -> None:
                self.id = next(calls)

        def record(ev, stream) -> None:
            recorded[ev.id] = fake.now * 1e3

        monkeypatch.setattr(clock.Cuda, "sync", staticmethod(lambda: None), raising=False)
        monkeypatch.setattr(clock.Cuda, "Event", Event, raising=False)
        monkeypatch.setattr(clock.Cuda, "record", staticmethod(record), raising=False)
        monkeypatch.setattr(
            clock.Cuda, "elapsed", staticmethod(lambda s, e: recorded[e.id] - recorded[s.id]), raising=False
        )
        monkeypatch.setattr(clock.Cuda, "stream", None, raising=False)
        stats = clock.time_cuda(fn, settings, None)
        return stats, len(made)

    return run


def settings(**over) -> dict:
    return baselines.timing_settings(JudgeConfig(**over))


def test_a_steady_long_kernel_stops_after_one_block(scripted):
    stats, made = scripted(itertools.repeat(4.2), settings())
    assert stats["runs"] == clock.BLOCK == 25
    assert stats["median_ms"] == pytest.approx(4.2)
    assert made == 25 + 6  # the warm-up's 25 ms are 6 calls of 4.2 ms


def test_a_short_kernel_makes_every_call_it_made_before(scripted):
    stats, _ = scripted(itertools.repeat(0.5), settings())  # 25 calls hold 12.5 ms of the GPU, under 0.1 s
    assert stats["runs"] == 100


def test_a_noisy_kernel_is_timed_until_its_median_is_pinned_or_the_runs_run_out(scripted):
    noisy = itertools.cycle([4.0, 4.4, 4.2, 3.9, 4.5])  # +-7%: its median's interval is wider than 1%
    stats, _ = scripted(noisy, settings())
    assert stats["runs"] == 100


def test_settle_zero_keeps_the_fixed_count(scripted):
    stats, _ = scripted(itertools.repeat(4.2), settings(timing_settle_s=0))
    assert stats["runs"] == 100


def test_the_rule_on_its_own():
    assert clock.settled([4.2] * 25, 0.1, 0.01)
    assert not clock.settled([4.2] * 24, 0.1, 0.01)  # less than a block
    assert not clock.settled([4.2] * 25, 0.2, 0.01)  # 105 ms of GPU time, 200 asked
    # 19 calls at 4.2 ms and 6 slow outliers: the median's interval (the 7th to the 19th of 25) is untouched.
    assert clock.settled(sorted([4.2] * 19 + [9.0] * 6), 0.1, 0.01)
    # 12 of 25 slow: the interval spans both populations.
    assert not clock.settled([4.2] * 13 + [4.8] * 12, 0.1, 0.01)


def test_the_baselines_cache_key_holds_the_rule():
    """A baseline timed under one rule is not reused under another: the settings are in its key's timing."""
    a, b = settings(), settings(timing_precision=0.002)
    assert a["timing_settle_s"] == 0.1 and a["timing_precision"] == 0.01
    assert a != b
