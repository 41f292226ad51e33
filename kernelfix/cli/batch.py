"""``kernelfix batch``: one session per task, several at a time, resumably, with the field's metrics."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from kernelfix.cli.common import (
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    UsageError,
    add_judge_args,
    add_limit_args,
    add_search_args,
    agent_config_for,
    judge_config_for,
    load_config_for,
    verbosity_args,
)


def add_parser(sub) -> None:
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
    p.add_argument(
        "tasks", nargs="+", metavar="TASKS", help="task files, directories of task files, or manifests (.jsonl)"
    )
    p.add_argument(
        "--model",
        metavar="M",
        help="litellm model string, replay:FILE.jsonl, or replay:DIR (DIR/<task stem>.jsonl per task)",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        default="kernelfix-batch",
        help="where sessions, logs and the report go (default ./kernelfix-batch)",
    )
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="sessions at a time (default: half the CPU cores, at least one per GPU); with --ray, at most this many per GPU",
    )
    p.add_argument("--json", action="store_true", help="print summary.json on stdout (progress stays on stderr)")
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the sessions as Ray tasks on this cluster (auto, ray://host:10001, local); needs kernelfix[ray]",
    )
    p.add_argument("--api-base", metavar="URL", help="OpenAI-compatible server (vLLM, SGLang, Ollama, llama.cpp)")
    p.add_argument(
        "--target-speedup",
        type=float,
        metavar="X",
        help="goal per task: this speedup over eager (a manifest's target wins)",
    )
    add_limit_args(p)  # each per session
    add_search_args(p)  # a manifest's width/keep win
    p.add_argument(
        "--no-shape-block", action="store_true", help="leave the inputs' shapes and strides out of the first prompt"
    )
    add_judge_args(p)
    verbosity_args(
        p,
        quiet="no progress and no line per task: the summary alone",
        verbose="under each finished task's line, its session folder and the time it took",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kernelfix.agent.batch import plots, report
    from kernelfix.agent.batch.local_runner import BatchBusy, LocalRunner, OutDir, default_workers
    from kernelfix.agent.batch.plan import BatchSettings, PlanError, plan
    from kernelfix.agent.batch.progress import BatchProgress
    from kernelfix.base.terminal import console
    from kernelfix.tools.gpu.visible import visible_gpus
    from kernelfix.tools.judge import resolve_device

    cfg = load_config_for(args)
    judge_cfg = judge_config_for(args)
    device, notice = resolve_device(judge_cfg.device)
    judge_cfg = judge_cfg.model_copy(update={"device": device})  # every session of the batch judges alike
    agent_cfg = agent_config_for(cfg.agent, args)
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
    err = console(stderr=True, highlight=False, quiet=args.verbosity < 0)
    if notice:
        err.print(f"[yellow]note:[/] {notice}")
    gpus = visible_gpus() if device == "cuda" else []
    workers = args.workers or default_workers(len(jobs), os.cpu_count() or 2, len(gpus))
    where = (
        f"Ray cluster {args.ray}"
        if args.ray
        else f"{workers} workers" + (f", GPUs {','.join(gpus)}" if gpus else f" on {device}")
    )
    err.print(f"kernelfix batch: {len(jobs)} tasks, {where}; sessions in {out.path / 'sessions'}")
    out.write_plan(jobs)
    started = time.time()
    interrupted = False
    try:
        with BatchProgress(len(jobs), err, verbose=args.verbosity > 0) as progress:
            if args.ray:
                from kernelfix.agent.batch.ray_backend import RayRunner

                runner = RayRunner(
                    out, address=args.ray, per_gpu=workers, cuda=device == "cuda", on_done=progress.finished
                )
            else:
                runner = LocalRunner(
                    out, workers=workers, gpus=gpus, on_start=progress.started, on_done=progress.finished
                )
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
        console(highlight=False).print(
            _batch_digest(summary, out.path).splitlines()[0] if args.verbosity < 0 else _batch_digest(summary, out.path)
        )
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
        return (
            NOT_TIMED
            if isinstance(fp, str)
            else "  ".join(f"fast_{p_key(p)} {100 * fp[p_key(p)]:.0f}%" for p in FAST_P)
        )

    rate = "-" if s.correct_rate is None else f"{100 * s.correct_rate:.0f}%"
    return "\n".join(
        [
            f"{s.tasks} tasks: {s.finished} finished, {s.unfinished} unfinished, {s.failed} failed; {s.correct} correct ({rate})",
            f"vs eager:         {fast(s.fast_p_eager)}",
            f"vs torch.compile: {fast(s.fast_p_compile)}",
            f"vs eager, KernelBench allclose only: {fast(s.fast_p_eager_kernelbench)}",
            f"report: {out / 'summary.md'} (and summary.json, plots/)",
        ]
    )
