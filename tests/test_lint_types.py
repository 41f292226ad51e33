"""The house rules a machine can check, run by the README's test command: ruff's lint and format (pyproject.toml's
[tool.ruff]) over the repository, and mypy over the packages as they import (.ci/typecheck.py, [tool.mypy])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("ruff", reason="ruff is in the dev extra")
pytest.importorskip("mypy", reason="mypy is in the dev extra")


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *cmd], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing_and_the_code_is_formatted():
    lint = _run("-m", "ruff", "check", "--no-cache", ".")
    assert lint.returncode == 0, lint.stdout[-4000:]
    fmt = _run("-m", "ruff", "format", "--check", "--no-cache", ".")
    assert fmt.returncode == 0, fmt.stdout[-4000:]


def test_mypy_finds_nothing():
    run = _run(".ci/typecheck.py")
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
