"""[judge] The judge's side of one long-lived worker: start it sandboxed, ask, wait under a deadline.

A request is a frame on the worker's socket; its answer is the first message of
the expected type on the authenticated pipe (or an ``error``, or the worker's
death). Deadlines are polled while waiting. A hang deadline counts only the time
no compiler runs in the worker (it says so with ``compiler`` messages): a
kernel stuck in forward is killed quickly, a long Triton autotune or nvcc build
is not mistaken for one; a stage's overall limit counts everything.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from kernelfix.base import atomic
from kernelfix.sandbox import ChildOutcome, Isolation, Limits
from kernelfix.sandbox.process import Child
from kernelfix.tools.transport.protocol import (
    Compiler,
    Exit,
    Hello,
    Phase,
    ProtocolError,
    Reply,
    Request,
    WorkerError,
    parse,
)

R = TypeVar("R", bound=Reply)


class WorkerGone(Exception):
    """The worker died, failed, or ran out of time; ``outcome`` says which (it has ended)."""

    def __init__(self, outcome: ChildOutcome, what: str):
        super().__init__(what)
        self.outcome = outcome
        self.what = what


# Before its first word a worker is starting (the fork server's imports, an exec'd interpreter's):
# the machine's time, not the task's or the candidate's; it has a bound of its own.
START_S = 180.0
LOAD_FACTOR_MAX = 8.0


def load_factor() -> float:
    """How oversubscribed the host's CPUs are: the 1-minute load over the cores, at least 1. A
    deadline stretches by it, so a machine running many judges does not fail a stage that is only
    waiting its turn for a core (seen: the reference's start missing 15 s at 8 test workers)."""
    import os

    try:
        return min(LOAD_FACTOR_MAX, max(1.0, os.getloadavg()[0] / max(1, os.cpu_count() or 1)))
    except OSError:
        return 1.0


class Deadline:
    """When waiting must end: ``limit_s`` of time outside compilers, ``hard_s`` of any time,
    ``idle_s`` without any message from the worker. Time before the worker's first word counts
    toward ``START_S`` only (stretched with the host's load, ``load_factor``); with ``stretch`` the
    other bounds stretch too: the judge's own work (the reference's start, its survey), not a
    candidate's forward, whose hang is caught as soon on a loaded machine as on an idle one."""

    def __init__(
        self,
        what: str,
        limit_s: float,
        *,
        hard_s: float | None = None,
        idle_s: float | None = None,
        stretch: bool = False,
    ):
        self.what, self.limit_s, self.hard_s, self.idle_s, self.stretch = what, limit_s, hard_s, idle_s, stretch
        self.start = self.last = time.monotonic()
        self.active = 0.0
        self.starting = 0.0

    def check(self, handle: "WorkerHandle") -> tuple[str, bool] | None:
        """(why, hung) once waiting must end: ``hung`` when the code itself stopped making progress
        (time outside compilers, or no message), not when a stage's overall limit ran out."""
        now = time.monotonic()
        if not handle.started:
            self.starting += now - self.last
        elif not handle.compiling:
            self.active += now - self.last
        self.last = now
        load = load_factor()
        if self.starting > START_S * load:
            return f"{self.what}: the worker did not start within {START_S * load:.3g} s", False
        k = load if self.stretch else 1.0
        if self.active > self.limit_s * k:
            load = f" (stretched {k:.2g}x for the host's load)" if k > 1 else ""
            return f"{self.what} did not finish within {self.limit_s * k:.3g} s" + (
                " with no compiler running" if handle.compiled_any else ""
            ) + load, True
        if self.hard_s is not None and now - self.start > self.hard_s * k:
            return f"{self.what} did not finish within {self.hard_s * k:.3g} s", False
        if self.idle_s is not None and now - max(self.start, handle.last_message_at) > self.idle_s * k:
            return f"{self.what} made no progress for {self.idle_s * k:.3g} s", True
        return None


class WorkerHandle:
    """One sandboxed worker process (``python -m MODULE SPEC.json``) and the requests made of it."""

    def __init__(
        self,
        module: str,
        spec: dict[str, Any],
        *,
        spec_path: Path,
        cwd: Path,
        env: dict[str, str],
        limits: Limits,
        isolation: Isolation,
        wrap: Sequence[str] = (),
        on_phase: Callable[[dict[str, Any]], None] | None = None,
        fork: bool = True,
        fork_kind: str = "all",
    ):
        if spec_path.is_symlink() or spec_path.exists():
            spec_path.unlink()  # never write through something a candidate planted
        spec_path.parent.mkdir(parents=True, exist_ok=True)
        # All or nothing (a temp file then a rename): a judge killed here leaves no half-written spec behind.
        atomic.write_text(spec_path, json.dumps(spec, default=str), fsync=False)
        self.compiling = False
        self.started = False  # the worker's first word arrived (its imports and sandbox are done)
        self.compiled_any = False  # a compiler ran at some point (then a hang message says it was not running)
        self.last_message_at = time.monotonic()
        self.on_phase = on_phase
        self._ids = 0
        self._lock = threading.Lock()
        self._seen = 0
        self.argv = [*wrap, sys.executable, "-m", module, str(spec_path)]
        self.child = Child(
            self.argv,
            cwd=cwd,
            env=env,
            limits=limits,
            isolation=isolation,
            authenticate=True,
            on_message=self._on_message,
            requests=True,
            fork=fork and not wrap,  # a wrapper (ncu) must exec the interpreter itself
            fork_kind=fork_kind,
        )

    def _on_message(self, msg: dict[str, Any]) -> None:
        self.last_message_at = time.monotonic()
        kind = msg.get("type")
        if kind == Hello.KIND:
            self.started = True
        elif kind == Compiler.KIND:
            self.compiling = msg.get("running") is True
            self.compiled_any = True
        elif kind == Phase.KIND and self.on_phase is not None:
            self.on_phase(msg)

    @property
    def alive(self) -> bool:
        return self.child.alive

    def expect(
        self, kinds: Sequence[str], deadline: Deadline | None = None, *, msg_id: int | None = None
    ) -> dict[str, Any]:
        """The next message of one of ``kinds`` (matching ``msg_id`` when given); raises WorkerGone."""
        until = (lambda: deadline.check(self)) if deadline is not None else None
        while True:
            msg, self._seen = self.child.wait_message(kinds, since=self._seen, until=until)
            if msg is None or msg.get("type") == WorkerError.KIND:
                if msg is not None:  # the worker leaves right after reporting an error; make sure it has
                    ends = time.monotonic() + 5.0
                    while self.child.alive and time.monotonic() < ends:
                        time.sleep(0.01)
                    self.child.kill()
                raise WorkerGone(self.child.outcome(), deadline.what if deadline else "the worker")
            if msg_id is None or msg.get("id") == msg_id:
                return msg

    def ask(self, request: Request, reply: type[R], deadline: Deadline | None = None, fds: Sequence[int] = ()) -> R:
        """Send a request and wait for its reply, parsed (one request at a time per worker). A reply that is not
        its message's ends the worker: WorkerGone, sorted like any other failure of it."""
        with self._lock:
            self._ids += 1
            wire = request.wire() | {"id": self._ids}
            kind = wire.pop("type")
            if not self.child.send(kind, fds=fds, **wire):
                raise WorkerGone(
                    self.child.wait() if not self.child.alive else self._kill("the request socket closed"), kind
                )
            raw = self.expect([reply.KIND], deadline, msg_id=self._ids)
            try:
                return parse(raw, reply)
            except ProtocolError as e:
                self.child.kill(deadline=str(e))  # its last word is the record's: not a hang
                raise WorkerGone(self.child.outcome(), kind) from None

    def recv_fds(self, timeout: float = 30.0) -> list[int]:
        """File descriptors a trusted worker sent on its socket (the reference server's arenas)."""
        assert self.child.requests is not None
        got = self.child.requests.recv(timeout=timeout)
        if got is None:
            raise WorkerGone(self._kill("no file descriptors arrived"), "handoff")
        return got[1]

    def mark(self) -> int:
        """A place in the message stream, for ``since``."""
        return len(self.child.messages.snapshot()) if self.child.launch_error is None else 0

    def since(self, mark: int) -> list[dict[str, Any]]:
        """Messages that arrived after ``mark``."""
        return self.child.messages.snapshot()[mark:] if self.child.launch_error is None else []

    def _kill(self, why: str) -> ChildOutcome:
        self.child.kill(deadline=why, hung=True)
        return self.child.outcome()

    def close(self) -> ChildOutcome | None:
        """Ask it to leave, then make sure it has (nothing it started outlives it)."""
        if self.child.launch_error:
            return self.child.outcome()
        if self.child.alive:
            self.child.send(Exit.KIND)
            self.child.ended(5.0)  # woken by its exit, not found by polling: every verdict waits for this
        self.child.kill()
        return self.child.outcome()
