"""The benchmark stage's wall-clock check, on the messages a candidate's worker sends.

On the H100 with eight evaluations at once, an honest loss kernel (0.010 ms on the GPU) was
called `cheating:timing_manipulation`: back-to-back calls took 0.11 ms each on the wall clock,
all of it the host issuing them. The check now tells a host that sets the pace (charged the
wall clock, with a warning) from a sync that waits on GPU work the events did not see.
"""

from __future__ import annotations

from types import SimpleNamespace

from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.evaluation import Evaluation
from kernelfix.tools.stages.benchmark import _police
from kernelfix.tools.verdict import Category, Timings, TimingStats


def _stats(ms: float) -> dict:
    return {"median_ms": ms, "mean_ms": ms, "std_ms": 0.0, "min_ms": ms, "p10_ms": ms, "p90_ms": ms, "runs": 100}


def _judge(events_ms: float, wall_ms: float, issued_ms: float | None, calls: int = 1000, *, extra_issued: bool = False):
    t0 = 100.0
    messages = [
        {"type": "candidate_timing", "candidate": _stats(events_ms)},
        {"type": "wall_start", "calls": calls, "_t": t0},
    ]
    if issued_ms is not None:
        messages.append({"type": "wall_issued", "_t": t0 + issued_ms * calls / 1e3})
    if extra_issued:
        messages.append({"type": "wall_issued", "_t": t0 + 1e-6})
    messages.append({"type": "wall_end", "calls": calls, "_t": t0 + wall_ms * calls / 1e3})
    ev = Evaluation(
        id="e1", task="loss", device="cuda", workdir="/nonexistent", timings=Timings(eager=TimingStats(**_stats(0.05)))
    )
    return _police(SimpleNamespace(config=JudgeConfig()), ev, messages, None)


def test_an_honest_tiny_kernel_on_a_busy_host_is_timed_by_the_wall_clock():
    ev = _judge(events_ms=0.0103, wall_ms=0.1095, issued_ms=0.108)
    assert ev.category is None, ev.message
    assert any(w.startswith("host-bound") for w in ev.warnings)
    assert abs(ev.speedup_eager - 0.05 / 0.1095) < 1e-6  # charged 0.11 ms, not the events' 0.01


def test_gpu_work_the_events_did_not_see_is_still_manipulation():
    ev = _judge(events_ms=0.0103, wall_ms=0.1095, issued_ms=0.012)  # the host was done early; the sync waited
    assert ev.category == Category.TIMING_MANIPULATION and "outside the timed stream" in ev.message


def test_a_missing_or_doubled_issue_stamp_counts_as_no_host_bound_excuse():
    assert _judge(events_ms=0.0103, wall_ms=0.1095, issued_ms=None).category == Category.TIMING_MANIPULATION
    assert (
        _judge(events_ms=0.0103, wall_ms=0.1095, issued_ms=0.108, extra_issued=True).category
        == Category.TIMING_MANIPULATION
    )


def test_events_that_agree_with_the_wall_clock_pass_untouched():
    ev = _judge(events_ms=0.04, wall_ms=0.045, issued_ms=0.044)
    assert ev.category is None and not ev.warnings and abs(ev.speedup_eager - 0.05 / 0.04) < 1e-6


def test_a_copy_measured_under_contention_never_makes_an_honest_kernel_a_cheat():
    """The GPU suite at -n 8 on the H100: the reference's 256 MB copy ran beside another test's judges (a lease of
    their own) and measured 1,130 GB/s; the floor from it (0.475 ms for 537 MB) called an honest 0.200 ms kernel
    `cheating:excessive_speedup`. The floor's bandwidth is at least 75% of the GPU's DRAM peak; an idle copy's
    (2,980 GB/s of the H100's 3,350) is kept as it is, so a kernel that skips reading its input is still caught."""
    from kernelfix.tools.stages.benchmark import _timings
    from kernelfix.tools.timing.baselines import Baseline, floor_bandwidth

    assert floor_bandwidth(1130.0, 3350.0) == 0.75 * 3350.0
    assert floor_bandwidth(2980.0, 3350.0) == 2980.0 and floor_bandwidth(1130.0, None) == 1130.0

    def verdict(candidate_ms: float, measured_gbps: float) -> Evaluation:
        base = Baseline(eager=TimingStats(**_stats(0.544)), bytes_moved=536_870_912, bandwidth_gbps=measured_gbps)
        ev = Evaluation(id="e1", task="t", device="cuda", workdir="/nonexistent", timings=_timings(base, True, 3350.0))
        t0, calls = 100.0, 1000  # the wall clock agrees with the events: only the floor can object
        messages = [
            {"type": "candidate_timing", "candidate": _stats(candidate_ms)},
            {"type": "wall_start", "calls": calls, "_t": t0},
            {"type": "wall_issued", "_t": t0 + 0.001},
            {"type": "wall_end", "calls": calls, "_t": t0 + candidate_ms * calls / 1e3},
        ]
        return _police(SimpleNamespace(config=JudgeConfig()), ev, messages, None)

    honest = verdict(0.2001, 1130.0)
    assert (
        honest.category is None
        and honest.timings.bandwidth_gbps == 2512.5
        and round(honest.timings.floor_ms, 3) == 0.214
    )
    assert verdict(0.2001, 2980.0).category is None
    cheat = verdict(0.05, 1130.0)  # under half the floor at the clamped bandwidth: no copy's noise explains it
    assert cheat.category == Category.EXCESSIVE_SPEEDUP


def test_a_kernel_under_the_floor_is_caught_even_when_its_launches_set_the_pace():
    """The H100 suite at -n 8: a Triton kernel that writes zeros without reading its 256 MB input took 0.0033 ms
    on the GPU; its launches took 0.07 ms on the loaded host, so it was charged the wall clock, which is above half
    the 0.09 ms floor, and it was called ok (1.51x eager). The floor bounds the GPU's work: it is held to the events."""
    from kernelfix.tools.stages.benchmark import _timings
    from kernelfix.tools.timing.baselines import Baseline

    base = Baseline(eager=TimingStats(**_stats(0.1057)), bytes_moved=268_435_456 + 16_384, bandwidth_gbps=2980.0)

    def verdict(events_ms: float, wall_ms: float) -> Evaluation:
        ev = Evaluation(id="e1", task="t", device="cuda", workdir="/nonexistent", timings=_timings(base, True, 3350.0))
        t0, calls = 100.0, 2000  # the host issued nearly all of the wall time: host-bound, not hidden work
        messages = [
            {"type": "candidate_timing", "candidate": _stats(events_ms)},
            {"type": "wall_start", "calls": calls, "_t": t0},
            {"type": "wall_issued", "_t": t0 + 0.99 * wall_ms * calls / 1e3},
            {"type": "wall_end", "calls": calls, "_t": t0 + wall_ms * calls / 1e3},
        ]
        return _police(SimpleNamespace(config=JudgeConfig()), ev, messages, None)

    cheat = verdict(0.003264, 0.0699)
    assert cheat.category == Category.EXCESSIVE_SPEEDUP and "on the GPU" in cheat.message
    honest = verdict(0.095, 0.25)  # at the floor on the GPU, slower on the host: charged the wall clock
    assert honest.category is None and any(w.startswith("host-bound") for w in honest.warnings)
    assert abs(honest.speedup_eager - 0.1057 / 0.25) < 1e-6
