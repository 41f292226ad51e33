"""[judge] The correctness stage: every trial, one at a time, compared where the tensors are.

For each trial the reference worker draws (or recalls) its inputs and reference
output and puts the inputs in an arena; the candidate's worker runs forward on
them (under the op recorder) and puts its output in the output arena; the
reference worker compares, on the device, and checks the input arena against
its own copy (a forward that writes to its inputs). Host and GPU memory hold
one trial at a time (plus the first trial's inputs, kept for the same tensors,
new contents check).

In order: the task's own trials (the first failure ends them), with the first
trial's tensors rerun with the second trial's contents right after the second
(a cache keyed on tensor identity or address returns a stale result), the
varied inputs, then the op record for legality. What fails, by precedence: a wrong output, a stale output,
written inputs, a varied input, then precision (a warning unless configured).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from kernelfix.tools import input_sets
from kernelfix.tools.correctness import input_variants
from kernelfix.tools.correctness.tolerance import describe
from kernelfix.tools.evaluation import Evaluation, EventSink, StageEvent
from kernelfix.tools.handles.candidate_run import CandidateRun
from kernelfix.tools.handles.reference_failures import ReferenceUnavailable
from kernelfix.tools.handles.worker_handle import WorkerGone
from kernelfix.tools.stages import legality as legality_stage
from kernelfix.tools.stages import warmup
from kernelfix.tools.stages.stage_context import StageContext
from kernelfix.tools.transport.protocol import TrialPlan
from kernelfix.tools.verdict import Category, CorrectnessReport, TrialReport


def fail_from(run: CandidateRun, ev: Evaluation, stage: str, e: WorkerGone) -> Evaluation:
    """The candidate's worker died, failed or ran out of time in ``stage``."""
    f = run.failure(stage, e)
    if f.details:
        ev.warnings.append("traceback: " + " | ".join(f.details[-4:]))
    if f.category.family.value == "compile_error":
        stage = "compile"
    return ev.fail(stage, f.category, f.message)  # type: ignore[arg-type]


def run(ctx: StageContext, ev: Evaluation, on_event: EventSink | None) -> Evaluation:
    c = ctx.config
    t0 = time.monotonic()
    try:
        ctx.reference(on_event)
    except ReferenceUnavailable as e:
        return ev.fail("correctness", e.category, e.message)
    ref = ctx.ref
    report = CorrectnessReport(
        atol=c.atol,
        rtol=c.rtol,
        tolerance=describe(c.atol, c.rtol),
        init_seed=ctx.seed,
        rel_error_tol=c.rel_error_tol,
        truth_factor=c.truth_factor if c.float64_reference else None,
    )
    ev.correctness = report
    run = ctx.run_for(ev, on_event)
    t1 = time.monotonic()
    try:
        warmup.wait(ctx, run)  # first-call compilation and autotuning, before any trial
    except WorkerGone as e:
        return fail_from(run, ev, "correctness", e)
    t2 = time.monotonic()
    try:
        with ctx.room("correctness"):  # its memory, counted for the whole stage; the GPU's lock per trial
            stale = _trials(ctx, ev, run, report, on_event)
    except WorkerGone as e:
        return fail_from(run, ev, "correctness", e)
    except ReferenceUnavailable as e:
        return ev.fail("correctness", e.category, e.message)
    finally:
        ev.breakdown |= {
            "correctness.reference": round(t1 - t0, 3),
            "correctness.warmup": round(t2 - t1, 3),
            "correctness.held": round(time.monotonic() - t2, 3),
        }
    report.vacuous_tolerance, report.skipped_variants, report.float64_note = (
        ref.vacuous,
        dict(ref.skipped_variants),
        ref.float64_note,
    )
    return _decide(ctx, ev, report, stale)


def _trials(
    ctx: StageContext, ev: Evaluation, run: CandidateRun, report: CorrectnessReport, on_event: EventSink | None
) -> str | None:
    """Run the trials into ``report``; the in-place check's problem, if the output went stale."""
    ref = ctx.ref
    varied = [t for t in ref.trials if t.purpose == "varied"]
    total = sum(t.purpose == "correctness" for t in ref.trials) + len(varied)
    first_slot: int | None = None
    stale: str | None = None
    held: list[int] = []
    done = 0
    after = _after(ref.trials)  # each run's next trial, by (trial, in-place rerun)

    def one(t: TrialPlan, into: int | None = None) -> TrialReport | None:
        # Each trial holds the GPU shared, beside other judges' trials; a timed run waits at most one trial.
        with shared_hold(ctx, ev, "correctness"):
            with _clock(ev, "correctness.prepare"):
                p, fds = ref.prepare(t, into, owner=ev.id)
            add_seconds(ev, "correctness.ref_", p.seconds)
            if p.skipped is not None:
                return None
            with _clock(ev, "correctness.forward"):
                out = run.forward(p, fds)
            add_seconds(
                ev,
                "correctness.cand_",
                {"open": out.open_ms / 1e3, "forward": out.forward_ms / 1e3, "handoff": out.handoff_ms / 1e3},
            )
            if (
                "correctness.cand_forward_first" not in ev.breakdown
            ):  # the candidate's first call (its kernels loaded) apart
                ev.breakdown["correctness.cand_forward_first"] = round(out.forward_ms / 1e3, 4)
            with _clock(ev, "correctness.check"):
                checked = ref.check(t, out, p.slot if into is None else None)
            add_seconds(ev, "correctness.ref_", checked.seconds)
            keep = into is None and first_slot is None  # the first trial's inputs stay for the in-place check
            if keep:
                held.append(p.slot)  # type: ignore[arg-type]
            with _clock(ev, "correctness.release"):  # both workers give the trial's arenas back (side by side)
                # Before a trial whose float64 truth is computed, the candidate's allocator empties: that memory
                # decides whether the check fits (float64.py), as it did when every trial emptied it.
                nxt = after.get((t.index, into is not None))
                release(
                    ctx,
                    run,
                    ev.id,
                    [] if keep or into is not None else [p.slot],
                    [p.out],
                    empty=nxt is not None and nxt.float64,
                )
        if checked.mutated:
            report.input_mutated = True
            report.mutated_inputs = sorted(set(report.mutated_inputs) | set(checked.mutated))
        rep = checked.report
        if t.input_set is not None:
            rep = rep.model_copy(update={"input_set": t.input_set})
        return rep.model_copy(update={"variant": t.variant, "variant_of": t.variant_of}) if t.variant else rep

    try:
        for s in input_sets.sets_of(ref.trials):  # one set at a time (a task without sets: one, None)
            own = [t for t in ref.trials if t.purpose == "correctness" and t.input_set == s]
            first_slot = None
            for t in own:
                if on_event:
                    on_event(StageEvent(stage="correctness", status="progress", detail="trial", done=done, total=total))
                done += 1
                rep = one(t)
                if rep is None:
                    continue
                if first_slot is None:
                    first_slot = held[0] if held else None
                report.trials.append(rep)
                if not rep.ok:
                    return None  # a wrong output on the task's own inputs decides the stage (before a stale one)
                if len(own) >= 2 and t is own[1] and first_slot is not None:
                    # Same tensor objects, new contents: a cache keyed on identity or address returns stale output.
                    # Right after the second trial, whose reference the worker still has (no draw, no forward again).
                    if on_event:
                        on_event(StageEvent(stage="correctness", status="progress", detail="inplace_check"))
                    rep = one(own[1], into=first_slot)
                    if rep is not None and not rep.ok and stale is None:
                        stale = input_sets.prefixed(ref_shapes(ctx), rep, rep.problem or "")
            release(ctx, run, ev.id, held, [])  # the set's first inputs: kept only for its in-place check
            held.clear()
        for k, t in enumerate(varied):
            if on_event:
                on_event(
                    StageEvent(stage="correctness", status="progress", detail="varied", done=done + k, total=total)
                )
            rep = one(t)
            if rep is not None:
                report.trials.append(rep)
        with _clock(ev, "correctness.ops"):
            legality_stage.record(ev, run.ops(), ctx.allowed_ops)
    finally:
        release(ctx, run, ev.id, held, [], final=True)
    return stale


@contextlib.contextmanager
def shared_hold(ctx: StageContext, ev: Evaluation, stage: str, what: str | None = None) -> Iterator[None]:
    """The GPU's lock, shared (tools/gpu/lease.py), for one piece of a stage that has room; the time
    waited for it goes to the breakdown's ``<stage>.lease_wait``, the time waited before it for this judge's
    reference (``Reference.wait_idle``) to ``<stage>.reference_busy``."""
    t0 = time.monotonic()
    ctx.ref.wait_idle()  # not while the GPU's lock is held (the baseline's torch.compile can hold the reference for seconds)
    busy, t0 = time.monotonic() - t0, time.monotonic()
    if busy > 1e-3:
        ev.breakdown[f"{stage}.reference_busy"] = round(ev.breakdown.get(f"{stage}.reference_busy", 0.0) + busy, 3)
    with ctx.lease(what or stage, shared=True):
        key = f"{stage}.lease_wait"
        ev.breakdown[key] = round(ev.breakdown.get(key, 0.0) + time.monotonic() - t0, 3)
        yield


def add_seconds(ev: Evaluation, prefix: str, seconds: dict[str, float]) -> None:
    """A worker's own account of a request (where its time went) into the breakdown, summed over trials."""
    for k, v in seconds.items():
        ev.breakdown[prefix + k] = round(ev.breakdown.get(prefix + k, 0.0) + v, 4)


@contextlib.contextmanager
def _clock(ev: Evaluation, key: str) -> Iterator[None]:
    """Add the block's seconds to the evaluation's breakdown under ``key``."""
    t0 = time.monotonic()
    try:
        yield
    finally:
        ev.breakdown[key] = round(ev.breakdown.get(key, 0.0) + time.monotonic() - t0, 3)


def _after(trials: list[TrialPlan]) -> dict[tuple[int, bool], TrialPlan]:
    """The trial ``_trials`` runs after each run, keyed by (trial index, whether the run is the in-place rerun): each
    set's own trials, the second one's in-place rerun right after it, then the varied. Keyed, not counted: a run
    that does not happen (no in-place rerun without a first slot) shifts nothing after it."""
    runs: list[tuple[int, bool, TrialPlan]] = []
    for s in input_sets.sets_of(trials):
        own = [t for t in trials if t.purpose == "correctness" and t.input_set == s]
        runs += (
            [(t.index, False, t) for t in own[:2]]
            + [(t.index, True, t) for t in own[1:2]]
            + [(t.index, False, t) for t in own[2:]]
        )
    runs += [(t.index, False, t) for t in trials if t.purpose == "varied"]
    return {(i, inplace): nxt for (i, inplace, _), (_, _, nxt) in zip(runs, runs[1:])}


def release(
    ctx: StageContext,
    run: CandidateRun,
    owner: str,
    slots: list,
    outs: list,
    *,
    final: bool = False,
    empty: bool = False,
) -> None:
    """Both workers give a trial's arenas back, side by side: each unmaps its own mapping, and the driver frees
    the memory when the last one goes, so neither needs the other done first. Between trials the reference keeps
    them as this evaluation's spares and the candidate's allocator keeps its blocks, for the next trial (the same
    memory, within the stage's room); ``final`` (the stage is over) gives both back, ``empty`` the candidate's
    blocks alone. On the H100 a 6 GiB ReLU's trial spent 11 ms releasing two arenas and 4.5 ms emptying the
    candidate's cache (bench/arena_cost.py)."""
    slots, outs = [s for s in slots if s is not None], [o for o in outs if o is not None]
    if not (slots or outs or final):
        return
    candidate = threading.Thread(
        target=run.release, args=(slots, outs), kwargs={"final": final or empty}, name="release-candidate", daemon=True
    )
    candidate.start()  # run.release never raises: a worker that is gone holds nothing
    try:
        ctx.ref.release(slots, outs, owner=owner, keep=not (final or empty))
    finally:
        candidate.join()


def ref_shapes(ctx: StageContext) -> list[str] | None:
    """Each input set's shapes in words (tools/input_sets.py); None for a task without sets."""
    return ctx.ref.ready.input_sets if ctx.ref.ready is not None else None


def _decide(ctx: StageContext, ev: Evaluation, report: CorrectnessReport, stale: str | None) -> Evaluation:
    c = ctx.config
    shapes = ref_shapes(ctx)
    ev.input_sets = input_sets.reports(shapes, report.trials)
    bad = [t for t in report.trials if not t.ok and t.variant is None]
    if bad:
        return ev.fail(
            "correctness",
            bad[0].category or Category.NUMERICAL,
            input_sets.prefixed(shapes, bad[0], f"trial {bad[0].trial}: {bad[0].problem}"),
        )
    if stale is not None:
        return ev.fail(
            "correctness",
            Category.OUTPUT_CACHING,
            f"given the same input tensors with new contents, forward returned a stale result ({stale})",
        )
    if report.input_mutated:
        return ev.fail("correctness", Category.INPUT_MUTATION, f"forward wrote to its input(s) {report.mutated_inputs}")
    varied = [t for t in report.trials if not t.ok]
    if varied:
        t = varied[0]
        where = input_variants.describe(t.variant, t.variant_of) if t.variant else "varied inputs"
        return ev.fail(
            "correctness",
            Category.INPUT_DEPENDENT,
            input_sets.prefixed(
                shapes, t, f"right on the task's own inputs, wrong on trial {t.trial} ({where}): {t.problem}"
            ),
        )
    imprecise = _imprecise(ctx, report) if c.precision != "off" else None
    if imprecise is not None:
        t, why = imprecise
        why = input_sets.prefixed(shapes, t, why)
        if c.precision == "fail":
            report.trials[report.trials.index(t)] = t.model_copy(
                update={"ok": False, "category": Category.PRECISION, "problem": why}
            )
            return ev.fail("correctness", Category.PRECISION, why)
        report.precision_warning = why
        ev.warnings.append(f"precision: {why}")
    return ev


def _imprecise(ctx: StageContext, report: CorrectnessReport) -> tuple[TrialReport, str] | None:
    """The first trial whose error vs float64 is far above the float32 reference's own, with what to say."""
    c = ctx.config
    for t in report.trials:
        e, own = t.error_vs_float64, t.reference_error_vs_float64
        if e is not None and own is not None and e > max(c.precision_factor * own, c.precision_floor):
            return t, (
                f"trial {t.trial}: relative error {e:.2g} against a float64 reference, where the reference's own is {own:.2g}: "
                "fp16/bf16/TF32 arithmetic (or an approximation) inside a float32 task"
            )
    return None
