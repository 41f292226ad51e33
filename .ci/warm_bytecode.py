"""Write the bytecode of what the suite imports once, before it runs. Run by .ci/run, as two processes side by side:

- what the judge's sandboxed processes import (they cannot write it themselves): the fork servers' preloads and their
  later imports, torch first;
- what many test processes and the kernelfix commands they start import beside it (litellm, langgraph, textual, ...),
  none of which imports torch: without it the first processes to import each (litellm the largest) compiled it at once,
  every one of them. What one test file alone imports (datasets, ray, trl) is left to it: compiled here it would
  lengthen this step and save nothing. Side by side the two took 33.5 s where the first alone took 28.8 s.

Two processes that both imported torch both compiled its sources (21 s against 16 s for one), so only the first does.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import time

TEST_SIDE = (
    "litellm",
    "langgraph.graph",
    "langgraph.checkpoint.sqlite",
    "textual.app",
    "fastapi",
    "uvicorn",
    "httpx",
    "git",
    "transformers",
    "matplotlib.pyplot",
    "kernelfix.agent.graph",
    "kernelfix.tui.app",
    "kernelfix.serve.app",
)


def _import_all(names) -> list[str]:
    missing = []
    for name in dict.fromkeys(names):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)  # an optional library this install lacks: its users do without it too
    return missing


def main(argv: list[str]) -> int:
    if sys.dont_write_bytecode:
        print("warm_bytecode: PYTHONDONTWRITEBYTECODE is set, nothing to write", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    if argv == ["--test-side"]:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network: litellm must not fetch its prices
        missing = _import_all(TEST_SIDE)
        if "torch" in sys.modules:  # it would have compiled torch beside the other process
            print("warm_bytecode: the test side imported torch; move that module to the sandbox side", file=sys.stderr)
        _report("test side", t0, missing)
        return 0
    test_side = subprocess.Popen([sys.executable, __file__, "--test-side"])
    from kernelfix.sandbox.zygote import LATE_IMPORTS, PRELOAD

    _report("sandbox side", t0, _import_all([*PRELOAD, *(m for late in LATE_IMPORTS.values() for m in late)]))
    return test_side.wait()


def _report(what: str, t0: float, missing: list[str]) -> None:
    print(
        f"warm_bytecode, {what}: bytecode of {len(sys.modules)} modules written or found in {time.monotonic() - t0:.1f}s"
        + (f" (not installed: {', '.join(missing)})" if missing else "")
    )


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
