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
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from kernelfix.sandbox.channel import MSG_FD_ENV, REQUEST_FD_ENV, RequestSocket

log = logging.getLogger(__name__)

# Variables each worker has its own value of. Nothing imported before the fork may have read
# them (tests/test_zygote.py checks what a forked worker sees); everything else in the
# environment keys the zygote.
LATE_ENV = frozenset(
    {"HOME", "TMPDIR", "TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", MSG_FD_ENV, REQUEST_FD_ENV}
)
# What the workers import, by the kind of worker a fork server serves: each kind imports only what
# its workers need (a Triton candidate needs Triton, not the C++ extension machinery; a CUDA one the
# reverse; the reference neither, but torch._dynamo), so the fork server a worker waits for is ready
# sooner, and a judge's reference and candidate fork servers import side by side. A module left out
# is imported by the worker that needs it. The modules a command runs are imported for their
# imports, then dropped from sys.modules, so ``python -m`` semantics (a fresh ``__main__``) hold.
_BASE = ("numpy", "torch")
_TRITON = ("triton", "triton.language", "triton.compiler")
_CPP = ("torch.utils.cpp_extension",)
_CANDIDATE = ("kernelfix.tools.workers.candidate.server",)
PRELOADS: dict[str, tuple[str, ...]] = {
    # Not torch._dynamo (1-3 s): the meta device's counts do without it (task_size.without_dynamo), and
    # torch.compile imports it when a baseline is measured, once per task and machine (then cached on disk).
    "reference": (
        *_BASE,
        "torch.utils.flop_counter",  # the reference's FLOPs, for the task's floor (task_size.flops_on_meta)
        "kernelfix.tools.workers.reference.server",
    ),
    "triton": (*_BASE, *_TRITON, *_CANDIDATE),
    "cuda": (*_BASE, *_CPP, *_CANDIDATE),
    "torch": (*_BASE, *_CANDIDATE),  # a candidate in plain torch (the judge will say which ops it may not use)
    "candidate": (*_BASE, *_CPP, *_TRITON, *_CANDIDATE),  # one not seen yet (started ahead) or using both
}
PRELOAD = tuple(dict.fromkeys(m for kind in PRELOADS.values() for m in kind))  # "all": any other command
PRELOADS["all"] = PRELOAD
RUN_MODULES = ("kernelfix.tools.workers.candidate.server", "kernelfix.tools.workers.reference.server")
START_TIMEOUT_S = 120.0  # the zygote's own imports, on a loaded machine


class ZygoteError(Exception):
    """The zygote could not fork this child; the caller starts it by exec instead."""


# ---------------------------------------------------------------------------- the judge's side


class ForkedProcess:
    """A child forked by the zygote, with the parts of ``subprocess.Popen`` that ``Child`` uses."""

    def __init__(self, zygote: "Zygote", pid: int, stdin, stdout, stderr):
        self.zygote, self.pid = zygote, pid
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode: int | None = None
        self.waited_s = 0.0  # for the zygote's own imports (its first child in a process)
        self._exited = threading.Event()
        self._reaped = False

    def _exit(self, returncode: int) -> None:
        if self.returncode is None:
            self.returncode = returncode
        self._exited.set()

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

    def __init__(self, python: str, env: dict[str, str], import_path: Sequence[str], cwd: str, spawn, preload: Sequence[str] = PRELOAD) -> None:
        self.python = python
        self.error: str | None = None
        self.ready = threading.Event()
        self.info: dict[str, Any] = {}
        self._procs: dict[int, ForkedProcess] = {}
        self._pending: dict[int, tuple[threading.Event, list]] = {}
        self._exits: dict[int, int] = {}  # exits reported before fork() registered the pid
        self._ids = 0
        self._lock = threading.Lock()
        self.t0 = time.monotonic()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        theirs.set_inheritable(True)
        boot = _boot(theirs.fileno(), os.getpid(), preload, RUN_MODULES, import_path, skip=())
        try:
            self.proc = spawn(
                [python, "-c", boot], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, pass_fds=(theirs.fileno(),), start_new_session=True,
            )
        except OSError as e:
            ours.close()
            theirs.close()
            self.error = f"cannot start: {e}"
            self.ready.set()
            return
        theirs.close()
        self.sock = RequestSocket(ours)
        self._stderr_tail = b""
        threading.Thread(target=self._drain_stderr, daemon=True, name="kernelfix-zygote-stderr").start()
        threading.Thread(target=self._read, daemon=True, name="kernelfix-zygote").start()

    # -- replies

    def _drain_stderr(self) -> None:
        try:
            while chunk := self.proc.stderr.read1(65536):
                self._stderr_tail = (self._stderr_tail + chunk)[-8192:]
        except (OSError, ValueError):
            pass

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
        tail = self._stderr_tail.decode("utf-8", "replace").strip().splitlines()[-3:]
        self.error = self.error or "the fork server exited" + (f": {' | '.join(tail)}" if tail else "")
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
        self, command: Sequence[str], *, env: dict[str, str], cwd: str, launcher_spec: dict[str, Any], fds: Sequence[int], token: bool
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
            request = {"type": "spawn", "id": rid, "command": list(command), "env": env, "cwd": cwd,
                       "spec": launcher_spec, "targets": targets, "devnull_stdin": not token, "ignored_signals": ignored_signals()}
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
                self, pid, os.fdopen(stdin_w, "wb", buffering=0) if token else None, os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb")
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


def runnable(command: Sequence[str]) -> bool:
    """``-m MODULE ...`` or ``-c CODE ...``: what an interpreter that is already running can run."""
    return len(command) >= 2 and command[0] in ("-m", "-c")


_zygotes: dict[tuple, Zygote] = {}
_zlock = threading.Lock()


def key(python: str, env: dict[str, str], kind: str = "all") -> tuple:
    return (python, kind, tuple(sorted((k, v) for k, v in env.items() if k not in LATE_ENV)))


def kind_for_candidate(code: str | None) -> str:
    """The fork server a candidate's worker starts from, by what its source uses (only a choice of what
    is imported ahead: a module it uses and the kind leaves out, the worker imports itself)."""
    if code is None:
        return "candidate"  # started ahead, before the candidate exists
    triton = re.search(r"\btriton\b", code) is not None
    cpp = re.search(r"\bload_inline\b|\bcpp_extension\b|__global__", code) is not None  # as tools/candidate.py tells CUDA
    return "candidate" if triton and cpp else "triton" if triton else "cuda" if cpp else "torch"


def for_env(python: str, env: dict[str, str], import_path: Sequence[str], spawn, kind: str = "all") -> Zygote:
    """This process's zygote of ``kind`` (PRELOADS) for ``env`` (started on first use; a dead one is replaced)."""
    k = key(python, env, kind)
    with _zlock:
        z = _zygotes.get(k)
        if z is None or (z.ready.is_set() and not z.alive):
            base = {n: v for n, v in env.items() if n not in LATE_ENV}
            home = _zygote_home()
            base.update({"HOME": home, "TMPDIR": home})
            z = _zygotes[k] = Zygote(python, base, import_path, home, spawn, PRELOADS.get(kind, PRELOAD))
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
        zs = list(_zygotes.values())
        _zygotes.clear()
    for z in zs:
        z.close()


# ---------------------------------------------------------------------------- the zygote's side


def _boot(
    fd: int, parent_pid: int, preload: Sequence[str], run_modules: Sequence[str], import_path: Sequence[str], skip: Sequence[str],
    write_bytecode: bool | None = None,
) -> str:
    """The ``python -c`` program of a zygote. ``write_bytecode``: as the judge's own process would
    (its user's PYTHONDONTWRITEBYTECODE holds; the workers' environment always sets it)."""
    if write_bytecode is None:
        write_bytecode = not sys.dont_write_bytecode
    return (
        f"import sys; sys.path[:0] = {list(import_path)!r}; from kernelfix.sandbox.zygote import serve; "
        f"serve({fd}, {parent_pid}, {list(preload)!r}, {list(run_modules)!r}, {list(import_path)!r}, {list(skip)!r}, {write_bytecode!r})"
    )


def _driver_usable_after_fork() -> bool:
    """Whether a forked child can start the CUDA driver (it cannot once the parent started it: the
    driver's state does not survive a fork). One cuInit, in a child, once, on a CUDA build."""
    import ctypes

    torch = sys.modules.get("torch")
    if torch is None or not getattr(torch.version, "cuda", None) or not os.path.exists("/dev/nvidiactl"):
        return True
    pid = os.fork()
    if pid == 0:
        try:
            rc = ctypes.CDLL("libcuda.so.1").cuInit(0)
        except BaseException:
            os._exit(0)  # no driver to start here: nothing a fork could break
        os._exit(0 if rc == 0 else 1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


class _DriverlessAvailability:
    """``torch.cuda.is_available()`` answered from the device files while a preload imports.

    torch.utils.cpp_extension asks it at import (only to warn when CUDA_HOME has no runtime), and
    torch's answer starts the driver, which marks every later fork bad: on the H100 each such
    module cost the zygote a restart without it (15 s of a 24 s cold eval, measured). NVML would
    answer without the driver, but NVML's state does not survive a fork either (children then saw
    no device: "Invalid device id", measured)."""

    def __enter__(self) -> None:
        torch = sys.modules.get("torch")
        self.saved = getattr(getattr(torch, "cuda", None), "is_available", None)
        if self.saved is not None:
            torch.cuda.is_available = lambda: os.path.exists("/dev/nvidiactl")

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            sys.modules["torch"].cuda.is_available = self.saved


def _fork_poisoned() -> bool:
    """Whether a child forked now would refuse CUDA. torch marks every later fork "bad" once anything
    has asked the CUDA driver (``torch.cuda.device_count()``, which some modules do at import on a
    CUDA build), whether or not a context exists; its children then raise "Cannot re-initialize
    CUDA in forked subprocess". Only a forked child can tell."""
    torch = sys.modules.get("torch")
    if torch is None or not getattr(torch.version, "cuda", None):
        return False  # a CPU build: no CUDA to refuse
    pid = os.fork()
    if pid == 0:
        try:
            bad = bool(torch.cuda._is_in_bad_fork())
        except BaseException:
            bad = True
        os._exit(1 if bad else 0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) != 0


def serve(
    fd: int, parent_pid: int, preload: Sequence[str], run_modules: Sequence[str], import_path: Sequence[str] = (), skip: Sequence[str] = (),
    write_bytecode: bool = True,
) -> None:
    """The zygote's main loop: import, say so, then fork on request until the judge goes away.

    A preload that would make forked children refuse CUDA (``_fork_poisoned``) is left out: the
    zygote starts over in a fresh interpreter (the same process and socket, by exec) without it."""
    import warnings

    from kernelfix.sandbox import linux

    linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)  # dies with the judge's process
    if os.getppid() != parent_pid:
        os._exit(0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the judge decides when it ends (EOF on the socket)
    sock = RequestSocket(socket.socket(fileno=fd))
    t0 = time.monotonic()
    failed: dict[str, str] = {}
    seconds: dict[str, float] = {}
    # While it imports, nothing may start the CUDA driver (a forked child could not use it) and the
    # library's bytecode is written as the judge's own process would (the workers' environment says
    # PYTHONDONTWRITEBYTECODE: on an install without .pyc files every zygote compiled torch anew,
    # its import and dynamo's 3x slower, measured on the H100's host). Nothing of a candidate's has
    # run here.
    no_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, not write_bytecode
    driverless = _DriverlessAvailability()
    for name in preload:
        if name in skip:
            continue
        t1 = time.monotonic()
        try:
            with driverless:
                __import__(name)
        except Exception as e:  # triton is optional; a missing module just is not preloaded
            failed[name] = f"{type(e).__name__}: {e}"
            continue
        seconds[name] = round(time.monotonic() - t1, 3)
        if name != "torch" and _fork_poisoned():
            sys.stdout.flush()
            os.execv(sys.executable, [sys.executable, "-c", _boot(fd, parent_pid, preload, run_modules, import_path, [*skip, name], write_bytecode)])
    sys.dont_write_bytecode = no_bytecode
    if _fork_poisoned():  # torch itself: nothing forked from here could use CUDA
        failed["torch"] = "importing torch made forked children refuse CUDA"
        sys.modules.pop("torch", None)
    for name in run_modules:
        sys.modules.pop(name, None)
    ok, error = True, None
    torch = sys.modules.get("torch")
    if torch is None:
        ok, error = False, f"torch did not import: {failed.get('torch')}"
    elif torch.cuda.is_initialized():  # a forked child could not use CUDA
        ok, error = False, "CUDA was initialised while importing"
    elif not _driver_usable_after_fork():
        ok, error = False, "the CUDA driver was started while importing: a forked child could not use it"
    sock.send({"type": "ready", "ok": ok, "error": error, "pid": os.getpid(), "seconds": round(time.monotonic() - t0, 3),
               "failed": failed, "skipped": list(skip), "imports": seconds, "threads": len(os.listdir("/proc/self/task"))})
    if not ok:
        os._exit(0)
    warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)  # see _spawn's note on threads
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    live: set[int] = set()  # forked, exit not yet reported
    done: set[int] = set()  # exit reported, not yet reaped

    def report_exits() -> None:
        for pid in list(live):
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                info = None
                rc = -signal.SIGKILL
            else:
                if info is None:
                    continue
                rc = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
            live.discard(pid)
            done.add(pid)
            sock.send({"type": "exit", "pid": pid, "returncode": rc})

    while True:
        try:
            readable, _, _ = select.select([sock.sock, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in readable:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        report_exits()
        if sock.sock not in readable:
            continue
        got = sock.recv()
        if got is None:
            os._exit(0)  # the judge's side closed: the children die with us (their parent-death signal)
        msg, fds = got
        try:
            kind = msg.get("type")
            if kind == "spawn":
                try:
                    pid = _fork(msg, fds, keep_out=(sock.sock.fileno(), wake_r, wake_w))
                except OSError as e:
                    sock.send({"type": "failed", "id": msg.get("id"), "error": f"fork: {e}"})
                else:
                    live.add(pid)
                    sock.send({"type": "forked", "id": msg.get("id"), "pid": pid})
            elif kind == "reap":
                pid = int(msg.get("pid", -1))
                if pid in done or pid in live:
                    live.discard(pid)
                    done.discard(pid)
                    try:
                        os.waitpid(pid, 0)
                    except ChildProcessError:
                        pass
        finally:
            for x in fds:
                try:
                    os.close(x)
                except OSError:
                    pass


def _fork(msg: dict[str, Any], fds: list[int], keep_out: Sequence[int]) -> int:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    pid = os.fork()
    if pid != 0:
        return pid
    try:
        _become(msg, fds)
    except BaseException as e:  # never return into the server's loop
        try:
            os.write(2, f"kernelfix zygote: cannot start the child: {type(e).__name__}: {e}\n".encode())
        finally:
            os._exit(125)
    os._exit(125)


def _become(msg: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: the stage's session, descriptors, signals, environment and directory,
    then the sandbox (``launch.enter``) and the command, as ``python -m MODULE ARGS`` would run it."""
    import runpy
    import tempfile

    from kernelfix.sandbox import launch

    os.setsid()
    signal.set_wakeup_fd(-1)
    _inherited_signals([int(x) for x in msg.get("ignored_signals") or []])
    targets = [int(t) for t in msg["targets"]]
    if len(targets) != len(fds):
        raise RuntimeError(f"{len(fds)} descriptors for {len(targets)} places")
    high = [_dup_high(fd) for fd in fds]  # out of the way of every target
    if msg.get("devnull_stdin"):
        null = os.open(os.devnull, os.O_RDONLY)
        targets, high = [0, *targets], [_dup_high(null), *high]
        os.close(null)
    for fd, target in zip(high, targets):
        os.dup2(fd, target, inheritable=True)
    keep = set(targets)
    _close_all_but(keep)
    env = {str(k): str(v) for k, v in msg["env"].items()}
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # computed again from the child's TMPDIR
    cwd = str(msg["cwd"])
    os.chdir(cwd)
    sys.path[:] = [cwd] + [p for p in sys.path if p not in ("", cwd)]
    command = [str(a) for a in msg["command"]]
    spec = dict(msg["spec"])
    spec["parent_pid"] = os.getppid()
    _late_env_fixups()
    if command[0] == "-m":  # as `python -m`: the module runs as a fresh __main__, cwd first on the path
        sys.path[:] = [cwd] + [p for p in sys.path if p not in ("", cwd)]
        sys.argv = ["-m", *command[2:]]
        launch.enter(spec, lambda: _python_signals() or runpy.run_module(command[1], run_name="__main__", alter_sys=True))
    else:  # as `python -c`: '' first on the path, argv[0] "-c"
        sys.path[:] = [""] + [p for p in sys.path if p not in ("", cwd)]
        sys.argv = ["-c", *command[2:]]
        launch.enter(spec, lambda: _python_signals() or _run_code(command[1]))


def _inherited_signals(ignored: list[int]) -> None:
    """The dispositions an exec'd launcher would have passed on: the judge's ignored signals stay
    ignored, every other one is the default (a handler does not survive exec)."""
    from kernelfix.sandbox.launch import _reset_signals

    _reset_signals()
    for sig in ignored:
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (OSError, ValueError):
            pass


def _python_signals() -> None:
    """What a starting interpreter does to the dispositions it finds (the sandbox's init has reset
    them all to the default by then; without a PID namespace they are the judge's, as inherited):
    SIGPIPE and SIGXFSZ ignored, SIGINT raising KeyboardInterrupt unless it was ignored."""
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if signal.getsignal(signal.SIGINT) == signal.SIG_DFL:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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


def _run_code(code: str) -> None:
    import types

    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    exec(compile(code, "<string>", "exec"), main.__dict__)


def _late_env_fixups() -> None:
    """Defaults that a preloaded module computed from the zygote's environment at import."""
    knobs = sys.modules.get("triton.knobs")
    cache = getattr(knobs, "cache_knobs", None) if knobs is not None else None
    home = getattr(cache, "__dict__", {}).get("home_dir") if cache is not None else None
    if home is not None and hasattr(home, "default"):  # triton: env_str("TRITON_HOME", expanduser("~/"))
        home.default = os.path.expanduser("~/")


def _dup_high(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD, 1000)


def _close_all_but(keep: set[int]) -> None:
    try:
        open_fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))
    except OSError:
        open_fds = list(range(3, 4096))
    for fd in open_fds:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
