"""Build one extension the way the judge's child does, in a fresh process; print what happened.

    python tests/build_probe.py SPEC.json

SPEC: {"build_root", "device", "options" (BuildOptions fields), "call": "load_inline"|"load",
"kwargs" (for the call), "symbol" (an extern "C" int function to call), "ready_file" and "go_file" (optional: touch the
first once torch is imported, then wait for the second, so several probes build at the same moment)}.
Prints one JSON line: {"records": [...], "value": int | null, "error": str | null}.
"""

import ctypes
import json
import sys
import time
from pathlib import Path


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
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
    print(json.dumps({"records": [r.model_dump() for r in load_inline.records()], "value": value, "error": error}))


if __name__ == "__main__":
    main()
