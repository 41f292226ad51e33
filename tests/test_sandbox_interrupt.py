"""A caller interrupted while its child runs (Ctrl-C, a UI quitting) takes the child down with it."""

from __future__ import annotations

import signal
import sys
import time

import pytest
from proc_support import alive

from kernelfix.sandbox import Limits, run_child, scrubbed_env

SLEEPER = (
    "import json, os, time\n"
    "os.write(int(os.environ['KERNELFIX_MSG_FD']), (json.dumps({'type': 'pid', 'pid': os.getpid()}) + '\\n').encode())\n"
    "time.sleep(120)\n"
)


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
    while alive(pids[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pids[0])
