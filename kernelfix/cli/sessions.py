"""``kernelfix sessions``: list earlier sessions; on a terminal, browse and resume them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernelfix.cli.common import EXIT_FAIL, EXIT_OK, UsageError, add_limit_args, on_terminal, verbosity_args
from kernelfix.cli.optimize import left_mid_turn, open_for_resume


def add_parser(sub) -> None:
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
    p.add_argument(
        "root", nargs="?", default="sessions", metavar="ROOT", help="folder holding sessions (default ./sessions)"
    )
    p.add_argument("--list", action="store_true", help="print a table, even on a terminal")
    p.add_argument("--json", action="store_true", help="print the list as JSON (implies --list)")
    add_limit_args(p)
    verbosity_args(
        p,
        quiet="with --list, the session folders alone, one per line",
        verbose="with --list, also each session's model and why it stopped",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kernelfix.base.terminal import console, print_rows
    from kernelfix.tui.session_list import find_sessions

    root = Path(args.root)
    if not root.is_dir():
        raise UsageError(f"{root} is not a folder of sessions")
    if not (args.list or args.json or args.verbosity < 0) and on_terminal():
        from kernelfix.tui.app import KernelfixApp

        app = KernelfixApp(sessions_root=root, resume=lambda path, sink: open_for_resume(path, args, sink))
        app.run()
        left_mid_turn(app)
        if app.error is not None:
            print(f"kernelfix: the resumed session stopped: {app.error}", file=sys.stderr)
            return EXIT_FAIL
        return EXIT_OK
    found = find_sessions(root)
    if args.json:
        sys.stdout.write("[" + ",\n".join(s.model_dump_json() for s in found) + "]\n")
        return EXIT_OK
    if args.verbosity < 0:
        sys.stdout.write("".join(f"{s.path}\n" for s in found))
        return EXIT_OK
    verbose = args.verbosity > 0
    columns = [
        "session",
        "task",
        "turns",
        "status",
        "result",
        "best",
        "updated (UTC)",
        *(("model", "stopped because") if verbose else ()),
    ]
    rows = [
        [
            s.path,
            s.task,
            str(s.turns),
            s.status,
            s.result,
            s.best,
            s.updated,
            *((s.model, s.stop_reason or "-") if verbose else ()),
        ]
        for s in found
    ]
    out = console(highlight=False)
    if rows:
        print_rows(out, columns, rows)
    else:
        out.print(f"no sessions under {root}", markup=False)
    return EXIT_OK
