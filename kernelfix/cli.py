"""The ``kernelfix`` command.

Exit codes: 0 success (verdict ok); 1 the candidate failed; 2 bad usage or
unreadable input (task, candidate, config); 130 interrupted.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """Bad input from the user: printed without a traceback, exit code 2."""


def _common_judge_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=["cuda", "cpu"], help="where to judge (default: cuda when available, else cpu)")
    p.add_argument("--config", metavar="FILE", help="kernelfix.toml or pyproject.toml to read (default: nearest one)")
    p.add_argument("--trials", type=int, metavar="N", help="correctness trials (default 5)")
    p.add_argument("--atol", type=float, help="absolute tolerance (default 1e-2)")
    p.add_argument("--rtol", type=float, help="relative tolerance (default 1e-2)")


def _judge_config(args: argparse.Namespace):
    from kernelfix.config import ConfigError, load_config

    try:
        cfg = load_config(args.config).judge
    except ConfigError as e:
        raise UsageError(str(e)) from None
    updates = {k: getattr(args, k) for k in ("device", "trials", "atol", "rtol") if getattr(args, k, None) is not None}
    return cfg.model_copy(update=updates)


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
            "PyTorch and torch.compile."
        ),
        epilog="Exit codes: 0 verdict ok, 1 any other verdict, 2 bad usage or unreadable input.",
    )
    p.add_argument("task", metavar="TASK", help="KernelBench-format task file")
    p.add_argument("candidate", metavar="CANDIDATE", help="candidate .py file, or a model reply (.md/.txt)")
    _common_judge_args(p)
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.add_argument("--workdir", metavar="DIR", help="keep the evaluation's files (logs, builds) here")
    p.set_defaults(func=cmd_eval)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
