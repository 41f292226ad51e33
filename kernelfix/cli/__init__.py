"""The ``kernelfix`` command.

Exit codes: 0 success (eval: verdict ok; optimize/resume: a correct, legal
kernel was found); 1 not; 2 bad usage or unreadable input (task, candidate,
config, session directory, model settings); 130 interrupted.

One module per command (``eval``, ``optimize`` with ``resume``, ``sessions``, ``batch``,
``export``, ``capture`` with ``swap``, ``baseline``, ``serve``, ``tune``), each with ``add_parser(sub)`` and
``run(args)``; ``common`` holds the exit codes, the usage error, the argument helpers and config loading they share. Every
module imports only the standard library at its top: a command imports what it needs when
it runs, so ``kernelfix --help`` and ``kernelfix eval`` load no litellm, langgraph, textual
or torch.
"""

from __future__ import annotations

import argparse
import sys

from kernelfix.cli import baseline, batch, capture, export, optimize, serve, sessions, tune
from kernelfix.cli import eval as eval_command  # (the name `eval` stays the builtin here)
from kernelfix.cli.common import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_MACHINE, EXIT_OK, EXIT_USAGE, UsageError, logging_for

__all__ = [
    "EXIT_FAIL",
    "EXIT_INTERRUPTED",
    "EXIT_MACHINE",
    "EXIT_OK",
    "EXIT_USAGE",
    "UsageError",
    "build_parser",
    "main",
]

# In the order `kernelfix --help` lists them.
COMMANDS = (eval_command, optimize, sessions, batch, export, capture, baseline, serve, tune)


def build_parser() -> argparse.ArgumentParser:
    from kernelfix.base.version import __version__

    parser = argparse.ArgumentParser(
        prog="kernelfix",
        description=(
            "Repair and optimize CUDA/Triton kernels for KernelBench-format PyTorch tasks. "
            "A language model proposes kernels; a sandboxed judge compiles them, checks them against "
            "the PyTorch reference, rejects kernels that call torch to do the work, and times them "
            "against eager and torch.compile."
        ),
        epilog="Exit codes: 0 ok, 1 the candidate failed, 2 bad usage or unreadable input, 3 the machine kept failing to judge (a session stops, resumable), 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"kernelfix {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    script_args = None
    if argv[:1] in (["capture"], ["tune"]) and "--" in argv:  # the script's own arguments (argparse cannot mix them in)
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1 :]
    args = parser.parse_args(argv)
    if script_args is not None:
        args.script_args = script_args
    try:
        with logging_for(args.verbosity):
            return args.func(args)
    except UsageError as e:
        print(f"kernelfix: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("kernelfix: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
