"""``kernelfix export``: sessions to SFT or RL data, with curation filters."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernelfix.cli.common import EXIT_FAIL, EXIT_OK, UsageError, verbosity_args


def add_parser(sub) -> None:
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
        "--format",
        choices=["chat-jsonl", "parquet", "rl-jsonl"],
        help="default: parquet for a .parquet FILE, else chat-jsonl; rl-jsonl: one record per judged candidate with its reward (no filters)",
    )
    p.add_argument(
        "--all-branches",
        action="store_true",
        help="a search (--width above 1): one record per root-to-leaf path, not only the best path",
    )
    p.add_argument(
        "--loss",
        choices=["final", "all-assistant"],
        default="final",
        help="which assistant messages carry loss (default final)",
    )
    p.add_argument(
        "--keep-incorrect",
        action="store_true",
        help="filter off: keep sessions whose final answer is not correct and legal",
    )
    p.add_argument(
        "--min-speedup-gain",
        type=float,
        default=1.2,
        metavar="X",
        help="final / first correct speedup over eager at least X (default 1.2; 0: off)",
    )
    p.add_argument(
        "--per-task",
        type=int,
        default=1,
        metavar="K",
        help="keep the K sessions of each task with the shortest final reasoning (default 1; 0: all)",
    )
    p.add_argument("--no-dedup", action="store_true", help="filter off: keep exact duplicates")
    p.add_argument(
        "--leakage-threshold",
        type=float,
        default=0.8,
        metavar="J",
        help="flag word-Jaccard(prompt, completion) >= J (default 0.8)",
    )
    p.add_argument("--drop-leakage", action="store_true", help="drop flagged records instead of only flagging them")
    p.add_argument("--json", action="store_true", help="print ANALYSIS.json on stdout")
    verbosity_args(p, quiet="the one line that says what was written", verbose="also each unusable session with why")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from kernelfix.agent.export.exporter import ExportError, ExportOptions, export
    from kernelfix.agent.export.filters import FilterConfig
    from kernelfix.base.terminal import console

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
        from kernelfix.base.settings_errors import problems

        flags = {
            "min_speedup_gain": "--min-speedup-gain",
            "per_task": "--per-task",
            "leakage_threshold": "--leakage-threshold",
        }
        zero = {
            "--min-speedup-gain": " (or 0: off)",
            "--per-task": " (or 0: every session)",
        }  # 0 turns these filters off
        lines = problems(e, ExportOptions, lambda loc: flags.get(str(loc[-1]), ".".join(map(str, loc))), assign=" ")
        raise UsageError("; ".join(x + zero.get(x.split(" ")[0], "") for x in lines)) from None
    try:
        a = export(args.sessions, out, opts)
    except (ExportError, OSError) as e:
        raise UsageError(str(e)) from None
    if args.json:
        sys.stdout.write(a.model_dump_json(indent=2) + "\n")
        return EXIT_OK if a.records_out else EXIT_FAIL
    con = console(highlight=False)
    if fmt == "rl-jsonl":
        rewards = ", ".join(f"{k}: {n}" for k, n in a.rewards.items()) or "none"
        con.print(
            f"{a.records_out} judged candidates ({a.tasks_out} tasks) of {a.sessions_found} sessions -> {out} (rl-jsonl); rewards {rewards}; analysis in {out.parent / 'ANALYSIS.md'}"
        )
    else:
        con.print(
            f"{a.records_out} records ({a.tasks_out} tasks) of {a.sessions_found} sessions -> {out} ({a.format}); analysis in {out.parent / 'ANALYSIS.md'}"
        )
        if args.verbosity >= 0:
            for f in a.filters:
                extra = f", flagged {f.flagged}" if f.flagged else ""
                con.print(
                    f"  {f.name:<13} {'on ' if f.enabled else 'off'} in {f.seen:>4}  kept {f.kept:>4}  dropped {f.dropped:>4}{extra}"
                )
    if a.unusable and args.verbosity > 0:
        con.print(f"  {len(a.unusable)} sessions unusable:")
        for u in a.unusable:
            con.print(f"    {u.path}: {u.why}", markup=False)
    elif a.unusable and args.verbosity == 0:
        con.print(f"  {len(a.unusable)} sessions unusable (-v lists them; ANALYSIS.md too)")
    return EXIT_OK if a.records_out else EXIT_FAIL
