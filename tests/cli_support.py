"""One real `kernelfix eval` of a correct kernel, with --json, for the tests that read it: test_cli.py (its exit code
and verdict) and test_cli_imports.py (the modules its process loaded). Each such command starts a judge of its own
(fork servers importing torch and Triton: seconds of CPU), so the command runs once per test run and both read it.

It runs as `python -m kernelfix` does (runpy, ``__main__``), the module list written at the process's exit. Under
xdist the two files' tests may land on different workers: the first to ask runs it under a lock in the run's shared
temporary directory (pytest's base temp's parent, one per run), and the others read what it left there.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Runs in the child: sys.argv[1] is where to write the loaded modules, the rest is kernelfix's argv.
# The module list is written at exit, so it holds everything the command imported on its way.
WRAPPER = """
import atexit, json, sys
out, argv = sys.argv[1], sys.argv[2:]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["kernelfix", *argv]
import runpy
runpy.run_module("kernelfix", run_name="__main__", alter_sys=True)  # python -m kernelfix ARGV
"""

TASK, OK = "tests/corpus/tasks/relu.py", "tests/corpus/candidates/triton_relu_ok.py"
OK_EVAL = ["eval", TASK, OK, "--device", "cpu", "--json"]


@dataclass
class Done:
    """A finished command: its exit code, its output, and the modules its process had loaded when it exited."""

    returncode: int
    stdout: str
    stderr: str
    modules: list[str]


def child(code: str, out: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -c CODE OUT ARGS`` from the repository's root, as a user's shell would start it."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return subprocess.run(
        [sys.executable, "-c", code, str(out), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_recording_modules(out: Path, *argv: str, timeout: float = 300) -> Done:
    """`python -m kernelfix ARGV` in a new process, from the repository's root; its modules are written to ``out``."""
    done = child(WRAPPER, out, *argv, timeout=timeout)
    modules = json.loads(out.read_text()) if out.exists() else []
    return Done(done.returncode, done.stdout, done.stderr, modules)


_made: dict[str, Done] = {}


def ok_eval(tmp_path_factory) -> Done:
    """`kernelfix eval` (OK_EVAL) of the corpus's correct Triton ReLU on the CPU, run once per test run."""
    if "ok" in _made:
        return _made["ok"]
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = tmp_path_factory.getbasetemp().parent  # this run's, shared by its workers
        with open(shared / "kernelfix-ok-eval.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # held while the first worker to ask runs it
            record = shared / "kernelfix-ok-eval.json"
            if not record.exists():
                done = run_recording_modules(tmp_path_factory.mktemp("ok-eval") / "modules.json", *OK_EVAL)
                tmp = record.with_suffix(".tmp")
                tmp.write_text(json.dumps(asdict(done)))
                tmp.rename(record)
            _made["ok"] = Done(**json.loads(record.read_text()))
    else:
        _made["ok"] = run_recording_modules(tmp_path_factory.mktemp("ok-eval") / "modules.json", *OK_EVAL)
    return _made["ok"]
