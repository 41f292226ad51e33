"""Triton's CPU interpreter with and without the candidate worker's once-per-launch swap
(tools/workers/candidate/interpreter.py): tests/fused_cases.py, the fused check's cases, run in two fresh processes,
one each way; prints each one's CPU-seconds and whether their outputs are the same.

    python bench/interpreter_swaps.py
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

CASES = Path(__file__).resolve().parent.parent / "tests" / "fused_cases.py"


def run(plain: bool) -> tuple[float, dict]:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONWARNINGS": "ignore"}
    if plain:
        env["FUSED_CASES_PLAIN_INTERPRETER"] = "1"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, str(CASES)], capture_output=True, text=True, env=env, check=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, json.loads(out.splitlines()[-1])


def main() -> None:
    plain_s, plain = run(plain=True)
    once_s, once = run(plain=False)
    print(
        f"plain interpreter: {plain_s:.1f} CPU-s, {plain['interpreter']['swaps']} swaps; "
        f"once per launch: {once_s:.1f} CPU-s, {once['interpreter']['swaps']} swaps "
        f"({once['interpreter']['launches']} launches); {once_s / plain_s:.2f}x; "
        f"outputs the same: {plain['cases'] == once['cases']}"
    )


if __name__ == "__main__":
    main()
