"""A fork server (a "zygote"): one process that has imported torch, numpy, triton and the
workers' modules, before any GPU context exists, and forks each sandboxed worker from there.

Why: a worker started by exec spent its first seconds importing the same modules as every
worker before it (1.5-2 s on an idle 2-core box, 4-6 s under a test suite's load; ~5 s on
the H100's host, docs/judge.md). A forked one starts with them imported and opens CUDA
itself.

What does not change (docs/sandbox.md): the forked child is a new process that joins its
cgroup, takes its rlimits, enters its own network, mount, PID and IPC namespaces, forks its
init and drops its capabilities through the same code as an exec'd launcher
(``launch.enter``). Before that it leads a new session, keeps only its own descriptors
(stdin with the token, stdout, stderr, the message pipe, the request socket: every other fd
is closed) and takes the stage's scrubbed environment in place of the zygote's.

What differs, and why it is safe:

- The interpreter's memory is the zygote's, copy on write. The zygote holds nothing secret:
  it starts with a scrubbed environment (no API keys), imports only library code, and is
  only ever sent paths, environments and descriptors that are the child's own. No token
  passes through it: the judge writes each child's token on the child's own stdin.
- Modules imported before the fork were imported under the zygote's environment, so a
  zygote serves only requests whose environment agrees with its own outside ``LATE_ENV``
  (paths each worker gets its own of, read when used, not at import); anything else gets
  a zygote of its own. Python's hash seed is the zygote's for all its children.
- Exit statuses come from the zygote (the child is its child, not the judge's): it reports
  an exit without reaping (``waitid(WNOWAIT)``), and reaps when the judge, having killed
  what was left of the child's tree, says so, so no pid is reused under the judge's kill.
- The chain of parent-death signals holds: the zygote dies with the judge's process (it is
  started from the spawner thread), and each child dies with the zygote.

Anything that goes wrong with the zygote (it cannot start, it died, a preload failed to
import torch) sends the worker down the exec path, which is what ran before.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kernelfix.sandbox.channel import MSG_FD_ENV, REQUEST_FD_ENV, RequestSocket
from kernelfix.sandbox.fork_base import Base, StderrTail, spawn_server

log = logging.getLogger(__name__)

# Variables each worker has its own value of. Nothing imported before the fork may have read
# them (tests/test_zygote.py checks what a forked worker sees); everything else in the
# environment keys the zygote.
LATE_ENV = frozenset(
    {
        "HOME",
        "TMPDIR",
        "TORCH_EXTENSIONS_DIR",
        "TRITON_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
        MSG_FD_ENV,
        REQUEST_FD_ENV,
    }
)
# What the workers import, by the kind of worker a fork server serves: each kind imports only what
# its workers need (a Triton candidate needs Triton, not the C++ extension machinery; a CUDA one the
# reverse; the reference neither, but torch._dynamo), so the fork server a worker waits for is ready
# sooner, and a judge's reference and candidate fork servers import side by side. A module left out
# is imported by the worker that needs it. The modules a command runs are imported for their
# imports, then dropped from sys.modules, so ``python -m`` semantics (a fresh ``__main__``) hold.
BASE_PRELOAD = ("numpy", "torch")
# triton.experimental.gluon: Triton 3.6 imports it inside a kernel's first call (its argument specialization): 40 ms of
# a cached 19_ReLU kernel's 50 ms first call on the H100, in a worker that found the rest ahead (bench/triton_first_call.py).
_TRITON = ("triton", "triton.language", "triton.compiler", "triton.experimental.gluon")
_CPP = ("torch.utils.cpp_extension",)
_CANDIDATE = ("kernelfix.tools.workers.candidate.server",)
PRELOADS: dict[str, tuple[str, ...]] = {
    # Not torch._dynamo (1-3 s): the meta device's counts do without it (task_size.without_dynamo), and
    # torch.compile imports it when a baseline is measured, once per task and machine (then cached on disk).
    "reference": (
        *BASE_PRELOAD,
        "torch.utils.flop_counter",  # the reference's FLOPs, for the task's floor (task_size.flops_on_meta)
        # What the task's count on the meta device imports at its first torch._check (every KernelBench task's
        # does, get_inputs' randn included): sympy and torch's symbolic shapes, 2.4-3.6 s of every reference
        # worker's start on the H100's host, before its first trial (bench/cold_timeline.py). Here it is imported
        # once per fork server, and its bytecode can be kept (fork_bytecode.bytecode_prefix).
        "torch.fx.experimental.symbolic_shapes",
        "torch.utils._device",  # torch.device("meta") as a context
        "numpy.random",  # seed_all
        "kernelfix.tools.workers.reference.server",
    ),
    "triton": (*BASE_PRELOAD, *_TRITON, *_CANDIDATE),
    "cuda": (*BASE_PRELOAD, *_CPP, *_CANDIDATE),
    "torch": (*BASE_PRELOAD, *_CANDIDATE),  # a candidate in plain torch (the judge will say which ops it may not use)
    "candidate": (*BASE_PRELOAD, *_CPP, *_TRITON, *_CANDIDATE),  # one not seen yet (started ahead) or using both
}
# What a kind's workers may import later, whose bytecode a fork server writes ahead where it keeps bytecode in the judge's
# cache (fork_bytecode.bytecode_prefix), from a child of its own, after it is ready: the reference's torch.compile
# baseline imports dynamo and inductor, 8-10 s from source on the H100's install and 2.2-3.1 s from bytecode
# (bench/baseline_compile_cold.py), once per task. Not preloaded: a cached baseline (most evaluations) never needs them.
LATE_IMPORTS: dict[str, tuple[str, ...]] = {
    "reference": (
        "torch._dynamo",
        "torch._functorch.aot_autograd",
        "torch._inductor.compile_fx",
        "torch._inductor.graph",
        "torch._inductor.lowering",
        "torch._inductor.scheduler",
        "torch._inductor.select_algorithm",
        "torch._inductor.codegen.simd",
        "torch._inductor.codegen.triton",
        "torch._inductor.runtime.triton_heuristics",
        *_TRITON,  # the compiled baseline's kernels are Triton's (its first call imports gluon too)
    ),
}
PRELOAD = tuple(dict.fromkeys(m for kind in PRELOADS.values() for m in kind))  # "all": any other command
PRELOADS["all"] = PRELOAD
RUN_MODULES = ("kernelfix.tools.workers.candidate.server", "kernelfix.tools.workers.reference.server")
START_TIMEOUT_S = 120.0  # the zygote's own imports, on a loaded machine


class ZygoteError(Exception):
    """The zygote could not fork this child; the caller starts it by exec instead."""


# ---------------------------------------------------------------------------- the judge's side (the zygote's own: fork_server.py)


class ForkedProcess:
    """A child forked by the zygote, with the parts of ``subprocess.Popen`` that ``Child`` uses."""

    def __init__(self, zygote: "Zygote", pid: int, stdin, stdout, stderr):
        self.zygote, self.pid = zygote, pid
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode: int | None = None
        self.waited_s = 0.0  # for the zygote's own imports (its first child in a process)
        self._exited = threading.Event()
        self._reaped = False
        self.on_exit: Callable[[], None] | None = None  # the watcher's wake-up (sandbox/process.py)

    def _exit(self, returncode: int) -> None:
        if self.returncode is None:
            self.returncode = returncode
        self._exited.set()
        wake = self.on_exit
        if wake is not None:
            wake()

    def poll(self) -> int | None:
        return self.returncode if self._exited.is_set() else None

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(["zygote child", str(self.pid)], timeout or 0.0)
        if not self._reaped:  # the pid stays ours until now: the caller has killed what was left
            self._reaped = True
            self.zygote._reap(self.pid)
        assert self.returncode is not None
        return self.returncode


class Zygote:
    """One fork server, for one interpreter and one environment (outside ``LATE_ENV``)."""

    def __init__(
        self,
        python: str,
        env: dict[str, str],
        import_path: Sequence[str],
        cwd: str,
        spawn,
        preload: Sequence[str] = PRELOAD,
        late: Sequence[str] = (),
        base: Base | None = None,
    ) -> None:
        self.python = python
        self.pid: int | None = None  # the fork server's, once it is ready
        self.error: str | None = None
        self.ready = threading.Event()
        self.info: dict[str, Any] = {}
        self._procs: dict[int, ForkedProcess] = {}
        self._pending: dict[int, tuple[threading.Event, list]] = {}
        self._exits: dict[int, int] = {}  # exits reported before fork() registered the pid
        self._ids = 0
        self._lock = threading.Lock()
        self.t0 = time.monotonic()
        self.proc: subprocess.Popen | None = None  # started by exec (no base, or the base could not fork it)
        forked = base.fork_server(preload, RUN_MODULES, late) if base is not None else None
        if forked is not None:
            ours, stderr = forked
        else:
            pid = os.getpid()
            try:
                self.proc, ours = spawn_server(
                    spawn,
                    python,
                    cwd,
                    env,
                    lambda fd: boot_code(fd, pid, preload, RUN_MODULES, import_path, skip=(), late=late),
                )
            except OSError as e:
                self.error = f"cannot start: {e}"
                self.ready.set()
                return
            stderr = self.proc.stderr
        self.sock = RequestSocket(ours)
        self._stderr = StderrTail(stderr)
        threading.Thread(target=self._read, daemon=True, name="kernelfix-zygote").start()

    # -- replies

    def _read(self) -> None:
        while True:
            got = self.sock.recv()
            if got is None:
                break
            msg, fds = got
            for fd in fds:  # the zygote sends none; never leak what a broken peer might
                os.close(fd)
            kind = msg.get("type")
            if kind == "ready":
                self.info = msg
                self.pid = int(msg.get("pid") or 0) or None
                if not msg.get("ok"):
                    self.error = str(msg.get("error") or "its imports failed")
                self.ready.set()
            elif kind in ("forked", "failed"):
                with self._lock:
                    waiter = self._pending.pop(int(msg.get("id", -1)), None)
                if waiter is not None:
                    waiter[1].append(msg)
                    waiter[0].set()
            elif kind == "exit":
                pid, rc = int(msg["pid"]), int(msg["returncode"])
                with self._lock:
                    proc = self._procs.get(pid)
                    if proc is None:
                        self._exits[pid] = rc
                if proc is not None:
                    proc._exit(rc)
        # The zygote is gone: its children got SIGKILL with it (their parent-death signal).
        self.error = self.error or "the fork server exited" + self._stderr.said()
        self.ready.set()
        with self._lock:
            procs, self._procs = list(self._procs.values()), {}
            pending, self._pending = list(self._pending.values()), {}
        for proc in procs:
            proc._exit(-signal.SIGKILL)
        for event, box in pending:
            box.append({"type": "failed", "error": self.error})
            event.set()

    @property
    def alive(self) -> bool:
        return self.error is None

    def _reap(self, pid: int) -> None:
        with self._lock:
            self._procs.pop(pid, None)
        if self.alive:
            self.sock.send({"type": "reap", "pid": pid})

    # -- requests

    def fork(
        self,
        command: Sequence[str],
        *,
        env: dict[str, str],
        cwd: str,
        launcher_spec: dict[str, Any],
        fds: Sequence[int],
        token: bool,
    ) -> ForkedProcess:
        """Fork ``python -m MODULE ARGS...`` or ``python -c CODE ARGS...`` (``command``: what follows
        ``python``) into its sandbox. ``fds``: descriptors the child keeps at the same numbers (the
        message pipe, the request socket); ``token``: stdin is a pipe for it."""
        if not runnable(command):
            raise ZygoteError(f"not a command the fork server runs: {list(command)[:2]}")
        t0 = time.monotonic()
        if not self.ready.wait(START_TIMEOUT_S) or not self.alive:
            raise ZygoteError(self.error or "the fork server did not start in time")
        ready_at = time.monotonic()
        ends: list[int] = []
        try:
            stdin_r, stdin_w = os.pipe() if token else (-1, -1)
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            ends = [x for x in (stdin_r, stdin_w, out_r, out_w, err_r, err_w) if x >= 0]
            passed = [fd for fd in (stdin_r, out_w, err_w) if fd >= 0] + list(fds)
            targets = ([0] if token else []) + [1, 2] + list(fds)
            with self._lock:
                self._ids += 1
                rid = self._ids
                event, box = threading.Event(), []
                self._pending[rid] = (event, box)
            request = {
                "type": "spawn",
                "id": rid,
                "command": list(command),
                "env": env,
                "cwd": cwd,
                "spec": launcher_spec,
                "targets": targets,
                "devnull_stdin": not token,
                "ignored_signals": ignored_signals(),
            }
            if not self.sock.send(request, passed):
                with self._lock:
                    self._pending.pop(rid, None)
                raise ZygoteError(self.error or "the fork server's socket closed")
            event.wait()
            reply = box[0]
            if reply.get("type") != "forked":
                raise ZygoteError(str(reply.get("error")))
            pid = int(reply["pid"])
            proc = ForkedProcess(
                self,
                pid,
                os.fdopen(stdin_w, "wb", buffering=0) if token else None,
                os.fdopen(out_r, "rb"),
                os.fdopen(err_r, "rb"),
            )
            proc.waited_s = ready_at - t0
            ends = [x for x in (stdin_r, out_w, err_w) if x >= 0]  # the child's ends: it has its own now
            with self._lock:
                self._procs[pid] = proc
                early = self._exits.pop(pid, None)  # it may have ended before we got here
            if early is not None:
                proc._exit(early)
            return proc
        finally:
            for fd in ends:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def close(self) -> None:
        try:
            self.sock.close()
        except Exception:
            pass


def ignored_signals() -> list[int]:
    """The signals this process ignores (what an exec'd child inherits as ignored)."""
    out = []
    for sig in range(1, signal.NSIG):
        try:
            if signal.getsignal(sig) == signal.SIG_IGN:
                out.append(sig)
        except (OSError, ValueError):
            continue
    return out


def runnable(command: Sequence[str]) -> bool:
    """``-m MODULE ...`` or ``-c CODE ...``: what an interpreter that is already running can run."""
    return len(command) >= 2 and command[0] in ("-m", "-c")


_zygotes: dict[tuple, Zygote] = {}
_bases: dict[tuple, Base] = {}
_zlock = threading.Lock()


def key(python: str, env: dict[str, str], kind: str = "all") -> tuple:
    return (python, kind, tuple(sorted((k, v) for k, v in env.items() if k not in LATE_ENV)))


def kind_for_candidate(code: str | None) -> str:
    """The fork server a candidate's worker starts from, by what its source uses (only a choice of what
    is imported ahead: a module it uses and the kind leaves out, the worker imports itself)."""
    if code is None:
        return "candidate"  # started ahead, before the candidate exists
    triton = re.search(r"\btriton\b", code) is not None
    cpp = (
        re.search(r"\bload_inline\b|\bcpp_extension\b|__global__", code) is not None
    )  # as tools/candidate.py tells CUDA
    return "candidate" if triton and cpp else "triton" if triton else "cuda" if cpp else "torch"


def for_env(python: str, env: dict[str, str], import_path: Sequence[str], spawn, kind: str = "all") -> Zygote:
    """This process's zygote of ``kind`` (PRELOADS) for ``env`` (started on first use; a dead one is replaced)."""
    k = key(python, env, kind)
    with _zlock:
        z = _zygotes.get(k)
        if z is None or (z.ready.is_set() and not z.alive):
            own = {n: v for n, v in env.items() if n not in LATE_ENV}
            home = _zygote_home()
            own.update({"HOME": home, "TMPDIR": home})
            bk = (*key(python, env, "base"), tuple(import_path))
            base = _bases.get(bk)
            if base is None or not base.alive:
                base = _bases[bk] = Base(python, own, import_path, home, spawn, BASE_PRELOAD)
            z = _zygotes[k] = Zygote(
                python, own, import_path, home, spawn, PRELOADS.get(kind, PRELOAD), LATE_IMPORTS.get(kind, ()), base
            )
        return z


def _zygote_home() -> str:
    """A directory of the zygote's own for HOME and TMPDIR while it imports: no worker's paths.
    Removed when this process exits."""
    import atexit
    import shutil
    import tempfile

    d = os.path.join(tempfile.gettempdir(), f"kernelfix-zygote-{os.getpid()}")
    if not os.path.isdir(d):
        os.makedirs(d, mode=0o700, exist_ok=True)
        atexit.register(shutil.rmtree, d, ignore_errors=True)
    return d


def shutdown() -> None:
    """End every zygote of this process (tests; the process's exit does it too)."""
    with _zlock:
        zs: list[Zygote | Base] = [*_zygotes.values(), *_bases.values()]
        _zygotes.clear()
        _bases.clear()
    for z in zs:
        z.close()


# ---------------------------------------------------------------------------- how the zygote starts (its side: fork_server.py)


def boot_code(
    fd: int,
    parent_pid: int,
    preload: Sequence[str],
    run_modules: Sequence[str],
    import_path: Sequence[str],
    skip: Sequence[str],
    write_bytecode: bool | None = None,
    late: Sequence[str] = (),
) -> str:
    """The ``python -c`` program of a zygote. ``write_bytecode``: as the judge's own process would
    (its user's PYTHONDONTWRITEBYTECODE holds; the workers' environment always sets it). ``late``: LATE_IMPORTS."""
    if write_bytecode is None:
        write_bytecode = not sys.dont_write_bytecode
    return (
        f"import sys; sys.path[:0] = {list(import_path)!r}; from kernelfix.sandbox.fork_server import serve; "
        f"serve({fd}, {parent_pid}, {list(preload)!r}, {list(run_modules)!r}, {list(import_path)!r}, {list(skip)!r}, {write_bytecode!r}, {list(late)!r})"
    )
