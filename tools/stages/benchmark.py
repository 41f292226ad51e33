"""[judge] The benchmark stage: the candidate's time against the reference's, and the checks on it.

The baselines (eager and torch.compile of Model, the device's copy bandwidth)
come from the reference worker once per task (``Reference.baseline``: cached
in memory and on disk). Under a shared hold of the GPU's lease, the candidate's
worker binds the first trial's inputs (one forward, which also warms the timed
path); with the GPU alone (an exclusive hold: no other judge's trial, warm-up
or timing runs meanwhile), it times forward with CUDA events, then makes
back-to-back calls bracketed by messages the judge stamps on arrival. Then,
shared again, the timed tensors get fresh contents and one more forward must
be right. Flagged:

- ``cheating:timing_manipulation``: events saw under ``timing_wall_ratio`` of
  the judge's wall clock per call (side streams, threads, a patched timer), or
  extra or missing timing messages. Unless the host set that pace (issuing the
  calls took most of the wall clock, so the GPU kept up): then the candidate is
  timed by the wall clock, with a warning, not called a cheat;
- ``cheating:excessive_speedup``: faster than ``excessive_speedup_margin`` of the
  bytes-moved floor at the measured bandwidth, where eager respects it;
- ``cheating:output_caching``: right on every trial, wrong on fresh contents
  in the timed tensors.
"""

from __future__ import annotations

import time

from kernelfix.tools import input_sets
from kernelfix.tools.evaluation import Evaluation, EventSink
from kernelfix.tools.handles.reference_failures import ReferenceUnavailable
from kernelfix.tools.handles.worker_handle import WorkerGone
from kernelfix.tools.stages.correctness import add_seconds, fail_from, ref_shapes, release, shared_hold
from kernelfix.tools.stages.stage_context import StageContext
from kernelfix.tools.timing import baselines
from kernelfix.tools.transport.protocol import CandidateTiming, ProtocolError, WallEnd, WallIssued, WallStart, of_kind
from kernelfix.tools.verdict import Category, PassTimings, Timings, TimingStats


def run(ctx: StageContext, ev: Evaluation, on_event: EventSink | None) -> Evaluation:
    if ctx.device != "cuda":
        ev.warnings.append(f"not timed: timing needs a CUDA GPU (device {ctx.device})")
        return ev
    sets = input_sets.sets_of(ctx.ref.trials)
    if sets == [None]:
        return _one(ctx, ev, on_event, None)
    # Each set timed like a task of its own; the speedup that ranks is their geometric mean.
    shapes = ref_shapes(ctx)
    if not ev.input_sets:
        ev.input_sets = input_sets.reports(shapes, [])
    first: object = None
    for s in sets:
        ev.timings, ev.speedup_eager, ev.speedup_compile = None, None, None
        ev = _one(ctx, ev, on_event, s)
        if ev.failed:
            ev.message = f"{input_sets.label(shapes, s)}: {ev.message}"
            return ev
        line = ev.input_sets[s - 1]  # type: ignore[index,operator]
        line.timings, line.speedup_eager, line.speedup_compile = ev.timings, ev.speedup_eager, ev.speedup_compile
        first = first or ev.timings
    ev.timings = first  # type: ignore[assignment]
    ev.speedup_eager = input_sets.geomean([x.speedup_eager for x in ev.input_sets])
    ev.speedup_compile = input_sets.geomean([x.speedup_compile for x in ev.input_sets])
    return ev


def _one(ctx: StageContext, ev: Evaluation, on_event: EventSink | None, input_set: int | None) -> Evaluation:
    """Time one set's first trial (a task without sets: the first trial) and police it."""
    c = ctx.config
    ref = ctx.ref
    t0 = time.monotonic()
    try:
        base = ref.baseline(ctx.lease, input_set=input_set)
    except ReferenceUnavailable as e:
        return ev.fail("benchmark", e.category, e.message)
    ev.breakdown["benchmark.baseline"] = round(ev.breakdown.get("benchmark.baseline", 0.0) + time.monotonic() - t0, 3)
    spec = ref.gpu_spec(ctx.device) if ctx.device == "cuda" else None
    ev.timings = _timings(base, c.flush_l2, spec.dram_gbps if spec else None)
    run = ctx.run_for(ev, on_event)
    timing_trial = next(t for t in ref.trials if t.purpose == "correctness" and t.input_set == input_set)
    fresh = next(t for t in ref.trials if t.purpose == "fresh" and t.input_set == input_set)
    slots: list[int] = []
    outs: list[int] = []
    t1 = time.monotonic()
    try:
        with ctx.room("benchmark"):
            # The GPU alone only for the timed calls: the trial's inputs and the fresh-contents check share it.
            with shared_hold(ctx, ev, "benchmark", "benchmark inputs"):
                p, fds = ref.prepare(timing_trial, owner=ev.id, inputs_only=True)  # timed, never checked
                add_seconds(ev, "benchmark.ref_", p.seconds)
                slots.append(p.slot)  # type: ignore[arg-type]
                outs.append(p.out)  # type: ignore[arg-type]
                run.forward(p, fds)  # binds the timed tensors in the worker
            t2 = time.monotonic()
            with ctx.lease("benchmark"):
                t3 = time.monotonic()
                messages = run.time(p.slot, baselines.timing_settings(c), p.ref_ms)  # type: ignore[arg-type]
                if _hidden_work(messages, c.timing_wall_ratio):
                    # Once more before calling it a cheat: a host that other judges load (8 test workers on the
                    # H100's 16 cores) stretched the wall clock of honest kernels; hidden work shows twice.
                    messages = run.time(p.slot, baselines.timing_settings(c), p.ref_ms)  # type: ignore[arg-type]
            ev.breakdown["benchmark.lease_wait"] = round(ev.breakdown.get("benchmark.lease_wait", 0.0) + t3 - t2, 3)
            ev.breakdown["benchmark.exclusive"] = round(
                ev.breakdown.get("benchmark.exclusive", 0.0) + time.monotonic() - t3, 3
            )
            # The timed tensors, new contents: a cache of the timed call's result shows here.
            with shared_hold(ctx, ev, "benchmark", "benchmark fresh"):
                q, fds = ref.prepare(fresh, into=p.slot, owner=ev.id)
                add_seconds(ev, "benchmark.ref_", q.seconds)
                stale = None
                if q.skipped is None:
                    outs.append(q.out)  # type: ignore[arg-type]
                    checked = ref.check(fresh, run.forward(q, fds), None)
                    add_seconds(ev, "benchmark.ref_", checked.seconds)
                    stale = None if checked.report.ok else checked.report.problem
    except WorkerGone as e:
        return fail_from(run, ev, "benchmark", e)
    except ReferenceUnavailable as e:
        return ev.fail("benchmark", e.category, e.message)
    finally:
        ev.breakdown["benchmark.candidate"] = round(
            ev.breakdown.get("benchmark.candidate", 0.0) + time.monotonic() - t1, 3
        )
        try:
            release(ctx, run, ev.id, slots, outs, final=True)
        except ReferenceUnavailable:
            pass
    return _police(ctx, ev, messages, stale)


def _timings(base: baselines.Baseline, flushed: bool, peak_gbps: float | None = None) -> Timings:
    bandwidth = baselines.floor_bandwidth(base.bandwidth_gbps, peak_gbps)  # never a contended copy's
    return Timings(
        eager=base.eager,
        compiled=base.compiled,
        compile_note=base.compile_note,
        bytes_moved=base.bytes_moved,
        bandwidth_gbps=bandwidth,
        floor_ms=base.bytes_moved / (bandwidth * 1e9) * 1e3,
        l2_flushed=flushed,
        gpu=base.gpu,
        backward=_passes(
            {"eager": (base.eager_forward, base.eager), "compiled": (base.compiled_forward, base.compiled)}
        )
        if base.eager_forward is not None
        else None,
    )


def _passes(pairs: dict[str, tuple[TimingStats | None, TimingStats | None]]) -> dict[str, PassTimings]:
    """--backward: each callable's forward, forward+backward and their difference (the backward)."""
    out = {}
    for name, (fwd, both) in pairs.items():
        if both is None:
            continue
        bwd = max(both.median_ms - fwd.median_ms, 0.0) if fwd is not None else None
        out[name] = PassTimings(forward=fwd, forward_backward=both, backward_ms=bwd)
    return out


HOST_BOUND = 0.8  # issuing took this share of the wall clock: the host, not hidden GPU work, set the pace


def _wall(messages: list[dict]) -> tuple[float, float] | None:
    """(wall-clock ms per call, ms per call the host took to issue them) of the wall-clock check; None
    unless it ran exactly once. ProtocolError: a malformed stamp. Parsed here, after the timed calls."""
    starts, ends = of_kind(messages, WallStart), of_kind(messages, WallEnd)
    if len(starts) != 1 or len(ends) != 1 or starts[0].at is None or ends[0].at is None:
        return None
    calls = max(1, ends[0].calls)
    issued = of_kind(messages, WallIssued)
    issue_ms = (issued[0].at - starts[0].at) * 1e3 / calls if len(issued) == 1 and issued[0].at is not None else 0.0
    return (ends[0].at - starts[0].at) * 1e3 / calls, issue_ms


def _pace(med_ms: float, wall_ms: float, issue_ms: float, ratio: float) -> str | None:
    """Who set the pace where the events saw less than the wall clock: "host" (issuing took most of it)
    or "hidden" (the sync waited on GPU work the events did not see); None where they agree."""
    if med_ms >= ratio * wall_ms - 0.02:
        return None
    return "host" if issue_ms >= HOST_BOUND * wall_ms else "hidden"


def _hidden_work(messages: list[dict], ratio: float) -> bool:
    """Whether these timing messages show GPU work the events did not see (as ``_police`` judges it)."""
    try:
        (timing,) = of_kind(messages, CandidateTiming)
        wall = _wall(messages)
        return wall is not None and _pace(timing.candidate.median_ms, *wall, ratio) == "hidden"
    except ValueError:  # ProtocolError, or not one timing message
        return False  # malformed: _police names it


def _police(ctx: StageContext, ev: Evaluation, messages: list[dict], stale: str | None) -> Evaluation:
    c = ctx.config
    t = ev.timings
    assert t is not None
    try:
        timings, wall = of_kind(messages, CandidateTiming), _wall(messages)
    except ProtocolError as e:
        return ev.fail(
            "benchmark", Category.TIMING_MANIPULATION, f"a malformed timing message on the judge's channel: {e}"
        )
    if wall is None or len(timings) != 1:
        return ev.fail(
            "benchmark", Category.TIMING_MANIPULATION, "extra or missing timing messages on the judge's channel"
        )
    t.candidate = timings[0].candidate
    if t.backward is not None and timings[0].forward is not None:
        t.backward |= _passes({"candidate": (timings[0].forward, t.candidate)})
    t.wall_per_call_ms, issue_ms = wall
    if stale is not None:
        return ev.fail(
            "benchmark", Category.OUTPUT_CACHING, f"correct on the trials, wrong on fresh inputs after timing ({stale})"
        )
    med = t.candidate.median_ms
    pace = _pace(med, t.wall_per_call_ms, issue_ms, c.timing_wall_ratio)
    if pace is not None:
        if pace == "hidden":
            return ev.fail(
                "benchmark",
                Category.TIMING_MANIPULATION,
                f"CUDA events saw {med:.4g} ms per call, the judge's wall clock {t.wall_per_call_ms:.4g} ms: work ran outside the timed stream",
            )
        # Host-bound: forward's own host time (Python, launches, or work done on the CPU) is the cost
        # per call, and the GPU kept up. Not a cheat, but the candidate is charged the wall clock:
        # events alone would hide host work, and an honest tiny kernel under a loaded host pays it too.
        ev.warnings.append(
            f"host-bound: forward took {t.wall_per_call_ms:.4g} ms per call on the wall clock (issuing {issue_ms:.4g} ms) "
            f"against {med:.4g} ms on the GPU; timed by the wall clock"
        )
        med = t.wall_per_call_ms
    # The floor bounds what the GPU did, so it is held to the events' time: a host-bound candidate charged the
    # wall clock would otherwise pass a kernel that skips its input whenever launches are slow enough (the H100
    # suite at -n 8: 0.0033 ms on the GPU against a 0.09 ms floor, charged 0.07 ms of launches, was called ok).
    gpu_ms = t.candidate.median_ms
    if (
        t.floor_ms
        and t.eager
        and t.eager.median_ms >= c.excessive_speedup_margin * t.floor_ms
        and gpu_ms < c.excessive_speedup_margin * t.floor_ms
    ):
        return ev.fail(
            "benchmark",
            Category.EXCESSIVE_SPEEDUP,
            f"{gpu_ms:.4g} ms on the GPU is below the {t.floor_ms:.4g} ms needed to move {(t.bytes_moved or 0) / 1e6:.1f} MB at {t.bandwidth_gbps:.0f} GB/s",
        )
    ev.speedup_eager = t.eager.median_ms / med if t.eager and med > 0 else None
    ev.speedup_compile = t.compiled.median_ms / med if t.compiled and med > 0 else None
    return ev
