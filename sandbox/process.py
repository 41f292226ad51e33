"""Spawn one child under limits and watch it until it ends.

The child starts through ``kernelfix.sandbox.launch``, which joins the child's
cgroup, applies rlimits and the isolation layers, then execs the real command,
so nothing unsafe runs between fork and exec in this (threaded) process. The
child is the leader of a new session; on timeout, memory or output overrun,
or after it exits, everything it started is killed: its PID namespace, its
cgroup, its session and its descendants, whichever exist.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kernelfix.sandbox import zygote
from kernelfix.sandbox.cgroup import Cgroup
from kernelfix.sandbox.channel import (
    LAUNCHER_MESSAGE,
    MSG_FD_ENV,
    REQUEST_FD_ENV,
    MessageReader,
    RequestSocket,
    new_token,
)
from kernelfix.sandbox.isolation import Isolation
from kernelfix.sandbox.process_tree import kill_tree, oom_kills, rss_bytes, system_tasks, tree_pids, tree_tasks
from kernelfix.sandbox.spawner import Tail, import_path, spawn

log = logging.getLogger(__name__)


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    wall_s: float = 120.0
    cpu_s: int | None = None  # RLIMIT_CPU; None: 4x wall
    memory_bytes: int | None = None  # host memory of everything the child starts (cgroup, else RSS watchdog)
    max_processes: int | None = 4096  # tasks (processes and threads) alive at once: pids cgroup, else a watchdog
    file_size_bytes: int = 16 << 30  # RLIMIT_FSIZE: no single file above this
    open_files: int = 4096
    output_limit_bytes: int | None = None  # stdout + stderr; more and the child is killed (the judge sets it)
    output_tail_bytes: int = 64 << 10  # kept per stream; the rest is counted and dropped


class ChildOutcome(BaseModel):
    """What happened to the child, seen from outside it."""

    argv: list[str]
    returncode: int | None
    signal: str | None = None
    timed_out: bool = False
    memory_exceeded: bool = False
    output_exceeded: bool = False
    process_limit_hit: bool = False  # a fork or thread was refused at Limits.max_processes, or the watchdog saw more
    peak_rss_bytes: int = 0
    wall_s: float
    stdout_tail: str = ""
    stderr_tail: str = ""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    messages: list[dict[str, Any]] = Field(default_factory=list)
    forged_messages: list[str] = Field(default_factory=list)  # lines on the pipe without the child's token
    isolation: dict[str, bool] = Field(default_factory=dict)  # layer -> set up for this child
    sandbox_notes: list[str] = Field(default_factory=list)  # one line per layer that fell short
    launch_error: str | None = None
    deadline: str | None = None  # the stage deadline that ended it, when one did
    hung: bool = False  # that deadline was a hang's (no progress), not a stage's overall limit
    oom_kills_during: int = 0  # the kernel's OOM kills, machine-wide, while the child lived (/proc/vmstat)

    @property
    def killed_by_us(self) -> bool:
        return self.timed_out or self.memory_exceeded or self.output_exceeded

    def last(self, kind: str) -> dict[str, Any] | None:
        for m in reversed(self.messages):
            if m.get("type") == kind:
                return m
        return None


class Child:
    """A sandboxed child under its limits, watched from a thread until it ends.

    ``run_child`` runs one to completion. A long-lived worker (the judge's reference
    server, a candidate's worker) keeps one alive across requests: ``requests=True``
    gives it a socket (fd in ``KERNELFIX_REQ_FD``) on which ``send`` passes JSON
    requests and file descriptors (shared tensor buffers), ``wait_message`` waits
    for its replies under a deadline, and ``kill``/``wait`` end it. Every limit is
    enforced by the same watch loop either way.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: str | Path,
        env: dict[str, str],
        limits: Limits,
        isolation: Isolation | None = None,
        authenticate: bool = False,
        on_message: Callable[[dict[str, Any]], None] | None = None,
        requests: bool = False,
        poll_s: float = 0.05,
        fork: bool = False,
        fork_kind: str = "all",
    ):
        self.argv = list(argv)
        self.forked = (
            False  # started by the fork server (``fork``: when argv is ``python -m MODULE ...`` or ``-c CODE``)
        )
        # ``fork_kind``: which fork server (zygote.PRELOADS: what it imported ahead for this kind of worker)
        self.limits = limits
        self.isolation = isolation or Isolation.off()
        self.poll_s = poll_s
        self.cgroup, self.notes = None, []
        self.timed_out = self.memory_exceeded = self.output_exceeded = self.process_limit_hit = False
        self.deadline_note: str | None = None  # set when ``kill(reason)`` ended it (a stage's own deadline)
        self.hung = False
        self.peak = 0
        self.launch_error: str | None = None
        self.proc: subprocess.Popen | None = None
        self.requests: RequestSocket | None = None
        self._outcome: ChildOutcome | None = None
        self._done = threading.Event()
        self._wake = threading.Event()  # the watcher's: a kill asked, or the fork server saw the child exit
        if self.isolation.cgroup:
            self.cgroup, self.notes = Cgroup.create(memory_bytes=limits.memory_bytes, max_pids=limits.max_processes)
        read_fd, write_fd = os.pipe()
        os.set_inheritable(write_fd, True)
        env = dict(env)
        env[MSG_FD_ENV] = str(write_fd)
        inherit = [write_fd]
        child_sock = None
        if requests:
            parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            child_sock.set_inheritable(True)
            env[REQUEST_FD_ENV] = str(child_sock.fileno())
            inherit.append(child_sock.fileno())
            self.requests = RequestSocket(parent_sock)
        spec = {
            "rlimits": {
                "cpu_s": limits.cpu_s if limits.cpu_s is not None else int(limits.wall_s * 4) + 10,
                "file_size_bytes": limits.file_size_bytes,
                "open_files": limits.open_files,
            },
            "parent_pid": os.getpid(),
            "cgroup_procs": self.cgroup.procs_files if self.cgroup else [],
            "isolation": self.isolation.launcher_spec(),
        }
        token = new_token() if authenticate else None
        # The launcher imports kernelfix the way this process does, whatever ``env`` holds (its
        # PYTHONPATH is the command's business, not the launcher's).
        boot = f"import sys; sys.path[:0] = {import_path()!r}; from kernelfix.sandbox.launch import main; main(sys.argv[1:])"
        launcher = [sys.executable, "-c", boot, json.dumps(spec), "--", *argv]
        self.t0 = time.monotonic()
        self._oom_at_start = oom_kills()
        if fork and zygote.runnable(self.argv[1:]):
            try:
                z = zygote.for_env(self.argv[0], env, import_path(), spawn, fork_kind)
                self.proc = z.fork(
                    self.argv[1:], env=env, cwd=str(cwd), launcher_spec=spec, fds=inherit, token=bool(token)
                )
                self.forked = True
            except zygote.ZygoteError as e:
                log.warning("kernelfix: starting a worker by exec: the fork server cannot (%s)", e)
        try:
            if not self.forked:
                self.proc = spawn(
                    launcher,
                    cwd=str(cwd),
                    env=env,
                    stdin=subprocess.PIPE if token else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    pass_fds=tuple(inherit),
                    start_new_session=True,
                )
        except OSError as e:
            os.close(read_fd)
            os.close(write_fd)
            if child_sock is not None:
                child_sock.close()
            if self.requests is not None:
                self.requests.close()
            if self.cgroup is not None:
                self.cgroup.remove()
            self.launch_error = str(e)
            self._outcome = ChildOutcome(
                argv=self.argv, returncode=None, wall_s=0.0, launch_error=str(e), sandbox_notes=self.notes
            )
            self._done.set()
            return
        os.close(write_fd)  # else the reader never sees EOF
        if child_sock is not None:
            child_sock.close()
        if token:
            try:  # a few bytes: fits the pipe buffer, never blocks
                self.proc.stdin.write(token.encode() + b"\n")
                self.proc.stdin.close()
            except OSError:
                pass
        self.messages = MessageReader(read_fd, self.t0, token, on_message)
        self._out = Tail(self.proc.stdout, limits.output_tail_bytes)
        self._err = Tail(self.proc.stderr, limits.output_tail_bytes)
        self._kill_lock = threading.Lock()
        if hasattr(self.proc, "on_exit"):  # forked: the exit is reported at once, not found at the next poll
            self.proc.on_exit = self._wake.set
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    # ------------------------------------------------------------------ watching

    @property
    def alive(self) -> bool:
        return not self._done.is_set()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _watch(self) -> None:
        limits, proc = self.limits, self.proc
        assert proc is not None
        cgroup = self.cgroup
        next_mem_check = 0.0
        watch_rss = limits.memory_bytes is not None and not (cgroup and cgroup.limits_memory)
        # Without a pids cgroup the process limit is a watchdog: the machine's task count, read
        # on every poll, says when the child's tree may have grown past the limit; a count of
        # the tree then decides. A bomb overshoots by what it forks within one poll, then dies.
        watch_pids = limits.max_processes is not None and not (cgroup and cgroup.limits_pids)
        tasks_at_start = system_tasks() if watch_pids else None
        watch_pids = watch_pids and tasks_at_start is not None
        next_pid_check = 0.0
        try:
            while proc.poll() is None:
                now = time.monotonic()
                if now - self.t0 > limits.wall_s:
                    self.timed_out = True
                    break
                if (
                    limits.output_limit_bytes is not None
                    and self._out.total + self._err.total > limits.output_limit_bytes
                ):
                    self.output_exceeded = True
                    break
                pids_due = (
                    watch_pids
                    and now >= next_pid_check
                    and (system_tasks() or 0) - tasks_at_start > limits.max_processes // 2
                )
                rss_due = watch_rss and now >= next_mem_check
                if pids_due or rss_due:  # one walk of /proc serves both checks
                    pids = tree_pids(proc.pid)
                    # Tasks first: a fork bomb's copies also sum past the memory limit; name the cause.
                    if watch_pids and tree_tasks(pids) > limits.max_processes:
                        self.process_limit_hit = True
                        break
                    if pids_due:
                        next_pid_check = now + 0.1  # the exact count walks /proc: not on every poll
                if rss_due:
                    next_mem_check = now + 0.25
                    # RSS, not PSS: PSS would not count forked copies' shared pages once per copy, but
                    # reading smaps_rollup for hundreds of copies took so long that a bomb reached
                    # ~7,500 processes here before the next check. A watchdog must stay cheap.
                    rss = rss_bytes(pids)
                    self.peak = max(self.peak, rss)
                    if rss > limits.memory_bytes:
                        self.memory_exceeded = True
                        break
                if self._wake.wait(self.poll_s):  # kill() from another thread, or a forked child's exit
                    self._wake.clear()
                    if self._done.is_set():
                        break
        finally:
            self._finish()

    def _finish(self) -> None:
        with self._kill_lock:
            if self._outcome is not None:
                return
            proc = self.proc
            assert proc is not None
            kill_tree(proc.pid, self.cgroup)  # on a limit: now; after exit: leftovers (daemons, background work)
            rc = proc.wait()
            wall = time.monotonic() - self.t0
            # A leftover holding the pipes open (only possible without a PID namespace or cgroup) must
            # not hold us up: what it writes after the child is gone is not the child's.
            drain_until = time.monotonic() + 2.0
            for t in (self.messages.thread, self._out.thread, self._err.thread):
                t.join(timeout=max(0.0, drain_until - time.monotonic()))
            if self.requests is not None:
                self.requests.close()
            cgroup, peak = self.cgroup, self.peak
            memory_exceeded, process_limit_hit = self.memory_exceeded, self.process_limit_hit
            if cgroup is not None:
                stats = cgroup.stats()
                cgroup.remove()
                peak = max(peak, stats.peak_memory_bytes)
                memory_exceeded = memory_exceeded or stats.oom_kills > 0
                process_limit_hit = process_limit_hit or stats.pids_limit_hits > 0
            items = self.messages.snapshot()
            report = next((m for m in items if m.get("type") == LAUNCHER_MESSAGE), None)
            layers = dict(report.get("layers") or {}) if report else {}
            if self.isolation.cgroup:
                layers["cgroup"] = cgroup is not None
            notes = self.notes + (list(report.get("notes") or []) if report else [])
            sig = None
            if rc is not None and rc < 0:
                try:
                    sig = signal.Signals(-rc).name
                except ValueError:
                    sig = f"signal {-rc}"
            self._outcome = ChildOutcome(
                argv=self.argv,
                returncode=rc,
                signal=sig,
                timed_out=self.timed_out,
                memory_exceeded=memory_exceeded,
                output_exceeded=self.output_exceeded,
                process_limit_hit=process_limit_hit,
                peak_rss_bytes=peak,
                wall_s=wall,
                stdout_tail=self._out.text(),
                stderr_tail=self._err.text(),
                stdout_bytes=self._out.total,
                stderr_bytes=self._err.total,
                messages=[m for m in items if m is not report],
                forged_messages=list(self.messages.forged),
                isolation=layers,
                sandbox_notes=notes,
                deadline=self.deadline_note,
                hung=self.hung,
                oom_kills_during=max(0, (oom_kills() or 0) - (self._oom_at_start or 0))
                if self._oom_at_start is not None
                else 0,
            )
            self._done.set()

    # ------------------------------------------------------------------ control

    def kill(self, deadline: str | None = None, *, hung: bool = False) -> None:
        """End the child and everything it started; ``deadline``: the stage deadline that ran out, for
        the record (``hung``: the code stopped making progress, rather than running out of its time)."""
        if self._done.is_set():
            return
        if deadline is not None and self.deadline_note is None:
            self.deadline_note, self.hung = deadline, hung
            self.timed_out = True
        self._done.set()
        self._wake.set()  # wakes the watcher, which kills and records
        if threading.current_thread() is not getattr(self, "_watcher", None):
            self._watcher.join()

    def sandbox_notes(self) -> list[str]:
        """The notes its outcome will carry (``ChildOutcome.sandbox_notes``), known once the launcher's report
        arrived, at its start: a caller that ends it later need not wait for its exit to know them."""
        if self._outcome is not None:
            return list(self._outcome.sandbox_notes)
        report = next((m for m in self.messages.snapshot() if m.get("type") == LAUNCHER_MESSAGE), None)
        return self.notes + (list(report.get("notes") or []) if report else [])

    def ended(self, timeout: float) -> bool:
        """Whether, within ``timeout`` seconds, it ended and its outcome was recorded (or a kill was asked)."""
        return self._done.wait(timeout)

    def wait(self) -> ChildOutcome:
        """Until the child ends by itself or by a limit."""
        if self.proc is not None and self._outcome is None:
            self._watcher.join()
        assert self._outcome is not None
        return self._outcome

    def outcome(self) -> ChildOutcome:
        """What happened, once it ended (``kill`` or ``wait`` first)."""
        return self.wait()

    def send(self, kind: str, fds: Sequence[int] = (), **payload: Any) -> bool:
        """A request over the request socket; False when the child is gone."""
        if self.requests is None:
            raise RuntimeError("this child was started without requests=True")
        return self.requests.send({"type": kind, **payload}, fds)

    def wait_message(
        self, kinds: Sequence[str], *, since: int = 0, until: Callable[[], tuple[str, bool] | None] | None = None
    ) -> tuple[dict[str, Any] | None, int]:
        """The first message of one of ``kinds`` (or an ``error``) at or after index ``since``, and
        the index after it. None when the child ended first, or when ``until()`` named a
        deadline (the child is then killed with that note)."""
        wanted = {*kinds, "error"}
        if self.launch_error is not None:
            return None, since
        while True:
            items, n = self.messages.wait_new(since, timeout=self.poll_s)
            for i, m in enumerate(items):
                if m.get("type") in wanted:
                    return m, since + i + 1
            since = n
            if not self.alive and not self.messages.thread.is_alive():
                items, n = self.messages.wait_new(since, timeout=0)
                for i, m in enumerate(items):
                    if m.get("type") in wanted:
                        return m, since + i + 1
                return None, n
            why = until() if until is not None else None
            if why is not None:
                self.kill(deadline=why[0], hung=why[1])
                return None, since


def start_fork_server(env: dict[str, str], kind: str) -> None:
    """Start now the fork server that a ``python -m`` worker of ``kind`` with this environment will fork
    from (zygote.PRELOADS): its imports overlap whatever the caller does before the first fork."""
    zygote.for_env(sys.executable, env, import_path(), spawn, kind)


def run_child(
    argv: Sequence[str],
    *,
    cwd: str | Path,
    env: dict[str, str],
    limits: Limits,
    isolation: Isolation | None = None,
    authenticate: bool = False,
    on_message: Callable[[dict[str, Any]], None] | None = None,
    poll_s: float = 0.05,
    fork: bool = False,
    fork_kind: str = "all",
) -> ChildOutcome:
    """Run ``argv`` to completion (or its limits) and report what happened.

    ``isolation``: the layers to set up (default: none beyond session and rlimits).
    ``authenticate``: the child reads a token from stdin (``ChildChannel.open``) and
    every message must carry it; others land in ``forged_messages``. ``fork``: a
    ``python -m``/``-c`` command starts from the fork server (``kernelfix.sandbox.zygote``) of
    ``fork_kind`` (``zygote.PRELOADS``; a worker's kind reuses that worker's fork server).
    """
    child = Child(
        argv,
        cwd=cwd,
        env=env,
        limits=limits,
        isolation=isolation,
        authenticate=authenticate,
        on_message=on_message,
        poll_s=poll_s,
        fork=fork,
        fork_kind=fork_kind,
    )
    try:
        return child.wait()
    except BaseException:  # Ctrl-C or a stopping caller: nothing of the child's may outlive us
        child.kill()
        raise
