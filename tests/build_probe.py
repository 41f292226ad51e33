"""Build extensions the way the judge's child does, in a fresh process; print what happened.

    python tests/build_probe.py SPEC.json

SPEC: a list of builds, built in order, each {"build_root", "device", "options" (BuildOptions fields),
"call": "load_inline"|"load", "kwargs" (for the call), "symbol" (an extern "C" int function to call), "write"
(optional {path: text}: files written just before this build, as a test edits a source between two builds),
"ready_file" and "go_file" (optional, the first build's: touch the first once torch is imported, then wait for the
second, so several probes build at the same moment)}.
Prints one JSON line: a list with, per build, {"records": [...], "value": int | null, "error": str | null}.

A judge's child builds in a process of its own. Several builds here share one process (an import of torch, 3-4 s of
CPU, for builds of a second or less): before each, the process is put back as a fresh one has it, so one build leaves
the next nothing but the files on disk (the build cache is there, and only there). torch's ``load_inline``,
``_run_ninja_build`` and NVRTC hook are its own again and kernelfix's hooks are installed afresh; torch's in-process
extension versioner is emptied (it would rebuild an extension of a name it built before, from other sources or
another directory, as ``name_v1``: a cache miss for a reason no fresh process has); the environment is the one the
process started with; each build's records are its own.
"""

import ctypes
import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    builds = json.loads(Path(sys.argv[1]).read_text())
    import torch
    import torch.utils.cpp_extension as ce

    from kernelfix.tools.compile import load_inline
    from kernelfix.tools.config import BuildOptions

    pristine = (ce.load_inline, ce._run_ninja_build, getattr(torch.cuda, "_compile_kernel", None))
    environ = dict(os.environ)
    results = []
    for i, spec in enumerate(builds):
        if i:  # as a fresh process has it
            ce.load_inline, ce._run_ninja_build, compile_kernel = pristine
            if compile_kernel is not None:
                torch.cuda._compile_kernel = compile_kernel
            ce.JIT_EXTENSION_VERSIONER = type(ce.JIT_EXTENSION_VERSIONER)()
            os.environ.clear()
            os.environ.update(environ)
        for path, text in (spec.get("write") or {}).items():
            Path(path).write_text(text)
        seen = len(load_inline.records())
        load_inline.install(
            Path(spec["build_root"]), spec.get("device", "cpu"), BuildOptions(**spec.get("options", {}))
        )
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
        records = [r.model_dump() for r in load_inline.records()[seen:]]
        results.append({"records": records, "value": value, "error": error})
    print(json.dumps(results))


if __name__ == "__main__":
    main()
