"""Write the bytecode of what the judge's sandboxed processes import (they cannot write it themselves): the fork
servers' preloads and their later imports, imported here once with bytecode writing on. Run by .ci/run. One process:
two side by side both compiled torch's own sources, and took longer (21 s against 16 s on 2 cores)."""

from __future__ import annotations

import importlib
import sys
import time

from kernelfix.sandbox.zygote import LATE_IMPORTS, PRELOAD


def main() -> int:
    if sys.dont_write_bytecode:
        print("warm_bytecode: PYTHONDONTWRITEBYTECODE is set, nothing to write", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    names = [*PRELOAD, *(m for late in LATE_IMPORTS.values() for m in late)]
    missing = []
    for name in dict.fromkeys(names):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)  # an optional library this install lacks: the workers do without it too
    print(
        f"bytecode of {len(sys.modules)} modules written or found in {time.monotonic() - t0:.1f}s"
        + (f" (not installed: {', '.join(missing)})" if missing else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
