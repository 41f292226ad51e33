"""Build one extension the way the judge's child does, in a process of its own; say what happened.

    python tests/build_probe.py SPEC.json

SPEC: {"build_root", "device", "options" (BuildOptions fields), "call": "load_inline"|"load",
"kwargs" (for the call), "symbol" (an extern "C" int function to call), "ready_file" and "go_file" (optional: touch the
first once torch is imported, then wait for the second, so several probes build at the same moment)}.
Prints one JSON line: {"records": [...], "value": int | null, "error": str | null}.

Tests start probes with ``start``: each is forked from a server that imported torch and the build hooks once (a fresh
process each time cost an import of torch, 3-4 s of CPU on CI's 2 cores, for a build of a second or less). A forked probe
is still a process of its own: its hooks are installed afresh, and nothing it builds or loads is seen by another.
"""

import ctypes
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

PRELOAD = ["torch.utils.cpp_extension", "kernelfix.tools.compile.load_inline", "kernelfix.tools.config"]


def run(spec: dict) -> dict:
    import torch.utils.cpp_extension as ce

    from kernelfix.tools.compile import load_inline
    from kernelfix.tools.config import BuildOptions

    load_inline.install(Path(spec["build_root"]), spec.get("device", "cpu"), BuildOptions(**spec.get("options", {})))
    if spec.get("ready_file"):
        Path(spec["ready_file"]).touch()
    go = spec.get("go_file")
    while go and not Path(go).exists():
        time.sleep(0.01)
    value = error = None
    try:
        fn = ce.load_inline if spec.get("call", "load_inline") == "load_inline" else ce.load
        path = fn(**spec["kwargs"])
        value = getattr(ctypes.CDLL(str(path)), spec["symbol"])()
    except Exception as e:  # reported, asserted on by the test
        error = f"{type(e).__name__}: {e}"
    return {"records": [r.model_dump() for r in load_inline.records()], "value": value, "error": error}


class Probe:
    """A probe running in a process forked from the probe server: ``poll()`` as a Popen's, ``result()`` its JSON."""

    _context = None

    def __init__(self, spec_path: Path, env: dict[str, str]) -> None:
        if Probe._context is None:
            Probe._context = _start_server()
        self.out, self.err = spec_path.with_suffix(".out"), spec_path.with_suffix(".err")
        self.proc = Probe._context.Process(target=_child, args=(str(spec_path), str(self.out), str(self.err), env))
        self.proc.start()

    def poll(self) -> int | None:
        return None if self.proc.is_alive() else self.proc.exitcode

    def result(self, timeout: float) -> dict:
        self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
            raise TimeoutError(f"the probe ran over {timeout} s")
        err = self.err.read_text() if self.err.exists() else ""
        assert self.proc.exitcode == 0, f"the probe exited {self.proc.exitcode}: {err[-3000:]}"
        return json.loads(self.out.read_text())


def _start_server():
    """multiprocessing's fork server, started with PRELOAD imported. It imports them before it applies this process's
    sys.path (each child applies it), so it starts with PYTHONSAFEPATH: the working directory (a checkout, whose
    ``kernelfix/`` folder is not the installed package where the install is not editable) is not put first."""
    from multiprocessing import forkserver

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    before = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        forkserver.ensure_running()
    finally:
        if before is None:
            os.environ.pop("PYTHONSAFEPATH", None)
        else:
            os.environ["PYTHONSAFEPATH"] = before
    return context


def _child(spec_path: str, out: str, err: str, env: dict[str, str]) -> None:
    os.environ.update(env)
    fd = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)  # what the build says on stderr, for the failure message
    os.dup2(fd, 1)
    result = run(json.loads(Path(spec_path).read_text()))
    Path(out).write_text(json.dumps(result))


def main() -> None:
    print(json.dumps(run(json.loads(Path(sys.argv[1]).read_text()))))


if __name__ == "__main__":
    main()
