"""``kernelfix eval``: judge one candidate kernel against a task."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernelfix.cli.common import EXIT_FAIL, EXIT_OK, UsageError, add_judge_args, judge_config_for, verbosity_args


def add_parser(sub) -> None:
    p = sub.add_parser(
        "eval",
        help="judge one candidate kernel against a task",
        description=(
            "Judge CANDIDATE (a .py file defining ModelNew, or a saved model reply whose last ```python block "
            "defines it) against TASK (a KernelBench file with Model, get_inputs, get_init_inputs): compile, "
            "correctness over several seeded trials, forbidden torch ops, and on a GPU timing against eager "
            "PyTorch and torch.compile and, with --profile, an Nsight Compute profile. A wrong or crashing CUDA/Triton "
            "kernel is run under compute-sanitizer on a reduced input (--sanitize: a correct one too), which names the "
            "cause: a race, an out-of-bounds or misaligned access, a barrier in divergent code, an uninitialized read."
        ),
        epilog=(
            "A machine fault (an infra:* verdict) is judged again after a pause, up to judge.infra_retries times; the "
            "verdict's infra_retries lists what was met. Exit codes: 0 verdict ok, 1 any other verdict, 2 bad usage or unreadable input."
        ),
    )
    p.add_argument("task", metavar="TASK", help="KernelBench-format task file")
    p.add_argument("candidate", metavar="CANDIDATE", help="candidate .py file, or a model reply (.md/.txt)")
    add_judge_args(p)
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.add_argument("--workdir", metavar="DIR", help="keep the evaluation's files (logs, builds) here")
    verbosity_args(
        p,
        quiet="print the verdict's category alone (ok, correctness_error:numerical, ...), no notes",
        verbose="every check, the stage times and the timers inside them, and the feedback the model reads",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    cfg = judge_config_for(args)
    _start_fork_servers(args, cfg)
    from kernelfix.base.terminal import console
    from kernelfix.cli.verdict_view import person_view, verdict_view
    from kernelfix.library.api import Judge
    from kernelfix.library.sources import candidate_source
    from kernelfix.tools.evaluation import StageEvent
    from kernelfix.tools.task import TaskError

    quiet, verbose = args.verbosity < 0, args.verbosity > 0
    err = console(stderr=True, quiet=quiet)
    cand_path = Path(args.candidate)
    try:
        source, filename = candidate_source(cand_path)  # a .py is code; a .md/.txt a saved reply
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read candidate {cand_path}: {e}") from None
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="kernelfix-eval-"))
    try:
        judge = Judge(args.task, config=cfg, workdir=workdir)
    except TaskError as e:
        raise UsageError(str(e)) from None
    # One verdict, then the judge closes: the candidate's worker ends after its verdict, beside the reference's
    # end in close (each a CUDA context's teardown), not before it. Its files stay; close waits for both.
    judge.engine.exit_later = True
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

        def retrying(tried: int, wait_s: float, v) -> None:
            err.print(
                f"[yellow]machine fault[/] ({v.category.value}: {(v.message or '')[:160]}): judging again in {wait_s:.0f} s "
                f"(try {tried + 1} of {cfg.infra_retries + 1}; --no-retry reports it at once)"
            )

        try:
            verdict = judge.evaluate(
                source, kind="code" if filename.endswith(".py") else "reply", on_event=show, on_retry=retrying
            )
        except TaskError as e:
            raise UsageError(str(e)) from None
        finally:
            judge.close()  # the reference worker; the evaluation's files stay in the workdir
    kept = bool(args.workdir) or not verdict.ok
    if not kept:
        shutil.rmtree(workdir, ignore_errors=True)  # an ok verdict without --workdir: nothing to look at
    files = f"{workdir} (logs and build files)" if kept else None
    if args.json:
        sys.stdout.write(verdict.model_dump_json(indent=2) + "\n")
        if files:
            err.print(f"files: {files}")
    elif quiet:
        sys.stdout.write(verdict.category.value + "\n")
    else:
        console().print(verdict_view(verdict, files=files) if verbose else person_view(verdict, files=files))
    return EXIT_OK if verdict.ok else EXIT_FAIL


def _start_fork_servers(args: argparse.Namespace, cfg) -> None:
    """The fork servers of the judge this command makes, started before it imports the judge: their imports
    (torch: 3 s on the H100's host) are the cold eval's longest wait, the judge's own modules a fraction of a second
    (docs/service.md, "A cold eval with a cached CUDA build"). Only a .py candidate names its kind here (a reply's
    code is extracted by the judge); the task's name picks its config overrides, as the judge's does. A .py that the
    judge stops before it runs (a syntax error, no ModelNew: tools/candidate.py) starts the reference's alone."""
    from kernelfix.tools.candidate import check_code
    from kernelfix.tools.handles.sandboxing import start_fork_servers
    from kernelfix.tools.task import Task, TaskError

    path = Path(args.candidate)
    try:  # a task or a candidate the judge will refuse starts nothing (said below)
        task = Task.load(args.task)
        if not path.is_file():
            return
        code = path.read_text(encoding="utf-8") if path.suffix == ".py" else None
    except (TaskError, OSError, UnicodeDecodeError):
        return
    if code is not None and check_code(code).failure is not None:
        code = None  # no worker of the candidate's will run: no fork server for one
    start_fork_servers(cfg.for_task(task.name), code)
