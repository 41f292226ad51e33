"""Spawn one child under limits and watch it until it ends.

The child starts through ``kernelfix.sandbox.launch``, which applies rlimits and
then execs the real command, so nothing unsafe runs between fork and exec in
this (threaded) process. The child is the leader of a new session; on timeout,
memory overrun or after it exits, the whole session is killed, so grandchildren
it left behind die with it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MSG_FD_ENV = "KERNELFIX_MSG_FD"


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    wall_s: float = 120.0
    cpu_s: int | None = None  # RLIMIT_CPU; None: 4x wall
    memory_bytes: int | None = None  # host RSS of the whole process session
    file_size_bytes: int = 16 << 30  # RLIMIT_FSIZE: no single file above this
    open_files: int = 4096
    output_tail_bytes: int = 64 << 10  # kept per stream; the rest is counted and dropped


class ChildOutcome(BaseModel):
    """What happened to the child, seen from outside it."""

    argv: list[str]
    returncode: int | None
    signal: str | None = None
    timed_out: bool = False
    memory_exceeded: bool = False
    peak_rss_bytes: int = 0
    wall_s: float
    stdout_tail: str = ""
    stderr_tail: str = ""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    messages: list[dict[str, Any]] = Field(default_factory=list)
    launch_error: str | None = None

    @property
    def killed_by_us(self) -> bool:
        return self.timed_out or self.memory_exceeded

    def last(self, kind: str) -> dict[str, Any] | None:
        for m in reversed(self.messages):
            if m.get("type") == kind:
                return m
        return None


class _Tail:
    """Drain a stream, keeping only its last ``cap`` bytes (a child may print gigabytes)."""

    def __init__(self, stream, cap: int):
        self.cap = cap
        self.chunks: deque[bytes] = deque()
        self.kept = 0
        self.total = 0
        self.thread = threading.Thread(target=self._run, args=(stream,), daemon=True)
        self.thread.start()

    def _run(self, stream) -> None:
        try:
            while chunk := stream.read1(65536):
                self.total += len(chunk)
                self.chunks.append(chunk)
                self.kept += len(chunk)
                while self.kept - len(self.chunks[0]) >= self.cap:
                    self.kept -= len(self.chunks.popleft())
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        data = b"".join(self.chunks)[-self.cap :]
        return data.decode("utf-8", "replace")


class _Messages:
    """JSON lines from the child's message pipe, each stamped with its arrival time."""

    def __init__(self, fd: int, t0: float, on_message: Callable[[dict[str, Any]], None] | None):
        self.items: list[dict[str, Any]] = []
        self.t0 = t0
        self.on_message = on_message
        self.file = os.fdopen(fd, "rb", buffering=0)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        buf = b""
        try:
            while chunk := self.file.read(65536):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self._take(line)
                if len(buf) > 64 << 20:  # a child flooding the channel without newlines
                    buf = b""
        except (OSError, ValueError):
            pass
        finally:
            self.file.close()

    def _take(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
        except ValueError:
            msg = {"type": "garbage", "raw": line[:200].decode("utf-8", "replace")}
        if not isinstance(msg, dict):
            msg = {"type": "garbage", "raw": repr(msg)[:200]}
        msg["_t"] = time.monotonic() - self.t0
        self.items.append(msg)
        if self.on_message is not None:
            try:
                self.on_message(msg)
            except Exception:  # a UI callback must never break the judge
                pass


def _session_pids(sid: int) -> list[int]:
    """Processes whose session id is ``sid`` (the child and all it spawned that did not setsid)."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name may hold spaces and parentheses: split after the last ')'
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 3 and int(fields[3]) == sid:
            pids.append(int(entry.name))
    return pids


def _rss_bytes(pids: Sequence[int]) -> int:
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
    return total


def _kill_session(sid: int) -> None:
    try:
        os.killpg(sid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    # members that moved to another process group but kept the session
    for pid in _session_pids(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def run_child(
    argv: Sequence[str],
    *,
    cwd: str | Path,
    env: dict[str, str],
    limits: Limits,
    on_message: Callable[[dict[str, Any]], None] | None = None,
    poll_s: float = 0.05,
) -> ChildOutcome:
    """Run ``argv`` to completion (or its limits) and report what happened."""
    read_fd, write_fd = os.pipe()
    os.set_inheritable(write_fd, True)
    env = dict(env)
    env[MSG_FD_ENV] = str(write_fd)
    spec = {
        "cpu_s": limits.cpu_s if limits.cpu_s is not None else int(limits.wall_s * 4) + 10,
        "file_size_bytes": limits.file_size_bytes,
        "open_files": limits.open_files,
    }
    launcher = [sys.executable, "-m", "kernelfix.sandbox.launch", json.dumps(spec), "--", *argv]
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            launcher,
            cwd=str(cwd),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(write_fd,),
            start_new_session=True,
        )
    except OSError as e:
        os.close(read_fd)
        os.close(write_fd)
        return ChildOutcome(argv=list(argv), returncode=None, wall_s=0.0, launch_error=str(e))
    os.close(write_fd)  # else the reader never sees EOF
    messages = _Messages(read_fd, t0, on_message)
    out = _Tail(proc.stdout, limits.output_tail_bytes)
    err = _Tail(proc.stderr, limits.output_tail_bytes)

    timed_out = memory_exceeded = False
    peak = 0
    next_mem_check = 0.0
    try:
        while True:
            rc = proc.poll()
            if rc is not None:
                break
            now = time.monotonic()
            if now - t0 > limits.wall_s:
                timed_out = True
                _kill_session(proc.pid)
                break
            if limits.memory_bytes is not None and now >= next_mem_check:
                next_mem_check = now + 0.25
                rss = _rss_bytes(_session_pids(proc.pid))
                peak = max(peak, rss)
                if rss > limits.memory_bytes:
                    memory_exceeded = True
                    _kill_session(proc.pid)
                    break
            time.sleep(poll_s)
    except BaseException:  # Ctrl-C or a stopping caller: the child's session must not outlive us
        _kill_session(proc.pid)
        raise
    rc = proc.wait()
    wall = time.monotonic() - t0
    _kill_session(proc.pid)  # leftovers: daemons, background work
    for t in (messages.thread, out.thread, err.thread):
        t.join(timeout=5)
    sig = None
    if rc is not None and rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
    return ChildOutcome(
        argv=list(argv),
        returncode=rc,
        signal=sig,
        timed_out=timed_out,
        memory_exceeded=memory_exceeded,
        peak_rss_bytes=peak,
        wall_s=wall,
        stdout_tail=out.text(),
        stderr_tail=err.text(),
        stdout_bytes=out.total,
        stderr_bytes=err.total,
        messages=messages.items,
    )
