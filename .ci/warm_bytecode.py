"""Write the bytecode of what the judge's sandboxed processes import (they cannot write it themselves): the fork
servers' preloads, and in a second process at once their later imports (torch.compile's), each imported here with
bytecode writing on. Run by .ci/run."""

from __future__ import annotations

import importlib
import subprocess
import sys
import time

from kernelfix.sandbox.zygote import LATE_IMPORTS, PRELOAD


def import_all(names: list[str]) -> list[str]:
    missing = []
    for name in dict.fromkeys(names):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)  # an optional library this install lacks: the workers do without it too
    return missing


def main() -> int:
    if sys.argv[1:]:  # the second process: the names it was given
        return 1 if import_all(sys.argv[1:]) == sys.argv[1:] else 0
    if sys.dont_write_bytecode:
        print("warm_bytecode: PYTHONDONTWRITEBYTECODE is set, nothing to write", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    late = sorted({m for names in LATE_IMPORTS.values() for m in names} - set(PRELOAD))
    second = subprocess.Popen([sys.executable, __file__, *late])  # two cores: both halves import side by side
    missing = import_all(list(PRELOAD))
    second.wait()
    print(
        f"bytecode of the fork servers' {len(PRELOAD)} preloads and {len(late)} later imports written in "
        f"{time.monotonic() - t0:.1f}s" + (f" (not installed: {', '.join(missing)})" if missing else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
