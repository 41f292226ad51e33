"""``kernelfix baseline``: the reference of each task, checked and timed before any candidate."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernelfix.cli.common import EXIT_FAIL, EXIT_OK, UsageError, add_judge_args, judge_config_for, verbosity_args


def add_parser(sub) -> None:
    p = sub.add_parser(
        "baseline",
        help="check and time each task's reference (eager, torch.compile) before any candidate",
        description=(
            "For each TASK (a KernelBench file, or a directory of them): build the reference at the task's own "
            "size, check that two runs under one seed agree, say where atol/rtol are vacuous (zeros or a constant "
            "pass them), and on a GPU time eager PyTorch and torch.compile the judge's way. Prints a table (or "
            "JSON); --out keeps the report and a rerun resumes where it stopped. Timings land in the judge's "
            "baseline cache, so later evaluations of the same tasks reuse them."
        ),
        epilog="Exit codes: 0 every task has a baseline, 1 some task failed (its row says why), 2 bad usage, 130 interrupted.",
    )
    p.add_argument("tasks", nargs="+", metavar="TASK_OR_DIR", help="task files, or directories of them")
    add_judge_args(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--out", metavar="FILE", help="write the report here as each task finishes; resume from it")
    p.add_argument("--workers", type=int, metavar="N", help="tasks at a time (default: 4 on a GPU, 1 on cpu)")
    p.add_argument("--fresh", action="store_true", help="measure again, ignoring rows in --out and the baseline cache")
    p.add_argument("--no-compile", action="store_true", help="time eager only")
    p.add_argument(
        "--kernelbench-times",
        metavar="JSON",
        help="KernelBench's published reference times (results/timing/<gpu>/baseline_time_torch.json): show them beside eager",
    )
    verbosity_args(
        p,
        quiet="no progress and no line per task: the table alone",
        verbose="each task's line also gives one reference forward's time, the memory peak, how inputs were drawn and "
        "whether the timings came from the baseline cache",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from kernelfix.base.terminal import clip, console
    from kernelfix.cli import baseline_run as baseline

    cfg = judge_config_for(args)
    # One trial and its fresh twin are all a baseline needs: no varied inputs, no float64, nothing cached for later candidates.
    cfg = cfg.model_copy(
        update={
            "trials": 1,
            "input_variants": [],
            "float64_reference": False,
            "reference_cache_gb": 0.0,
            "time_torch_compile": cfg.time_torch_compile and not args.no_compile,
        }
    )
    paths = baseline.find_tasks(args.tasks)
    missing = [p for p in paths if not p.exists()]
    if missing:
        raise UsageError(f"no such task file: {missing[0]}")
    if not paths:
        raise UsageError("no task files found")
    kb = {}
    if args.kernelbench_times:
        try:
            kb = baseline.kernelbench_times(Path(args.kernelbench_times))
        except (OSError, ValueError, KeyError) as e:
            raise UsageError(f"cannot read {args.kernelbench_times}: {e}") from None
    from kernelfix.tools.judge import resolve_device

    device, _ = resolve_device(cfg.device)
    workers = args.workers or (4 if device == "cuda" else 1)
    if workers < 1:
        raise UsageError("--workers must be at least 1")
    err = console(stderr=True, highlight=False, quiet=args.verbosity < 0)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as progress:
        bar = progress.add_task("baseline", total=len(paths))

        def landed(row: baseline.BaselineRow, resumed: bool) -> None:
            progress.advance(bar)
            what = "resumed" if resumed else f"{row.seconds:.0f} s"
            progress.console.print(
                f"{row.task}: {row.status}{f' ({clip(row.error, 160)})' if row.error else ''} [{what}]", markup=False
            )
            if args.verbosity > 0:
                progress.console.print("  " + row_detail(row), markup=False, style="dim")

        report = baseline.run(
            paths, cfg, out=Path(args.out) if args.out else None, workers=workers, fresh=args.fresh, on_row=landed
        )
    if args.json:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    else:
        out = console()
        out.print(table(report, kb))
        for r in report.rows:
            if r.status not in ("ok", "no_backward"):
                out.print(f"{r.task}: {r.error}", markup=False, highlight=False)
    # A task without a backward is an answer (integer outputs, argmax), not a failure.
    return EXIT_OK if all(r.status in ("ok", "no_backward") for r in report.rows) else EXIT_FAIL


def row_detail(r) -> str:
    """-v: what else a task's baseline measured."""
    bits = [f"one reference forward {r.ref_ms:.3g} ms" if r.ref_ms is not None else "no reference forward timed"]
    if r.peak_bytes:
        bits.append(
            f"memory peak {r.peak_bytes / 2**30:.3g} GiB"
            + (f" ({r.trial_peak_bytes / 2**30:.3g} GiB for one trial)" if r.trial_peak_bytes else "")
        )
    if r.draw:
        bits.append(f"inputs {r.draw}")
    bits.append("timings from the baseline cache" if r.baseline_cached else "timed now")
    return "; ".join(bits)


def _gib(n: int) -> str:
    if n <= 0:
        return "-"  # not known: the task failed before a trial or a count on the meta device
    return f"{n / 2**30:.2f}" if n >= 2**27 else f"{n / 2**20:.1f}M"


def _ms(t) -> str:
    return f"{t.median_ms:.3f}" if t is not None else "-"


def table(report, kb: dict[str, float]):
    from rich.table import Table

    backward = bool(report.settings.get("backward"))
    t = Table(title=f"kernelfix baseline on {report.gpu or report.device} (torch {report.torch})", show_lines=False)
    times = (
        ("eager fwd ms", "eager fwd+bwd ms", "compile fwd ms", "compile fwd+bwd ms")
        if backward
        else ("eager ms", "compile ms")
    )
    for col in ("task", "in GiB", "out GiB", "same twice", "vacuous tolerance", *times):
        t.add_column(col, overflow="fold")
    if kb:
        t.add_column("KernelBench eager ms")
        t.add_column("ratio")
    for r in report.rows:
        if r.status == "no_backward":
            cells = [
                r.task,
                _gib(r.input_bytes),
                _gib(r.output_bytes),
                "-",
                "no backward: " + (r.error or "").split("(", 1)[-1].split(")")[0],
                *["-"] * len(times),
            ]
        elif r.status != "ok":
            cells = [
                r.task,
                _gib(r.input_bytes),
                _gib(r.output_bytes),
                "-",
                r.category or r.status,
                *["-"] * len(times),
            ]
        elif backward:
            det = "yes" if r.deterministic else "no"
            cells = [
                r.task,
                _gib(r.input_bytes),
                _gib(r.output_bytes),
                det,
                "yes" if r.vacuous else "",
                _ms(r.eager_forward),
                _ms(r.eager),
                _ms(r.compiled_forward),
                _ms(r.compiled) if r.compiled else (r.compile_note or "-")[:40],
            ]
        else:
            det = (
                "yes"
                if r.deterministic
                else (
                    "inputs differ"
                    if r.inputs_equal is False
                    else f"no ({r.rel_error_between_runs:.1e})"
                    if r.rel_error_between_runs
                    else "no"
                )
            )
            cells = [
                r.task,
                _gib(r.input_bytes),
                _gib(r.output_bytes),
                det,
                "yes" if r.vacuous else "",
                f"{r.eager.median_ms:.3f}" if r.eager else "-",
                f"{r.compiled.median_ms:.3f}" if r.compiled else (r.compile_note[:40] if r.compile_note else "-"),
            ]
        if kb:
            theirs = kb.get(Path(r.path).name)
            cells += [
                f"{theirs:.3f}" if theirs else "-",
                f"{r.eager.median_ms / theirs:.2f}" if theirs and r.eager else "-",
            ]
        t.add_row(*cells)
    return t
