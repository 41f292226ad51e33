"""Apply a child's resource limits, then exec its command.

Used as ``python -m kernelfix.sandbox.launch LIMITS_JSON -- CMD...`` by
``run_child``: limits are set in the child itself, after fork, by a process
that holds no locks and no threads.
"""

from __future__ import annotations

import json
import os
import resource
import sys


def _set(kind: int, value: int) -> None:
    soft, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    try:
        resource.setrlimit(kind, (value, value if hard == resource.RLIM_INFINITY else hard))
    except (ValueError, OSError):
        pass


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m kernelfix.sandbox.launch LIMITS_JSON -- CMD...", file=sys.stderr)
        os._exit(2)
    spec = json.loads(argv[0])
    cmd = argv[2:]
    _set(resource.RLIMIT_CORE, 0)  # a crashing kernel must not write gigabytes of core
    _set(resource.RLIMIT_CPU, int(spec["cpu_s"]))
    _set(resource.RLIMIT_FSIZE, int(spec["file_size_bytes"]))
    _set(resource.RLIMIT_NOFILE, int(spec["open_files"]))
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
