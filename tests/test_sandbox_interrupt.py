"""A caller interrupted while its child runs (Ctrl-C, a UI quitting) takes the child down with it."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from kernelfix.sandbox import Limits, run_child, scrubbed_env

SLEEPER = (
    "import json, os, time\n"
    "os.write(int(os.environ['KERNELFIX_MSG_FD']), (json.dumps({'type': 'pid', 'pid': os.getpid()}) + '\\n').encode())\n"
    "time.sleep(120)\n"
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # gone between the lookup and the read: ProcessLookupError
        return False
    return state != "Z"  # a killed, not yet reaped child is a zombie: dead


def test_interrupt_kills_the_child(tmp_path):
    pids: list[int] = []

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 3.0)
        with pytest.raises(KeyboardInterrupt):
            run_child(
                [sys.executable, "-c", SLEEPER],
                cwd=tmp_path,
                env=scrubbed_env(),
                limits=Limits(wall_s=60),
                on_message=lambda m: pids.append(m["pid"]) if m.get("type") == "pid" else None,
            )
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert pids, "the child never started"
    deadline = time.monotonic() + 5
    while _alive(pids[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pids[0])
