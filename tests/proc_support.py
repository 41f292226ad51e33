"""Helpers for tests that kill processes: is a pid still running, who holds a session's lock."""

from __future__ import annotations

import time
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # gone between the lookup and the read: ProcessLookupError
        return False
    return state != "Z"  # a killed, not yet reaped child is a zombie: dead


def wait_gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def lock_holder(lock: Path) -> int | None:
    """The process holding a flock on ``lock``, from /proc/locks."""
    ino = lock.stat().st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        f = line.split()
        if len(f) >= 6 and f[1] == "FLOCK" and int(f[5].rsplit(":", 1)[1]) == ino:
            return int(f[4])
    return None
