"""``kernelfix capture`` (a submodule of your model into a task) and ``kernelfix swap`` (its best kernel back)."""

from __future__ import annotations

import argparse
import sys

from kernelfix.cli.common import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    check_device,
    judge_config_for,
    verbosity_args,
)


def add_parser(sub) -> None:
    """`capture` and `swap`."""
    p = sub.add_parser(
        "capture",
        usage="kernelfix capture SCRIPT --module PATH [--out TASK.py] [--call N | --calls LIST|all [--max-calls N]] [--no-keep-call] [--force] [--json] [--config FILE] [-v|-q] [-- SCRIPT_ARGS ...]",
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
    p.add_argument(
        "--module",
        required=True,
        metavar="PATH",
        help="the submodule to capture: VARIABLE.sub.path (model.layers.0.mlp)",
    )
    p.add_argument("--out", metavar="TASK.py", help="the task to write (default captured/PATH_WITH_UNDERSCORES.py)")
    p.add_argument("--call", type=int, default=1, metavar="N", help="capture the module's N-th call (default 1)")
    p.add_argument(
        "--calls",
        metavar="LIST|all",
        help="capture several calls (1,3,4), or `all`: the first call of each distinct signature (shapes, dtypes); the task's "
        "get_input_sets() holds one input list per call (get_inputs() the first), each checked to reproduce its call",
    )
    p.add_argument(
        "--max-calls", type=int, default=8, metavar="N", help="with --calls all: at most N signatures (default 8)"
    )
    p.add_argument(
        "--no-keep-call",
        action="store_true",
        help="do not keep the captured inputs and output (TASK.call.pt); swap then checks on drawn inputs",
    )
    p.add_argument("--force", action="store_true", help="replace an earlier capture at --out")
    p.add_argument(
        "--json", action="store_true", help="print the capture report (kernelfix.capture.schema.CaptureReport) as JSON"
    )
    p.add_argument(
        "--config", metavar="FILE", help="kernelfix.toml or pyproject.toml to read the judge's tolerance from"
    )
    verbosity_args(
        p,
        quiet="the task file's path alone",
        verbose="also where the task came from: the script and its arguments, torch's "
        "version, the weights file's checksum",
    )
    p.set_defaults(func=run, script_args=[])  # SCRIPT's own arguments: main() takes what follows --

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
    p.add_argument(
        "--device", metavar="DEVICE", help="where to run the check (default: where the module was captured, else cpu)"
    )
    p.add_argument("--no-check", action="store_true", help="only load the kernel and print the snippet")
    p.add_argument("--json", action="store_true", help="print the report (kernelfix.capture.schema.SwapReport) as JSON")
    verbosity_args(
        p, quiet="one line: loaded and checked, or why not", verbose="also the session's task file and folder"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return cmd_swap(args) if args.command == "swap" else cmd_capture(args)


def cmd_capture(args: argparse.Namespace) -> int:
    from kernelfix.capture.errors import CaptureFailed, CaptureInputError
    from kernelfix.capture.pipeline import capture
    from kernelfix.capture.schema import CaptureReport
    from kernelfix.capture.summary import capture_text

    config = judge_config_for(args)
    calls = None
    if args.calls is not None:
        try:
            calls = "all" if args.calls.strip() == "all" else [int(x) for x in args.calls.split(",") if x.strip()]
        except ValueError:
            raise UsageError(f"--calls takes call numbers (1,3) or all, not {args.calls!r}") from None
    try:
        result = capture(
            args.script,
            args.module,
            args.out,
            call=args.call,
            calls=calls,
            max_calls=args.max_calls,
            script_args=args.script_args,
            keep_call=not args.no_keep_call,
            force=args.force,
            config=config,
        )
    except (CaptureInputError, CaptureFailed) as e:
        code = EXIT_USAGE if isinstance(e, CaptureInputError) else EXIT_FAIL
        if args.json:
            sys.stdout.write(CaptureReport(ok=False, exit_code=code, error=str(e)).model_dump_json(indent=2) + "\n")
        print(f"kernelfix capture: {e}", file=sys.stderr)
        return code
    if args.json:
        report = CaptureReport(
            ok=True, exit_code=EXIT_OK, files=[str(f) for f in result.files], manifest=result.manifest
        )
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    elif args.verbosity < 0:
        print(next((f for f in result.files if f.name == result.manifest.task), result.manifest.task))
    else:
        lines = capture_text(result.manifest, result.files).splitlines()
        if args.verbosity > 0:  # where it came from, before the last line (what to run next)
            m = result.manifest
            lines[-1:-1] = [
                f"  from    python {' '.join([m.script, *m.script_args])} (torch {m.torch_version}, grad {'on' if m.grad_enabled else 'off'})",
                f"  weights {m.weights} sha256 {m.weights_sha256}",
            ]
        print("\n".join(lines))
    return EXIT_OK


def cmd_swap(args: argparse.Namespace) -> int:
    check_device(args.device, f"--device {args.device}")
    from kernelfix.capture.errors import SwapCheckFailed, SwapError
    from kernelfix.capture.schema import SwapReport
    from kernelfix.capture.summary import swap_text
    from kernelfix.capture.swap import SessionKernel, load_best, snippet

    try:
        sk = SessionKernel(args.session_dir)
    except SwapError as e:
        raise UsageError(str(e)) from None
    report = SwapReport(
        ok=False,
        session=str(sk.store.path),
        task=str(sk.files.task),
        module_path=sk.manifest.module_path,
        best_turn=sk.best_turn,
        speedup_eager=sk.speedup_eager,
    )
    try:
        module = load_best(args.session_dir, device=args.device, check=not args.no_check)
        report.ok, report.checks, report.compile_path = True, module.checks, module.compile_path
        report.snippet = snippet(sk.manifest.module_path, args.session_dir)
    except SwapCheckFailed as e:
        report.error, report.checks = str(e), e.check
    except SwapError as e:
        report.error = str(e)
    if args.json:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    elif args.verbosity < 0:
        print(
            f"{report.session}: loaded and checked" if report.ok else f"kernelfix swap: {report.error}",
            file=sys.stdout if report.ok else sys.stderr,
        )
    else:
        print(swap_text(report), file=sys.stdout if report.ok else sys.stderr)
        if args.verbosity > 0:
            print(f"  task    {report.task}\n  session {report.session}")
    return EXIT_OK if report.ok else EXIT_FAIL
