"""[judge] The profile stage: Nsight Compute on one forward of a correct, legal candidate.

Never changes the verdict: where ncu is missing, not permitted or too slow, the
evaluation goes on with one warning and torch.profiler's kernel list instead.
The profiled process (``profile.target``) is a one-shot child in the same
sandbox as the candidate's worker, with ncu in front of it.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

from kernelfix.sandbox import ChildOutcome, run_child
from kernelfix.tools.evaluation import Evaluation, EventSink
from kernelfix.tools.handles import one_shot, sandboxing
from kernelfix.tools.profile import bottleneck, findings, host_sync, ncu, ncu_csv, ncu_source
from kernelfix.tools.stages import profile_prestart
from kernelfix.tools.stages.stage_context import StageContext
from kernelfix.tools.verdict import ProfileReport


def skip(ctx: StageContext, ev: Evaluation) -> str | None:
    """Why this evaluation is not profiled, if it is not (the judge says so as a skipped stage); off
    the GPU, the note goes in its profile report too."""
    if not ctx.config.profile:
        return "profiling off"
    if ev.failed:
        return "the candidate failed an earlier stage"
    if "profile" in ev.stages_done:
        return "done"
    if not (ev.correctness and ev.correctness.trials and "legality" in ev.stages_done):
        return "only correct, legal candidates are profiled"
    if ctx.device != "cuda":
        note = f"not profiled: profiling needs a CUDA GPU (device {ctx.device})"
        ev.profile = ProfileReport(note=note)
        return note
    return None


def _child(
    ctx: StageContext, ev: Evaluation, stage: str, spec: dict[str, Any], timeout_s: float, wrap: Sequence[str] = ()
) -> ChildOutcome:
    """One profile target under the candidate's sandbox, ``wrap`` (ncu) in front."""
    return one_shot.run(ctx, ev, stage, profile_prestart.TARGET, spec, timeout_s, wrap=wrap)


def profile(ctx: StageContext, ev: Evaluation, on_event: EventSink | None = None) -> Evaluation:
    ahead = profile_prestart.take(ev)  # the run the judge started as the evaluation began, waiting for its go
    try:
        return _profile(ctx, ev, ahead)
    finally:
        if ahead is not None and not ahead.future.done() and not ahead.go_file.exists():  # never handed its go
            profile_prestart.publish_cancel(ahead)


def _profile(ctx: StageContext, ev: Evaluation, ahead: profile_prestart.Started | None) -> Evaluation:
    c = ctx.config
    wd = Path(ev.workdir)
    outdir = wd / "out" / "profile"
    outdir.mkdir(parents=True, exist_ok=True)
    ready = ctx.ref.ready  # the reference counted the task's FLOPs and dtypes already: the profiled child need not
    known = {"flops": ready.task_flops, "dtypes": list(ready.dtypes)} if ready is not None else None
    spec = profile_prestart.spec(ctx, ev, outdir) | {"known": known}
    path, problem = ncu.find(c.ncu_path)
    if path is not None:
        report = outdir / ncu.REPORT  # ncu writes it from inside the sandbox: a directory the candidate may write
        log = wd / "logs" / "ncu.csv"  # the judge's copy of the details page, kept with the logs
        source = ""
        for extra_metrics in (True, False):  # without the extra metrics if this ncu refuses one
            if ahead is not None and extra_metrics:
                outcome, origin = profile_prestart.go(ctx, ahead, known)
                _add(ev, "profile.started_ahead", origin - ahead.at)  # its start, before the stage, beside the others
                wall = outcome.wall_s - (origin - ahead.at)
            else:
                Path(f"{report}.ncu-rep").unlink(missing_ok=True)
                wrap = ncu.command(
                    path, report, c.profile_max_kernels, extra_metrics=extra_metrics, backward=bool(c.backward)
                )
                origin = time.time()
                outcome = _child(ctx, ev, "profile_ncu", spec, c.profile_timeout_s, wrap=wrap)
                wall = outcome.wall_s
            _phases(ev, origin, outcome, outdir / "profile_ncu.json", wall)
            text, source = _pages(ctx, ev, path, report) if _is_plain(Path(f"{report}.ncu-rep")) else ("", "")
            log.write_text(text)
            parsed = ncu_csv.parse(text + "\n" + outcome.stdout_tail)
            problem = ncu.diagnose(outcome, parsed, c.profile_timeout_s)
            if problem is None or problem.kind != "metrics":
                break
        if problem is None:
            t0 = time.monotonic()
            result = _result(outcome, outdir / "profile_ncu.json")
            (wd / "logs" / "ncu_source.csv").write_text(source)
            ctx_f = findings.Context(
                task_flops=result.get("flops"),
                min_bytes=ev.timings.bytes_moved if ev.timings else None,
                dtypes=list(result.get("dtypes") or []),
                candidate_ms=ev.timings.candidate.median_ms if ev.timings and ev.timings.candidate else None,
                candidate_source=_read_plain(Path(ev.candidate_path)) if ev.candidate_path else None,
                host_syncs=_sync_report(result),
                gpu=ctx.ref.gpu_spec(ctx.device),
            )
            ev.profile = bottleneck.from_ncu(
                parsed.kernels,
                timings=ev.timings,
                task_flops=result.get("flops"),
                max_launches=c.profile_max_kernels,
                sources=ncu_source.parse(source),
                context=ctx_f,
            )
            ev.profile.log_path = str(log)
            _add(ev, "profile.findings", time.monotonic() - t0)
            return ev
    assert problem is not None
    # Said once, as a warning; then the kernel list torch.profiler sees, where that works.
    ev.warnings.append(f"no Nsight Compute profile: {problem.message}")
    outcome = _child(ctx, ev, "profile_torch", spec, c.run_timeout_s)
    result = _result(outcome, outdir / "profile_torch.json")
    if result.get("kernels") is not None:
        ev.profile = bottleneck.from_kernel_list(
            result["kernels"],
            timings=ev.timings,
            task_flops=result.get("flops"),
            note=problem.message,
            context=findings.Context(host_syncs=_sync_report(result)),
        )
    else:
        err = outcome.last("error")
        why = (
            f"{err.get('exc_type')}: {(err.get('message') or '').strip()[:200]}"
            if err
            else (outcome.signal or f"exit code {outcome.returncode}")
        )
        ev.profile = ProfileReport(note=f"{problem.message}; torch.profiler fallback failed too ({why})")
    return ev


# The profiled process's phases, in order (tools/workers/profile_target.py): its modules loaded (Python's start under
# ncu), torch imported, ready for its go and given it (a run started ahead of the stage), the task's FLOPs counted (only where the reference had not), inputs drawn, the candidate
# imported, ModelNew built, warmed up, host syncs watched, the profiled forward (ncu's replay passes inside), done.
PHASES = (
    "loaded",
    "torch_imported",
    "ready",
    "go",
    "count_flops",
    "inputs",
    "import_candidate",
    "build_model",
    "warmup",
    "host_syncs",
    "profiled_forward",
    "profiled_forward_backward",
    "done",
)


def _add(ev: Evaluation, key: str, seconds: float) -> None:
    ev.breakdown[key] = round(ev.breakdown.get(key, 0.0) + seconds, 3)


def _phases(ev: Evaluation, origin: float, outcome: ChildOutcome, result_file: Path, wall: float) -> None:
    """Where the profiled run's time went, into the breakdown: from ``origin`` (ncu's start, or the go of a run started
    ahead) to each phase of the target (its clock readings, in its result file: ncu may not pass the message pipe on),
    and after its last phase to ncu's exit (the replay passes' rules and the report's writing). Keys
    ``profile.ncu.<phase>``; ``profile.ncu_run``: the run's ``wall`` seconds from ``origin``."""
    marks = _result(outcome, result_file).get("phase_times")
    last = 0.0
    for name in PHASES:  # the target's own phases only: what the candidate's process sends is never trusted further
        try:
            at = float(marks[name]) - origin if isinstance(marks, dict) and name in marks else None
        except (TypeError, ValueError):
            at = None
        if at is not None and 0.0 <= at <= wall + 1.0:
            _add(ev, f"profile.ncu.{name}", at)
            last = max(last, at)
    _add(ev, "profile.ncu_run", wall)
    if last:
        _add(ev, "profile.ncu.after_target", wall - last)


def _pages(ctx: StageContext, ev: Evaluation, ncu_path: str, report: Path) -> tuple[str, str]:
    """The report's details and source pages, printed by two ncu processes at once (each import is a start of ncu and
    a read of the whole report)."""
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        details, source = pool.map(lambda page: _page(ctx, ev, ncu_path, report, page), ("details", "source"))
    _add(ev, "profile.pages", time.monotonic() - t0)
    return details, source


def _sync_report(result: dict[str, Any]) -> host_sync.SyncReport | None:
    """The profile target's host-sync record (``host_sync.watch``), if it sent a well-formed one."""
    try:
        return host_sync.SyncReport.model_validate(result["host_syncs"]) if result.get("host_syncs") else None
    except ValueError:
        return None


def _page(ctx: StageContext, ev: Evaluation, ncu_path: str, report: Path, page: str) -> str:
    """One page of the report, printed by ncu in the candidate's sandbox (the report is a file the
    candidate's process could have written: it is read where nothing it holds can matter)."""
    wd = Path(ev.workdir)
    iso, _ = sandboxing.isolation(
        "candidate",
        ctx.config,
        workdir=wd,
        private=ctx.private,
        siblings=[],
        credentials=ctx.credentials,
        device=ctx.device,
    )
    limits = sandboxing.limits(ctx.config, 120.0).model_copy(update={"output_tail_bytes": 48 << 20})
    outcome = run_child(
        ncu.import_command(ncu_path, Path(f"{report}.ncu-rep"), page),
        cwd=wd,  # type: ignore[arg-type]
        env=sandboxing.env("candidate", wd, ctx.device, ctx.gpu),
        limits=limits,
        isolation=iso,
    )
    if outcome.returncode != 0:
        (wd / "logs" / f"ncu_{page}.err").write_text(outcome.stderr_tail[-4000:])
    return outcome.stdout_tail


def _is_plain(path: Path) -> bool:
    import os
    import stat

    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


_read_plain = one_shot.read_plain
_result = one_shot.result
