"""The first seconds a user sees: `kernelfix --help` and `kernelfix eval` load none of the heavy
libraries (litellm, langgraph, textual, torch) in the process the user started. Each check runs
in a fresh interpreter, since this one has torch already (conftest)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from cli_support import WRAPPER, ok_eval
from cli_support import child as _child

from kernelfix.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
HEAVY = {"litellm", "langgraph", "textual", "torch"}

HELPS = """
import contextlib, io, json, sys
from kernelfix.cli import main
out, names = sys.argv[1], sys.argv[2:]
results = {}
for name in names:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            code = main([name, "--help"])
        except SystemExit as e:
            code = e.code
    results[name] = [code, buf.getvalue()]
json.dump({"results": results, "modules": sorted(sys.modules)}, open(out, "w"))
"""


def _top_level(modules: list[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


@pytest.mark.parametrize("argv", [["--help"], ["eval", "--help"]], ids=["help", "eval-help"])
def test_help_loads_no_heavy_library(argv, tmp_path):
    out = tmp_path / "modules.json"
    done = _child(WRAPPER, out, *argv)
    assert done.returncode == 0, done.stderr
    assert "Exit codes" in done.stdout
    loaded = json.loads(out.read_text())
    assert "kernelfix.cli" in loaded
    assert not _top_level(loaded) & HEAVY, sorted(_top_level(loaded) & HEAVY)


def test_a_real_eval_loads_no_heavy_library_in_the_parent(tmp_path_factory):
    """The judge's workers (separate processes) import torch; the process the user started does not."""
    # `kernelfix eval` of the corpus's correct ReLU kernel with --json, its modules written at exit: the same command
    # test_cli.py reads the verdict of, run once for both (cli_support.ok_eval)
    done = ok_eval(tmp_path_factory)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["category"] == "ok"  # the judge ran: this is past argument parsing
    loaded = done.modules
    assert "kernelfix.tools.judge" in loaded
    assert not _top_level(loaded) & HEAVY, sorted(_top_level(loaded) & HEAVY)


def test_every_subcommand_help_exits_0_and_shows_its_description(tmp_path):
    commands = _subcommands()
    assert {"eval", "optimize", "resume", "sessions", "batch", "export", "capture", "swap", "baseline"} <= set(commands)
    out = tmp_path / "helps.json"
    done = _child(HELPS, out, *commands)
    assert done.returncode == 0, done.stderr
    got = json.loads(out.read_text())
    squeeze = lambda s: "".join(s.split())  # noqa: E731  (argparse rewraps, and may break at a hyphen)
    for name, parser in commands.items():
        code, text = got["results"][name]
        assert code == 0, (name, text)
        assert parser.description and squeeze(parser.description) in squeeze(text), name
    assert not _top_level(got["modules"]) & HEAVY, sorted(_top_level(got["modules"]) & HEAVY)


def test_usage_errors_still_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["eval"])  # TASK and CANDIDATE missing: argparse's own usage error
    assert e.value.code == 2
    assert "the following arguments are required" in capsys.readouterr().err
