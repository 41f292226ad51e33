"""The ``kernelfix`` command.

Exit codes: 0 success (eval: verdict ok; optimize/resume: a correct, legal
kernel was found); 1 not; 2 bad usage or unreadable input (task, candidate,
config, session directory, model settings); 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """Bad input from the user: printed without a traceback, exit code 2."""


def _common_judge_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=["cuda", "cpu"], help="where to judge (default: cuda when available, else cpu)")
    p.add_argument("--config", metavar="FILE", help="kernelfix.toml or pyproject.toml to read (default: nearest one)")
    p.add_argument("--trials", type=int, metavar="N", help="correctness trials (default 5)")
    p.add_argument("--atol", type=float, help="absolute tolerance (default: by output dtype, float32 1e-4, float16/bfloat16 1e-2)")
    p.add_argument("--rtol", type=float, help="relative tolerance (default: by output dtype, as --atol)")
    p.add_argument(
        "--profile", action=argparse.BooleanOptionalAction, default=None,
        help="profile a correct, legal kernel with Nsight Compute (GPU only; default: on for optimize, off for eval and batch, unless the config sets judge.profile)",
    )


def _load_config(args: argparse.Namespace):
    from kernelfix.config import ConfigError, load_config

    try:
        return load_config(args.config)
    except ConfigError as e:
        raise UsageError(str(e)) from None


def _judge_config(args: argparse.Namespace, *, profile_by_default: bool = False):
    """The judge's settings: config file, then flags. ``profile_by_default``: interactive
    sessions profile correct kernels unless the config or --no-profile says otherwise
    (--stop-at-sol reads the profile, so it asks for one too)."""
    from pydantic import ValidationError

    cfg = _load_config(args).judge
    updates = {k: getattr(args, k) for k in ("device", "trials", "atol", "rtol", "profile") if getattr(args, k, None) is not None}
    sol = getattr(args, "stop_at_sol", None) is not None or _load_config(args).agent.stop_at_sol is not None
    if sol and updates.get("profile") is False:
        raise UsageError("--stop-at-sol reads the Nsight Compute profile of correct kernels: it cannot work with --no-profile")
    if (profile_by_default or sol) and "profile" not in updates and "profile" not in cfg.model_fields_set:
        updates["profile"] = True
    try:  # validated like the config file: --trials 0 is as wrong as trials = 0
        return type(cfg).model_validate({**cfg.model_dump(), **updates})
    except ValidationError as e:
        raise UsageError(str(e)) from None


def cmd_eval(args: argparse.Namespace) -> int:
    from rich.console import Console

    from kernelfix.tools.judge import Judge, StageEvent
    from kernelfix.tools.render import verdict_view
    from kernelfix.tools.task import TaskError

    err = Console(stderr=True)
    cfg = _judge_config(args)
    cand_path = Path(args.candidate)
    try:
        source = cand_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read candidate {cand_path}: {e}") from None
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="kernelfix-eval-"))
    try:
        judge = Judge(args.task, cfg, workdir=workdir)
    except TaskError as e:
        raise UsageError(str(e)) from None
    if judge.device_notice:
        err.print(f"[yellow]note:[/] {judge.device_notice}")
    with err.status("judging...") as status:

        def show(e: StageEvent) -> None:
            bits = [e.stage, e.status]
            if e.detail:
                bits.append(e.detail)
            if e.total:
                bits.append(f"{(e.done or 0) + 1}/{e.total}")
            status.update(" ".join(bits) + " ...")

        try:
            verdict = judge.evaluate(source, filename=cand_path.name, on_event=show)
        except TaskError as e:
            raise UsageError(str(e)) from None
        finally:
            judge.close()  # the reference worker; the evaluation's files stay in the workdir
    if args.json:
        sys.stdout.write(verdict.model_dump_json(indent=2) + "\n")
    else:
        Console().print(verdict_view(verdict))
    if not args.workdir:
        if verdict.ok:
            shutil.rmtree(workdir, ignore_errors=True)  # nothing to look at
        else:
            err.print(f"logs and build files kept in {workdir}")
    return EXIT_OK if verdict.ok else EXIT_FAIL


# CLI flag -> AgentConfig field
_AGENT_FLAGS = {
    "model": "model",
    "api_base": "api_base",
    "api_key_env": "api_key_env",
    "max_turns": "max_turns",
    "target_speedup": "target_speedup",
    "max_tokens": "max_tokens",
    "max_cost": "max_cost_usd",
    "max_wall": "max_wall_s",
    "width": "width",
    "keep": "keep",
    "sampling": "sampling",
    "stop_at_sol": "stop_at_sol",
}


def _agent_config(base, args: argparse.Namespace):
    from pydantic import ValidationError

    from kernelfix.agent.config import AgentConfig

    updates = {field: getattr(args, flag) for flag, field in _AGENT_FLAGS.items() if getattr(args, flag, None) is not None}
    if getattr(args, "no_shape_block", False):
        updates["shape_block"] = False
    try:
        return AgentConfig.model_validate({**base.model_dump(), **updates})
    except ValidationError as e:
        raise UsageError(f"invalid agent setting: {e}") from None


def _model(cfg):
    from kernelfix.agent.models import ModelError, make_model

    if not cfg.model:
        raise UsageError("no model: pass --model (a litellm model string, or replay:FILE.jsonl), or set [agent] model in kernelfix.toml")
    api_key = None
    if cfg.api_key_env:
        api_key = os.environ.get(cfg.api_key_env)
        if not api_key:
            raise UsageError(f"the environment variable {cfg.api_key_env} (from --api-key-env) is not set")
    try:
        return make_model(cfg.model, cfg, api_key=api_key)
    except (ValueError, ModelError) as e:
        raise UsageError(str(e)) from None


def _on_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _use_tui(headless: bool) -> bool:
    """The terminal UI, unless --headless or not on a terminal (a pipe, CI, a batch child)."""
    if headless:
        return False
    if _on_terminal():
        return True
    print("kernelfix: not a terminal; running headless", file=sys.stderr)
    return False


def _event_sink(tui: bool):
    from kernelfix.agent.headless import HeadlessReporter

    if not tui:
        return HeadlessReporter()
    from kernelfix.tui.relay import EventRelay

    return EventRelay()


def _left_mid_turn(app) -> None:
    """After the app closed: if the user left while a turn was in flight (q), give the session a moment to
    stop at its next check; if a judge stage still holds it, record the interruption here and exit without
    waiting (the judge's children die with this process; every judged turn is already on disk)."""
    thread = app.session_thread
    if thread is None or not thread.is_alive():
        return
    thread.join(timeout=5.0)
    if thread.is_alive():
        from kernelfix.agent.events import SessionAborted

        app.running_session.record_interruption(SessionAborted("left by the user mid-turn"))
        print(f"kernelfix: left mid-turn; continue the session with: kernelfix resume {app.running_session.store.path}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)


def _run_in_tui(session, relay):
    """Run the session under the app; re-raise what stopped it, so both front ends exit alike."""
    from kernelfix.tui.app import KernelfixApp

    app = KernelfixApp(session=session, relay=relay)
    app.run()
    _left_mid_turn(app)
    if app.error is not None:
        raise app.error
    if app.outcome is None:  # the app closed before the session said how it ended
        traj = session.store.read_trajectory()
        return traj.outcome if traj is not None else None
    return app.outcome


def _run_session(session, sink) -> int:
    """Run under the terminal UI when ``sink`` is its EventRelay, else headless."""
    from kernelfix.agent.models import ModelError
    from kernelfix.agent.session import SessionError
    from kernelfix.tools.task import TaskError

    from kernelfix.agent.headless import HeadlessReporter

    tui = not isinstance(sink, HeadlessReporter)  # no textual import for a headless run
    try:
        outcome = _run_in_tui(session, sink) if tui else session.run()
    except ModelError as e:
        print(f"kernelfix: {e}\nkernelfix: the session is kept; continue it with: kernelfix resume {session.store.path}", file=sys.stderr)
        if e.kind == "config":
            return EXIT_USAGE
        traj = session.store.read_trajectory()
        return EXIT_OK if traj is not None and traj.outcome.success else EXIT_FAIL
    except TaskError as e:
        raise UsageError(f"{e}\n(the session directory {session.store.path} keeps its records; the task itself must be fixed)") from None
    except SessionError as e:
        raise UsageError(str(e)) from None
    except KeyboardInterrupt:
        print(f"kernelfix: continue the session with: kernelfix resume {session.store.path}", file=sys.stderr)
        raise
    except OSError as e:  # a full disk, a read-only or vanished session dir: the checkpoints hold every judged turn
        print(f"kernelfix: the session could not write its records: {e}\nkernelfix: judged turns are kept up to the last checkpoint; fix the cause, then: kernelfix resume {session.store.path}", file=sys.stderr)
        return EXIT_FAIL
    if tui and outcome is not None:
        print(f"kernelfix: {session.store.path}: " + ("a correct, legal kernel was found" if outcome.success else "no correct, legal kernel")
              + (f"; best is turn {outcome.best_turn}: {session.store.path}/best.py" if outcome.best_turn is not None else ""), file=sys.stderr)
    return EXIT_OK if outcome is not None and outcome.success else EXIT_FAIL


def cmd_optimize(args: argparse.Namespace) -> int:
    from kernelfix.agent.runner import Session
    from kernelfix.agent.session import SessionError
    from kernelfix.tools.task import Task, TaskError

    cfg = _load_config(args)
    judge_cfg = _judge_config(args, profile_by_default=True)
    agent_cfg = _agent_config(cfg.agent, args)
    try:
        task = Task.load(args.task)
    except TaskError as e:
        raise UsageError(str(e)) from None
    candidate = None
    if args.candidate:
        try:
            candidate = Path(args.candidate).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"cannot read candidate {args.candidate}: {e}") from None
    model = _model(agent_cfg)
    session_dir = args.session_dir or Path("sessions") / f"{task.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    sink = _event_sink(_use_tui(args.headless))
    try:
        session = Session.create(
            session_dir,
            task_path=task.path,
            model=model,
            agent=agent_cfg,
            judge_config=judge_cfg,
            candidate=candidate,
            candidate_name=Path(args.candidate).name if args.candidate else "candidate.py",
            candidate_path=str(Path(args.candidate).resolve()) if args.candidate else None,
            on_event=sink,
        )
    except (TaskError, SessionError) as e:
        raise UsageError(str(e)) from None
    return _run_session(session, sink)


def _open_for_resume(session_dir, args: argparse.Namespace, on_event):
    """A stored session ready to run again under the limits in ``args``; locked until its run ends."""
    from kernelfix.agent.runner import Session
    from kernelfix.agent.session import SessionDir, SessionError

    try:
        store = SessionDir.open(session_dir)
        store.lock()
    except SessionError as e:
        raise UsageError(str(e)) from None
    try:
        agent_cfg = _agent_config(store.settings.agent, args)
        store.change_agent_settings(agent_cfg)
        model = _model(agent_cfg.model_copy(update={"model": store.settings.model}))
    except BaseException:
        store.unlock()
        raise
    return Session(store, model, on_event=on_event)


def cmd_resume(args: argparse.Namespace) -> int:
    sink = _event_sink(_use_tui(args.headless))
    return _run_session(_open_for_resume(args.session_dir, args, sink), sink)


def cmd_sessions(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from kernelfix.tui.session_list import find_sessions

    root = Path(args.root)
    if not root.is_dir():
        raise UsageError(f"{root} is not a folder of sessions")
    if not (args.list or args.json) and _on_terminal():
        from kernelfix.tui.app import KernelfixApp

        app = KernelfixApp(sessions_root=root, resume=lambda path, sink: _open_for_resume(path, args, sink))
        app.run()
        _left_mid_turn(app)
        if app.error is not None:
            print(f"kernelfix: the resumed session stopped: {app.error}", file=sys.stderr)
            return EXIT_FAIL
        return EXIT_OK
    found = find_sessions(root)
    if args.json:
        sys.stdout.write("[" + ",\n".join(s.model_dump_json() for s in found) + "]\n")
        return EXIT_OK
    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("session", "task", "turns", "status", "result", "best", "updated (UTC)"):
        t.add_column(col, no_wrap=col != "session", overflow="fold")  # the path folds; the short columns stay whole
    for s in found:
        t.add_row(s.path, s.task, str(s.turns), s.status, s.result, s.best, s.updated)
    Console(highlight=False).print(t if found else f"no sessions under {root}", soft_wrap=True)
    return EXIT_OK


def cmd_batch(args: argparse.Namespace) -> int:
    from rich.console import Console

    from kernelfix.agent.batch import plots, report
    from kernelfix.agent.batch.plan import BatchSettings, PlanError, plan
    from kernelfix.agent.batch.progress import BatchProgress
    from kernelfix.agent.batch.runner import BatchBusy, LocalRunner, OutDir, default_workers, visible_gpus
    from kernelfix.tools.judge import resolve_device

    cfg = _load_config(args)
    judge_cfg = _judge_config(args)
    device, notice = resolve_device(judge_cfg.device)
    judge_cfg = judge_cfg.model_copy(update={"device": device})  # every session of the batch judges alike
    agent_cfg = _agent_config(cfg.agent, args)
    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be at least 1")
    if agent_cfg.api_key_env and not os.environ.get(agent_cfg.api_key_env):
        raise UsageError(f"the environment variable {agent_cfg.api_key_env} (from --api-key-env) is not set")
    settings = BatchSettings(out=str(Path(args.out).resolve()), agent=agent_cfg, judge=judge_cfg)
    try:
        jobs = plan(args.tasks, settings)
    except PlanError as e:
        raise UsageError(f"cannot run this batch:\n{e}") from None
    if args.ray:
        from kernelfix.agent.batch.ray_backend import RayUnavailable, ray_module

        try:
            ray_module(args.ray)
        except RayUnavailable as e:
            raise UsageError(str(e)) from None
    out = OutDir(settings.out)
    try:
        out.lock()
    except BatchBusy as e:
        raise UsageError(str(e)) from None
    err = Console(stderr=True, highlight=False)
    if notice:
        err.print(f"[yellow]note:[/] {notice}")
    gpus = visible_gpus() if device == "cuda" else []
    workers = args.workers or default_workers(len(jobs), os.cpu_count() or 2, len(gpus))
    where = f"Ray cluster {args.ray}" if args.ray else f"{workers} workers" + (f", GPUs {','.join(gpus)}" if gpus else f" on {device}")
    err.print(f"kernelfix batch: {len(jobs)} tasks, {where}; sessions in {out.path / 'sessions'}", soft_wrap=True)
    out.write_plan(jobs)
    started = time.time()
    interrupted = False
    try:
        with BatchProgress(len(jobs), err) as progress:
            if args.ray:
                from kernelfix.agent.batch.ray_backend import RayRunner

                runner = RayRunner(out, address=args.ray, per_gpu=workers, cuda=device == "cuda", on_done=progress.finished)
            else:
                runner = LocalRunner(out, workers=workers, gpus=gpus, on_start=progress.started, on_done=progress.finished)
            results = runner.run(jobs)
    except KeyboardInterrupt:
        interrupted = True
        results = [r for r in (_read_result(out.result_path(j.name), since=started) for j in jobs) if r is not None]
        err.print("kernelfix batch: interrupted; run the same command again to continue", style="yellow")
    finally:
        out.unlock()
    summary = report.summarize(report.outcomes(results))
    report.write(out.path, summary, plots.write_plots(out.path, summary))
    if args.json:
        sys.stdout.write((out.path / "summary.json").read_text())
    else:
        Console(highlight=False).print(_batch_digest(summary, out.path), soft_wrap=True)
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if summary.finished == summary.tasks else EXIT_FAIL


def _read_result(path: Path, *, since: float):
    """A job's result written by this run (an older file is an earlier run's), or None."""
    from kernelfix.agent.batch.worker import TaskResult

    try:
        if path.stat().st_mtime < since:
            return None
        return TaskResult.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _batch_digest(s, out: Path) -> str:
    from kernelfix.agent.batch.report import FAST_P, NOT_TIMED, p_key

    def fast(fp) -> str:
        return NOT_TIMED if isinstance(fp, str) else "  ".join(f"fast_{p_key(p)} {100 * fp[p_key(p)]:.0f}%" for p in FAST_P)

    rate = "-" if s.correct_rate is None else f"{100 * s.correct_rate:.0f}%"
    return "\n".join(
        [
            f"{s.tasks} tasks: {s.finished} finished, {s.unfinished} unfinished, {s.failed} failed; {s.correct} correct ({rate})",
            f"vs eager:         {fast(s.fast_p_eager)}",
            f"vs torch.compile: {fast(s.fast_p_compile)}",
            f"report: {out / 'summary.md'} (and summary.json, plots/)",
        ]
    )


def cmd_export(args: argparse.Namespace) -> int:
    from pydantic import ValidationError
    from rich.console import Console

    from kernelfix.agent.export.exporter import ExportError, ExportOptions, export
    from kernelfix.agent.export.filters import FilterConfig

    out = Path(args.out)
    fmt = args.format or ("parquet" if out.suffix == ".parquet" else "chat-jsonl")
    try:
        opts = ExportOptions(
            format=fmt,
            loss=args.loss,
            all_branches=args.all_branches,
            filters=FilterConfig(
                require_correct=not args.keep_incorrect,
                min_speedup_gain=args.min_speedup_gain or None,
                per_task=args.per_task or None,
                dedup=not args.no_dedup,
                leakage_threshold=args.leakage_threshold,
                drop_leakage=args.drop_leakage,
            ),
        )
    except ValidationError as e:
        raise UsageError(f"invalid export setting: {e}") from None
    try:
        a = export(args.sessions, out, opts)
    except (ExportError, OSError) as e:
        raise UsageError(str(e)) from None
    if args.json:
        sys.stdout.write(a.model_dump_json(indent=2) + "\n")
    elif fmt == "rl-jsonl":
        rewards = ", ".join(f"{k}: {n}" for k, n in a.rewards.items()) or "none"
        Console(highlight=False).print(
            f"{a.records_out} judged candidates ({a.tasks_out} tasks) of {a.sessions_found} sessions -> {out} (rl-jsonl); rewards {rewards}; analysis in {out.parent / 'ANALYSIS.md'}",
            soft_wrap=True,
        )
    else:
        con = Console(highlight=False)
        con.print(f"{a.records_out} records ({a.tasks_out} tasks) of {a.sessions_found} sessions -> {out} ({a.format}); analysis in {out.parent / 'ANALYSIS.md'}", soft_wrap=True)
        for f in a.filters:
            extra = f", flagged {f.flagged}" if f.flagged else ""
            con.print(f"  {f.name:<13} {'on ' if f.enabled else 'off'} in {f.seen:>4}  kept {f.kept:>4}  dropped {f.dropped:>4}{extra}", soft_wrap=True)
        if a.unusable:
            con.print(f"  {len(a.unusable)} sessions unusable (see ANALYSIS.md)", soft_wrap=True)
    return EXIT_OK if a.records_out else EXIT_FAIL


def cmd_capture(args: argparse.Namespace) -> int:
    from kernelfix.capture.errors import CaptureFailed, CaptureInputError
    from kernelfix.capture.pipeline import capture
    from kernelfix.capture.records import CaptureReport
    from kernelfix.capture.summary import capture_text

    config = _judge_config(args)
    try:
        result = capture(
            args.script, args.module, args.out, call=args.call, script_args=args.script_args,
            keep_call=not args.no_keep_call, force=args.force, config=config,
        )
    except (CaptureInputError, CaptureFailed) as e:
        code = EXIT_USAGE if isinstance(e, CaptureInputError) else EXIT_FAIL
        if args.json:
            sys.stdout.write(CaptureReport(ok=False, exit_code=code, error=str(e)).model_dump_json(indent=2) + "\n")
        print(f"kernelfix capture: {e}", file=sys.stderr)
        return code
    if args.json:
        report = CaptureReport(ok=True, exit_code=EXIT_OK, files=[str(f) for f in result.files], manifest=result.manifest)
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    else:
        print(capture_text(result.manifest, result.files))
    return EXIT_OK


def cmd_swap(args: argparse.Namespace) -> int:
    from kernelfix.capture.errors import SwapCheckFailed, SwapError
    from kernelfix.capture.records import SwapReport
    from kernelfix.capture.summary import swap_text
    from kernelfix.capture.swap import SessionKernel, load_best, snippet

    try:
        sk = SessionKernel(args.session_dir)
    except SwapError as e:
        raise UsageError(str(e)) from None
    report = SwapReport(
        ok=False, session=str(sk.store.path), task=str(sk.files.task), module_path=sk.manifest.module_path,
        best_turn=sk.best_turn, speedup_eager=sk.speedup_eager,
    )
    try:
        module = load_best(args.session_dir, device=args.device, check=not args.no_check)
        report.ok, report.checks = True, module.checks
        report.snippet = snippet(sk.manifest.module_path, args.session_dir)
    except SwapCheckFailed as e:
        report.error, report.checks = str(e), e.check
    except SwapError as e:
        report.error = str(e)
    if args.json:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    else:
        print(swap_text(report), file=sys.stdout if report.ok else sys.stderr)
    return EXIT_OK if report.ok else EXIT_FAIL


def _capture_parsers(sub) -> None:
    """`capture` and `swap`."""
    p = sub.add_parser(
        "capture",
        usage="kernelfix capture SCRIPT --module PATH [--out TASK.py] [--call N] [--no-keep-call] [--force] [--json] [--config FILE] [-- SCRIPT_ARGS ...]",
        help="turn a submodule of your own model into a task (runs your script, captures one call)",
        description=(
            "Run SCRIPT (python SCRIPT ARGS: it builds your model and runs a forward, as your own code does) and capture "
            "one call of the submodule PATH names (model.layers.0.mlp: submodule layers.0.mlp of the script's variable "
            "`model`). torch.export traces it; kernelfix writes a self-contained KernelBench task: Model holds the traced "
            "computation as readable ATen code, with the module's parameters and buffers in TASK.weights.pt beside it; "
            "get_inputs() draws fresh tensors of the captured shapes, dtypes, strides and value ranges (your data is "
            "never in the task). The task is kept only if it reproduces the captured output within the judge's "
            "tolerance. Also written: TASK.capture.json (how the module was called) and TASK.call.pt (the captured "
            "inputs and output, for `kernelfix swap`'s check; --no-keep-call leaves it out). The script stops right "
            "after the captured call."
        ),
        epilog=(
            "Exit codes: 0 task written and checked, 1 could not reproduce (export cannot trace the module, it draws "
            "random numbers, or the task's output differs; nothing written), 2 bad input (no script, the script failed, "
            "PATH names nothing or was never called, --out exists). Example: kernelfix capture train.py --module "
            "model.blocks.0.mlp --out tasks/mlp.py -- --batch 8"
        ),
    )
    p.add_argument("script", metavar="SCRIPT", help="your Python script that builds the model and runs a forward")
    p.add_argument("--module", required=True, metavar="PATH", help="the submodule to capture: VARIABLE.sub.path (model.layers.0.mlp)")
    p.add_argument("--out", metavar="TASK.py", help="the task to write (default captured/PATH_WITH_UNDERSCORES.py)")
    p.add_argument("--call", type=int, default=1, metavar="N", help="capture the module's N-th call (default 1)")
    p.add_argument("--no-keep-call", action="store_true", help="do not keep the captured inputs and output (TASK.call.pt); swap then checks on drawn inputs")
    p.add_argument("--force", action="store_true", help="replace an earlier capture at --out")
    p.add_argument("--json", action="store_true", help="print the capture report (kernelfix.capture.records.CaptureReport) as JSON")
    p.add_argument("--config", metavar="FILE", help="kernelfix.toml or pyproject.toml to read the judge's tolerance from")
    p.set_defaults(func=cmd_capture, script_args=[])  # SCRIPT's own arguments: main() takes what follows --

    p = sub.add_parser(
        "swap",
        help="load a captured task's best kernel, check it, and print how to put it in your model",
        description=(
            "For a session on a task made by `kernelfix capture`: build the best kernel (best.py) with the captured "
            "weights, call it as the captured module was called on the captured inputs (TASK.call.pt; without it, on "
            "inputs from get_inputs() against the task's Model), compare the output within the judge's tolerance, and "
            "print the Python lines that swap it into your model (kernelfix.load_best)."
        ),
        epilog="Exit codes: 0 loaded and checked, 1 no correct kernel yet or the check failed, 2 not a session of a captured task.",
    )
    p.add_argument("session_dir", metavar="SESSION_DIR")
    p.add_argument("--device", metavar="DEVICE", help="where to run the check (default: where the module was captured, else cpu)")
    p.add_argument("--no-check", action="store_true", help="only load the kernel and print the snippet")
    p.add_argument("--json", action="store_true", help="print the report (kernelfix.capture.records.SwapReport) as JSON")
    p.set_defaults(func=cmd_swap)


def _limit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--api-key-env", metavar="VAR", help="environment variable that holds the API key")
    p.add_argument("--max-turns", type=int, metavar="N", help="model turns, or rounds with --width above 1 (default 8)")
    p.add_argument("--max-tokens", type=int, metavar="N", help="stop once this many prompt + completion tokens are spent (over every branch)")
    p.add_argument("--max-cost", type=float, metavar="USD", help="stop once the model cost this much (where litellm knows prices)")
    p.add_argument("--max-wall", type=float, metavar="SECONDS", help="stop once turns took this long in all")


def _session_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--headless", action="store_true", help="no terminal UI: one line per judged turn, then a summary")
    _limit_args(p)
    _search_args(p)


def _search_args(p: argparse.ArgumentParser) -> None:
    """Width of the search (docs/search.md); each flag overrides [agent] in kernelfix.toml."""
    p.add_argument("--width", type=int, metavar="N", help="candidates per round, drawn and judged in parallel (default 1: one chain)")
    p.add_argument("--keep", type=int, metavar="K", help="branches each later round continues: the round's best K (default: the width)")
    p.add_argument("--sampling", choices=["parallel", "n"], help="a round's replies to one prompt: parallel calls (default) or one call with n=")
    p.add_argument("--stop-at-sol", type=float, metavar="F", help="stop once a correct kernel's DRAM or SM throughput reaches F (0-1) of peak (needs the profile)")


def _batch_parsers(sub) -> None:
    """`batch` and `export`."""
    p = sub.add_parser(
        "batch",
        help="repair or optimize many tasks, resumably, and report the field's metrics",
        description=(
            "Run one session per task (TASKS: task files, directories of them, or JSONL manifests of "
            '{"task", "candidate"?, "target"?, "model"?, "replay"?}), several at a time: compiles in parallel, '
            "GPU runs queued per GPU so timings never share one. Sessions live in OUT/sessions; running the same "
            "command again skips finished sessions and resumes the rest. Writes OUT/summary.json, summary.md and plots/."
        ),
        epilog="Exit codes: 0 every session finished, 1 some did not (failed or unfinished), 2 bad usage or input, 130 interrupted.",
    )
    p.add_argument("tasks", nargs="+", metavar="TASKS", help="task files, directories of task files, or manifests (.jsonl)")
    p.add_argument("--model", metavar="M", help="litellm model string, replay:FILE.jsonl, or replay:DIR (DIR/<task stem>.jsonl per task)")
    p.add_argument("--out", metavar="DIR", default="kernelfix-batch", help="where sessions, logs and the report go (default ./kernelfix-batch)")
    p.add_argument("--workers", type=int, metavar="N", help="sessions at a time (default: half the CPU cores, at least one per GPU); with --ray, at most this many per GPU")
    p.add_argument("--json", action="store_true", help="print summary.json on stdout (progress stays on stderr)")
    p.add_argument("--ray", metavar="ADDRESS", help="run the sessions as Ray tasks on this cluster (auto, ray://host:10001, local); needs kernelfix[ray]")
    p.add_argument("--api-base", metavar="URL", help="OpenAI-compatible server (vLLM, SGLang, Ollama, llama.cpp)")
    p.add_argument("--target-speedup", type=float, metavar="X", help="goal per task: this speedup over eager (a manifest's target wins)")
    _limit_args(p)  # each per session
    _search_args(p)  # a manifest's width/keep win
    p.add_argument("--no-shape-block", action="store_true", help="leave the inputs' shapes and strides out of the first prompt")
    _common_judge_args(p)
    p.set_defaults(func=cmd_batch)

    p = sub.add_parser(
        "export",
        help="turn sessions into SFT data (chat JSONL or parquet) with curation filters",
        description=(
            "One record per session (SESSIONS: session directories, or folders holding them such as a batch's OUT) in "
            "OpenAI chat format: the conversation up to the last model turn, earlier reasoning removed, a per-message "
            "loss flag (weight) on assistant messages, and metadata (task, per-turn verdicts, final speedup, reasoning "
            "tokens). Filters run in order, each optional and reported: correct, speedup gain, shortest reasoning per "
            "task, exact dedup, leakage. ANALYSIS.json and ANALYSIS.md go beside FILE."
        ),
        epilog="Exit codes: 0 records written, 1 no record survived the filters, 2 bad usage or input.",
    )
    p.add_argument("sessions", nargs="+", metavar="SESSIONS", help="session directories, or folders holding sessions")
    p.add_argument("--out", required=True, metavar="FILE", help="the data file to write (.jsonl, or .parquet)")
    p.add_argument(
        "--format", choices=["chat-jsonl", "parquet", "rl-jsonl"],
        help="default: parquet for a .parquet FILE, else chat-jsonl; rl-jsonl: one record per judged candidate with its reward (no filters)",
    )
    p.add_argument("--all-branches", action="store_true", help="a search (--width above 1): one record per root-to-leaf path, not only the best path")
    p.add_argument("--loss", choices=["final", "all-assistant"], default="final", help="which assistant messages carry loss (default final)")
    p.add_argument("--keep-incorrect", action="store_true", help="filter off: keep sessions whose final answer is not correct and legal")
    p.add_argument("--min-speedup-gain", type=float, default=1.2, metavar="X", help="final / first correct speedup over eager at least X (default 1.2; 0: off)")
    p.add_argument("--per-task", type=int, default=1, metavar="K", help="keep the K sessions of each task with the shortest final reasoning (default 1; 0: all)")
    p.add_argument("--no-dedup", action="store_true", help="filter off: keep exact duplicates")
    p.add_argument("--leakage-threshold", type=float, default=0.8, metavar="J", help="flag word-Jaccard(prompt, completion) >= J (default 0.8)")
    p.add_argument("--drop-leakage", action="store_true", help="drop flagged records instead of only flagging them")
    p.add_argument("--json", action="store_true", help="print ANALYSIS.json on stdout")
    p.set_defaults(func=cmd_export)


def build_parser() -> argparse.ArgumentParser:
    from kernelfix import __version__

    parser = argparse.ArgumentParser(
        prog="kernelfix",
        description=(
            "Repair and optimize CUDA/Triton kernels for KernelBench-format PyTorch tasks. "
            "A language model proposes kernels; a sandboxed judge compiles them, checks them against "
            "the PyTorch reference, rejects kernels that call torch to do the work, and times them "
            "against eager and torch.compile."
        ),
        epilog="Exit codes: 0 ok, 1 the candidate failed, 2 bad usage or unreadable input, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"kernelfix {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "eval",
        help="judge one candidate kernel against a task",
        description=(
            "Judge CANDIDATE (a .py file defining ModelNew, or a saved model reply whose last ```python block "
            "defines it) against TASK (a KernelBench file with Model, get_inputs, get_init_inputs): compile, "
            "correctness over several seeded trials, forbidden torch ops, and on a GPU timing against eager "
            "PyTorch and torch.compile and, with --profile, an Nsight Compute profile."
        ),
        epilog="Exit codes: 0 verdict ok, 1 any other verdict, 2 bad usage or unreadable input.",
    )
    p.add_argument("task", metavar="TASK", help="KernelBench-format task file")
    p.add_argument("candidate", metavar="CANDIDATE", help="candidate .py file, or a model reply (.md/.txt)")
    _common_judge_args(p)
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.add_argument("--workdir", metavar="DIR", help="keep the evaluation's files (logs, builds) here")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser(
        "optimize",
        help="repair or optimize a kernel with a language model, turn by turn",
        description=(
            "Run the agent loop on TASK: a language model proposes a kernel, the judge checks it, the verdict "
            "goes back as the next prompt, until a correct, legal kernel reaches --target-speedup, --max-turns "
            "runs out, a budget is spent or you stop it. Every judged turn is a commit in the session directory; "
            "a killed session continues with `kernelfix resume`."
        ),
        epilog="Exit codes: 0 a correct, legal kernel was found, 1 not, 2 bad usage or input (task, model, key, session directory).",
    )
    p.add_argument("task", metavar="TASK", help="KernelBench-format task file")
    p.add_argument("--candidate", metavar="FILE", help="a failing or slow kernel (.py, or a saved reply) to judge as turn 0 and repair")
    p.add_argument("--model", metavar="M", help="litellm model string (openai/gpt-4o, anthropic/..., openai/NAME with --api-base), or replay:FILE.jsonl")
    p.add_argument("--api-base", metavar="URL", help="OpenAI-compatible server (vLLM, SGLang, Ollama, llama.cpp)")
    p.add_argument("--session-dir", metavar="DIR", help="where the session lives (default sessions/TASK-DATE-TIME); must be new or empty")
    p.add_argument("--target-speedup", type=float, metavar="X", help="goal: this speedup over eager PyTorch (default 1.0)")
    p.add_argument("--no-shape-block", action="store_true", help="leave the inputs' shapes and strides out of the first prompt")
    _session_args(p)
    _common_judge_args(p)
    p.set_defaults(func=cmd_optimize)

    p = sub.add_parser(
        "resume",
        help="continue a session that was killed, interrupted or ran out of turns",
        description=(
            "Continue the session in SESSION_DIR from its last checkpoint, under the settings it started with; "
            "no judged turn is lost or judged twice. Raising --max-turns or a budget continues a session that "
            "stopped on that limit."
        ),
        epilog="Exit codes: 0 a correct, legal kernel was found, 1 not, 2 bad usage or input.",
    )
    p.add_argument("session_dir", metavar="SESSION_DIR")
    _session_args(p)
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser(
        "sessions",
        help="list earlier sessions; on a terminal, browse their history and resume one",
        description=(
            "List the sessions under ROOT (default ./sessions; a batch's OUT works too). On a terminal this opens "
            "the terminal UI: enter shows a session's turns, r resumes it (under the limits given here, as "
            "`kernelfix resume` would). --list prints a table instead."
        ),
        epilog="Exit codes: 0 listed, 1 a resumed session stopped on an error, 2 bad usage.",
    )
    p.add_argument("root", nargs="?", default="sessions", metavar="ROOT", help="folder holding sessions (default ./sessions)")
    p.add_argument("--list", action="store_true", help="print a table, even on a terminal")
    p.add_argument("--json", action="store_true", help="print the list as JSON (implies --list)")
    _limit_args(p)
    p.set_defaults(func=cmd_sessions)

    _batch_parsers(sub)
    _capture_parsers(sub)
    from kernelfix import cli_baseline

    cli_baseline.add_parser(sub, _common_judge_args)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    script_args = None
    if argv[:1] == ["capture"] and "--" in argv:  # the captured script's own arguments (argparse cannot mix them in)
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1 :]
    args = parser.parse_args(argv)
    if script_args is not None:
        args.script_args = script_args
    try:
        return args.func(args)
    except UsageError as e:
        print(f"kernelfix: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("kernelfix: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
