"""[judge] The sanitizer stage: compute-sanitizer on a wrong or crashing CUDA/Triton candidate (or any, with
``--sanitize``), on a reduced input, within a time bound. Never changes the verdict: its report
(``Verdict.sanitizer``) names the cause, and the feedback gives it first.

When it runs (``skip`` says why not otherwise): a CUDA or Triton candidate that compiled and then
gave a wrong output (``numerical``, ``non_finite``, ``input_dependent``), a stale one
(``output_caching``: a race can look like a cache), wrote to its inputs (an out-of-bounds write can
land there), or died with a CUDA error (illegal address, misaligned access, launch failure, device
assert); with ``judge.sanitize`` (``--sanitize``) also a correct one. An honest kernel is never slowed:
without the flag a correct candidate skips the stage.

How: each tool (memcheck, racecheck, synccheck, initcheck) starts its run of the candidate under
compute-sanitizer as the stage begins, and imports torch, the task and the candidate while the stage
waits for room; with room, a probe in the candidate's sandbox picks the reduced input (``reduce``,
``target.probe``) while the tools start CUDA and build the model; once they are ready, the stage takes
the GPU's shared lock again (it held it for the probe) and hands them the input (``handoff``): one
forward each, all at once. Their reports are parsed (``parse``) and placed on the
candidate's lines with their fixes (``hazards``). Where they name no cause, the candidate's source is read for
races on global memory, which racecheck does not see (``kernel_source.races``). The whole stage is bounded by
``judge.sanitizer_timeout_s``; a tool cut off at the bound still reports what it printed. Off the GPU,
or without compute-sanitizer, the report is one line saying so.
"""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from pathlib import Path
from typing import Any

from kernelfix.sandbox import ChildOutcome
from kernelfix.tools.evaluation import Evaluation, EventSink, StageEvent
from kernelfix.tools.handles import candidate_run, one_shot, sandboxing
from kernelfix.tools.kernel_source import races
from kernelfix.tools.sanitizer import handoff, hazards, parse, tool
from kernelfix.tools.stages.stage_context import StageContext
from kernelfix.tools.verdict import Category, Hazard, SanitizerReport, SanitizerTool, ToolRun

TARGET = "kernelfix.tools.workers.sanitizer_target"
# What each failure asks the probe to see again on the reduced input: a wrong output, a fault, or nothing.
TRIGGERS: dict[Category, str | None] = {
    Category.NUMERICAL: "wrong",
    Category.NON_FINITE: "wrong",
    Category.INPUT_DEPENDENT: "wrong",
    Category.OUTPUT_CACHING: "wrong",
    Category.INPUT_MUTATION: None,
    Category.ILLEGAL_MEMORY_ACCESS: "fault",
    Category.LAUNCH_FAILURE: "fault",
    Category.CUDA_ERROR: "fault",
    Category.DEVICE_ASSERT: "fault",
}
PROBE_SHARE = 0.5  # of the stage's time, at most, for picking the input (the rest is the tools')
READY_WAIT_S = 20.0  # after the probe, at most, for the tool runs to be ready: a slower one starts under the lock, as all did before
MAX_SAVE_BYTES = 256 << 20  # reduced inputs up to this go to the tools as a file; larger ones are drawn again


def skip(ctx: StageContext, ev: Evaluation) -> str | None:
    """Why this evaluation is not sanitized, if it is not; off the GPU the one-line note goes in its
    sanitizer report too."""
    c = ctx.config
    if "sanitize" in ev.stages_done:
        return "done"
    why = reason(ctx, ev)
    if why is None:
        if ev.failed:
            return f"not needed for {ev.category.value if ev.category else 'this failure'}"
        return (
            "the candidate passed (--sanitize checks a correct kernel too)"
            if "correctness" in ev.stages_done
            else "not judged"
        )
    if ev.backend not in ("cuda", "triton"):
        return "not a CUDA or Triton kernel"
    if ctx.device != "cuda":
        note = f"not sanitized: compute-sanitizer needs a CUDA GPU (device {ctx.device})"
        ev.sanitizer = SanitizerReport(why=why, note=note)
        return note
    if not c.sanitizer_tools:
        return "no sanitizer tools configured"
    return None


def reason(ctx: StageContext, ev: Evaluation) -> str | None:
    """What calls for the sanitizer: the failure's category, or ``--sanitize``; None: nothing does."""
    c = ctx.config
    if not ev.compiled:
        return None
    if ev.failed:
        return ev.category.value if (c.sanitize_failures or c.sanitize) and ev.category in TRIGGERS else None  # type: ignore[union-attr]
    if c.sanitize and "correctness" in ev.stages_done:
        return "--sanitize"
    return None


@functools.lru_cache(maxsize=4)
def _version(path: str) -> str | None:
    return tool.version(path)


def run(ctx: StageContext, ev: Evaluation, on_event: EventSink | None = None) -> Evaluation:
    """Sanitize ``ev``'s candidate into ``ev.sanitizer``; a failure of the stage itself is a note, never the verdict."""
    try:
        return _run(ctx, ev, on_event)
    except OSError:
        raise  # the judge's own disk: the judge says so (a full disk is a machine fault)
    except Exception as e:
        report = ev.sanitizer or SanitizerReport(why=reason(ctx, ev) or "")
        report.note = f"the sanitizer stage failed: {type(e).__name__}: {str(e)[:300]}"
        ev.sanitizer = report
        return ev


def _run(ctx: StageContext, ev: Evaluation, on_event: EventSink | None) -> Evaluation:
    c = ctx.config
    t0 = time.monotonic()
    deadline = t0 + c.sanitizer_timeout_s
    report = SanitizerReport(why=reason(ctx, ev) or "")
    ev.sanitizer = report
    path, missing = tool.find(c.sanitizer_path)
    if path is None:
        report.note = f"not sanitized: {missing}"
        return ev
    report.version = _version(path)
    wd = Path(ev.workdir)
    outdir = wd / "out" / "sanitize"
    shutil.rmtree(outdir, ignore_errors=True)  # a directory the candidate may write: start it empty
    sandboxing.own_dir(wd / "out")
    sandboxing.own_dir(outdir)
    spec: dict[str, Any] = {
        "task_path": str(wd / "task.py"),
        "candidate_path": str(ev.candidate_path),
        "build_dir": str(wd / "build"),
        "build": c.build.model_dump(),
        "device": ctx.device,
        "init_seed": ctx.seed,
        "outdir": str(outdir),
        "trial": _trial(ctx, ev),
        "max_elements": c.sanitizer_max_elements,
        "max_save_bytes": MAX_SAVE_BYTES,
        "reproduce": TRIGGERS.get(ev.category) if ev.category else None,
        "atol": c.atol,
        "rtol": c.rtol,
    }
    tools = [t for t in tool.ORDER if t in c.sanitizer_tools]
    room_file, plan_file = (
        wd / handoff.ROOM_FILE,
        wd / handoff.PLAN_FILE,
    )  # the evaluation's dir: the candidate cannot write them
    for f in (room_file, plan_file):
        f.unlink(missing_ok=True)
    spec |= {"room_file": str(room_file), "plan_file": str(plan_file), "wait_s": c.sanitizer_timeout_s}
    # The tool runs start now, before the stage has room: a new Python under compute-sanitizer each, whose imports (torch,
    # the task, the candidate) are CPU work and go on while the stage waits for room. With room they start CUDA and build
    # the model, and wait, ready, beside the probe. The GPU's shared lock is taken twice, for the probe and for the tools'
    # inputs and forwards: a timed run waiting at the gate goes between them. The room is kept until every tool has ended.
    pool = ThreadPoolExecutor(max_workers=len(tools))
    sent = {"room": False, "plan": False}
    runs: list[tuple[SanitizerTool, ChildOutcome]] = []
    try:
        ready = _Ready(tools, outdir)
        left = max(1.0, deadline - time.monotonic())
        futures = [(t, pool.submit(_tool, ctx, ev, path, t, spec, outdir, left, ready.on_message(t))) for t in tools]
        try:
            with ctx.room("sanitize"):
                handoff.publish(room_file, {"room": True})
                sent["room"] = True
                try:
                    runs = _probe_then_tools(
                        ctx, ev, spec, tools, futures, ready, outdir, plan_file, deadline, sent, on_event
                    )
                finally:
                    if not sent["plan"]:  # the tools waiting for a plan end now, without running anything
                        handoff.publish(plan_file, {"cancel": True})
                    wait_all([f for _, f in futures])  # their CUDA contexts end inside the room
        finally:
            if not sent["room"]:
                handoff.publish(room_file, {"cancel": True})
    finally:
        pool.shutdown(wait=True)
        for f in (room_file, plan_file):
            f.unlink(missing_ok=True)
    if not runs:  # no input to run them on: the probe's note says why
        return ev
    _tool_times(ev, [o for _, o in runs])
    found: list[Hazard] = []
    src = hazards.Sources(ev.code or "", ev.candidate_path, wd / "build", ev.backend)
    for name, outcome in runs:
        run_, parsed = _read(wd, outdir, name, outcome, left)
        report.tools.append(run_)
        found += hazards.from_records(name, parsed.records, src)
    report.hazards = hazards.ordered(found)
    if not report.causes:  # the tools see no race on global memory: the source may show one
        report.global_races = races.find(ev.code)
    report.seconds = round(time.monotonic() - t0, 2)
    cut = [r.tool for r in report.tools if not r.finished]
    failed = [f"{r.tool}: {r.problem}" for r in report.tools if r.problem]
    if cut or failed:
        report.note = "; ".join(
            [
                *(
                    [f"{', '.join(cut)} cut off at the {c.sanitizer_timeout_s:g} s bound (judge.sanitizer_timeout_s)"]
                    if cut
                    else []
                ),
                *failed,
            ]
        )[:600]
    return ev


def _probe_then_tools(
    ctx: StageContext,
    ev: Evaluation,
    spec: dict[str, Any],
    tools: list[SanitizerTool],
    futures: list[tuple[SanitizerTool, Future]],
    ready: "_Ready",
    outdir: Path,
    plan_file: Path,
    deadline: float,
    sent: dict[str, bool],
    on_event: EventSink | None,
) -> list[tuple[SanitizerTool, ChildOutcome]]:
    """Inside the stage's room: the probe under the GPU's shared lock, then, once the tools are ready, their plan under
    it again; their outcomes (none when the probe found no input: its note in the report)."""
    report = ev.sanitizer
    assert report is not None
    if on_event:
        on_event(StageEvent(stage="sanitize", status="progress", detail="choosing the reduced input"))
    probe_s = max(5.0, (deadline - time.monotonic()) * PROBE_SHARE)
    t1 = time.monotonic()
    with ctx.lease("sanitize probe", shared=True):  # no timing here: beside other judges' trials
        t2 = time.monotonic()
        probe = one_shot.run(
            ctx,
            ev,
            "sanitize_probe",
            TARGET,
            spec,
            probe_s,
            lease=False,
            fork=True,
            fork_kind=candidate_run.fork_kind(Path(ev.candidate_path)),
        )
    t3 = time.monotonic()
    _add(ev, "sanitize.probe_lease_wait", t2 - t1)
    _add(ev, "sanitize.probe", t3 - t2)
    chosen = one_shot.result(probe, outdir / "sanitize_probe.json")
    if not chosen.get("plan"):
        report.note = f"not sanitized: no input to run it on ({_failure(probe, probe_s)})"
        return []
    report.inputs, report.reduced = chosen.get("inputs"), bool(chosen.get("reduced"))
    report.reproduced, report.nondeterministic = chosen.get("reproduced"), chosen.get("nondeterministic")
    if on_event:
        on_event(StageEvent(stage="sanitize", status="progress", detail=", ".join(tools), total=len(tools)))
    ready.wait([f for _, f in futures], min(deadline, time.monotonic() + READY_WAIT_S))
    t4 = time.monotonic()
    _add(ev, "sanitize.tools_start", t4 - t3)  # the tools' start-up left after the probe
    with ctx.lease("sanitize", shared=True):
        t5 = time.monotonic()
        _add(ev, "sanitize.lease_wait", t5 - t4)
        handoff.publish(plan_file, {"plan": chosen["plan"], "inputs_file": chosen.get("saved")})
        sent["plan"] = True
        runs = [(t, f.result()) for t, f in futures]
    _add(ev, "sanitize.tools", time.monotonic() - t5)
    return runs


def _trial(ctx: StageContext, ev: Evaluation) -> dict[str, Any]:
    """The failing trial's draw (its seed, input set and variant), for the probe to draw it again: the
    first wrong trial, else the trial that was running when the candidate died, else the first."""
    plans = {t.index: t for t in ctx.ref.trials}
    reports = ev.correctness.trials if ev.correctness else []
    bad = next((t for t in reports if not t.ok), None)
    index = bad.trial if bad is not None else (len(reports) if ev.failed else 0)
    plan = plans.get(index) or plans.get(0)
    if plan is None:
        return {"seed": ctx.seed, "input_set": None}
    out: dict[str, Any] = {"index": plan.index, "seed": plan.seed, "input_set": plan.input_set}
    if plan.variant is not None:
        base = plans.get(plan.variant_of or 0, plan)
        out |= {"variant": plan.variant, "base_seed": base.seed, "input_set": base.input_set}
    return out


def _tool(
    ctx: StageContext,
    ev: Evaluation,
    path: str,
    name: SanitizerTool,
    spec: dict[str, Any],
    outdir: Path,
    timeout_s: float,
    on_message: Callable[[dict[str, Any]], None],
) -> ChildOutcome:
    wrap = tool.command(path, name, outdir / f"{name}.log")
    return one_shot.run(
        ctx,
        ev,
        f"sanitize_{name}",
        TARGET,
        spec,
        timeout_s,
        wrap=wrap,
        env=tool.ENV,
        lease=False,
        on_message=on_message,
    )


class _Ready:
    """Which tool runs are ready for their input: a ``ready`` phase on their channel, or their ready file."""

    def __init__(self, tools: list[SanitizerTool], outdir: Path):
        self._files = {t: handoff.ready_file(outdir, f"sanitize_{t}") for t in tools}
        self._seen: set[str] = set()

    def on_message(self, name: SanitizerTool) -> Callable[[dict[str, Any]], None]:
        def seen(msg: dict[str, Any]) -> None:  # on the channel's reader thread
            if msg.get("type") == "phase" and msg.get("phase") == handoff.READY_PHASE:
                self._seen.add(name)

        return seen

    def all_ready(self, futures: list[Future]) -> bool:
        """Whether every tool run is ready or has ended (one that failed to start)."""
        return all(t in self._seen or f.is_file() or fut.done() for (t, f), fut in zip(self._files.items(), futures))

    def wait(self, futures: list[Future], until: float) -> None:
        """Until ``all_ready``, or ``until``."""
        while time.monotonic() < until and not self.all_ready(futures):
            time.sleep(handoff.POLL_S)


def _tool_times(ev: Evaluation, outcomes: list[ChildOutcome]) -> None:
    """Where the tool runs' time went (the slowest of each), from their start: their imports (torch, the task, the
    candidate), ready (the stage's room, CUDA under the tool, the model), and from the plan's inputs to the end of the
    process (the forward under the tool, its report, the process's exit)."""

    def at(o: ChildOutcome, phase: str) -> float | None:
        return next(
            (m["_t"] for m in o.messages if m.get("type") == "phase" and m.get("phase") == phase and "_t" in m), None
        )

    imported = [t for o in outcomes if (t := at(o, handoff.IMPORTED_PHASE)) is not None]
    ready = [t for o in outcomes if (t := at(o, handoff.READY_PHASE)) is not None]
    after = [o.wall_s - t for o in outcomes if (t := at(o, "inputs")) is not None]
    if imported:
        _add(ev, "sanitize.tool_imported_max", max(imported))  # before the stage's room: beside its wait for it
    if ready:
        _add(ev, "sanitize.tool_ready_max", max(ready))
    if after:
        _add(ev, "sanitize.tool_run_max", max(after))


def _add(ev: Evaluation, key: str, seconds: float) -> None:
    ev.breakdown[key] = round(ev.breakdown.get(key, 0.0) + seconds, 3)


def _read(
    wd: Path, outdir: Path, name: SanitizerTool, outcome: ChildOutcome, timeout_s: float
) -> tuple[ToolRun, parse.Report]:
    """One tool's report (written in the candidate's sandbox: read as a plain file only), kept with the logs."""
    text = one_shot.read_plain(outdir / f"{name}.log", 8 << 20)
    log = wd / "logs" / f"sanitizer_{name}.log"
    log.write_text(text)
    parsed = parse.parse(text)
    problem = None
    if not parsed.records and parsed.errors is None:
        problem = (parsed.messages[0] if parsed.messages else None) or _failure(outcome, timeout_s)
    else:
        err = outcome.last("error")
        if (
            err is not None and err.get("phase") != "sanitized_forward"
        ):  # failed before the forward: what it saw is not the candidate's
            problem = (
                f"the run failed before the forward: {err.get('exc_type')}: {(err.get('message') or '').strip()[:200]}"
            )
    return ToolRun(
        tool=name,
        seconds=round(outcome.wall_s, 2),
        errors=parsed.errors,
        finished=not outcome.timed_out,
        problem=problem,
        log_path=str(log),
    ), parsed


def _failure(outcome: ChildOutcome, timeout_s: float) -> str:
    if outcome.launch_error:
        return f"could not start: {outcome.launch_error}"
    if outcome.timed_out:
        return f"out of time ({timeout_s:.0f} s)"
    err = outcome.last("error")
    if err is not None:
        return f"{err.get('exc_type')}: {(err.get('message') or '').strip()[:200]} (phase {err.get('phase')})"
    tail = next((ln.strip() for ln in reversed(outcome.stderr_tail.splitlines()) if ln.strip()), "")
    return f"{outcome.signal or f'exit code {outcome.returncode}'}" + (f": {tail[:200]}" if tail else "")
