"""The zygote's own side (sandbox/zygote.py is the judge's): the process that imported the workers' modules
ahead, and forks each worker on request. Started as ``python -c`` by ``zygote.boot_code``; zygote.py says why
a fork is safe, and what it keeps from an exec'd launcher."""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

from kernelfix.sandbox.channel import RequestSocket
from kernelfix.sandbox.fork_bytecode import bytecode_prefix, warm_late
from kernelfix.sandbox.fork_cuda import DriverlessAvailability, driver_usable_after_fork, fork_poisoned
from kernelfix.sandbox.zygote import boot_code

log = logging.getLogger(__name__)


def serve(
    fd: int,
    parent_pid: int,
    preload: Sequence[str],
    run_modules: Sequence[str],
    import_path: Sequence[str] = (),
    skip: Sequence[str] = (),
    write_bytecode: bool = True,
    late: Sequence[str] = (),
) -> None:
    """The zygote's main loop: import, say so, then fork on request until the judge goes away.

    A preload that would make forked children refuse CUDA (``fork_poisoned``) is left out: the
    zygote starts over in a fresh interpreter (the same process and socket, by exec) without it."""
    import warnings

    sock = _attach(fd, parent_pid)
    t0 = time.monotonic()
    failed: dict[str, str] = {}
    seconds: dict[str, float] = {}
    # While it imports, nothing may start the CUDA driver (a forked child could not use it) and the
    # library's bytecode is written as the judge's own process would (the workers' environment says
    # PYTHONDONTWRITEBYTECODE: on an install without .pyc files every zygote compiled torch anew,
    # its import and dynamo's 3x slower, measured on the H100's host). Nothing of a candidate's has
    # run here.
    no_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, not write_bytecode
    own_prefix, prefix = sys.pycache_prefix, bytecode_prefix(write_bytecode, preload)
    if prefix is not None:  # the judge's own folder for it (below): written and read there whatever the install allows
        sys.pycache_prefix, sys.dont_write_bytecode = prefix, False
    driverless = DriverlessAvailability()
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
        if name != "torch" and fork_poisoned():
            sys.stdout.flush()
            os.execv(
                sys.executable,
                [
                    sys.executable,
                    "-c",
                    boot_code(fd, parent_pid, preload, run_modules, import_path, [*skip, name], write_bytecode, late),
                ],
            )
    # A worker writes no bytecode, as it never has; where this fork server keeps its bytecode in the judge's folder, a
    # worker reads what it imports later from there too (the reference's dynamo and inductor: ``warm_late``).
    sys.dont_write_bytecode, sys.pycache_prefix = no_bytecode, (prefix if prefix is not None else own_prefix)
    if fork_poisoned():  # torch itself: nothing forked from here could use CUDA
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
    elif not driver_usable_after_fork():
        ok, error = False, "the CUDA driver was started while importing: a forked child could not use it"
    sock.send(
        {
            "type": "ready",
            "ok": ok,
            "error": error,
            "pid": os.getpid(),
            "seconds": round(time.monotonic() - t0, 3),
            "failed": failed,
            "skipped": list(skip),
            "imports": seconds,
            "threads": len(os.listdir("/proc/self/task")),
        }
    )
    if not ok:
        os._exit(0)
    warming = warm_late(late, prefix, sock.sock.fileno())
    warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)  # see _spawn's note on threads
    wake_r, wake_w = _exits_wake()
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
        request = _wait(sock.sock.fileno(), wake_r)
        report_exits()
        if warming is not None:
            try:
                if os.waitpid(warming, os.WNOHANG)[0]:
                    warming = None  # reaped: it was never a worker the judge knows of
            except ChildProcessError:
                warming = None
        if not request:
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


def serve_base(
    fd: int, parent_pid: int, preload: Sequence[str], import_path: Sequence[str], write_bytecode: bool
) -> None:
    """The base of a judge's fork servers (fork_base.Base): import what every kind imports, then fork a fork server on
    request (``serve`` in the child, on the socket and stderr the request brings, with this base's import path and
    bytecode setting) until the judge goes away."""
    sock = _attach(fd, parent_pid)
    base_pid = os.getpid()
    # Bytecode as ``serve`` writes it, and the interpreter's own settings back after, for ``serve`` to find as its own.
    no_bytecode, own_prefix = sys.dont_write_bytecode, sys.pycache_prefix
    prefix = bytecode_prefix(write_bytecode, preload)
    sys.dont_write_bytecode = not write_bytecode
    if prefix is not None:
        sys.pycache_prefix, sys.dont_write_bytecode = prefix, False
    for name in preload:
        try:
            with DriverlessAvailability():
                __import__(name)
        except Exception:  # the fork server imports it again, and says what failed
            pass
    sys.dont_write_bytecode, sys.pycache_prefix = no_bytecode, own_prefix
    wake_r, wake_w = _exits_wake()
    while True:
        request = _wait(sock.sock.fileno(), wake_r)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:  # a fork server that ended
                pass
        except ChildProcessError:
            pass
        if not request:
            continue
        got = sock.recv()
        if got is None:
            os._exit(0)  # the judge's side closed: the fork servers die with us (their parent-death signal)
        msg, fds = got
        try:
            if msg.get("type") == "server" and len(fds) == 2 and os.fork() == 0:
                try:
                    os.close(sock.sock.detach())
                    _become_server(msg, fds, base_pid, import_path, write_bytecode, own=(wake_r, wake_w))
                except BaseException as e:  # never return into the base's loop
                    os.write(2, f"kernelfix fork server: cannot start: {type(e).__name__}: {e}\n".encode())
                finally:
                    os._exit(0)
        except OSError:
            pass  # no fork: the judge's side sees the socket close, and starts this fork server by exec
        finally:
            for x in fds:
                os.close(x)


def _attach(fd: int, parent_pid: int) -> RequestSocket:
    """A fork server's (or its base's) first steps: die with the process that started it (gone already: exit now),
    leave SIGINT to it (it decides when this ends: EOF on the socket), and take the socket it passed."""
    from kernelfix.sandbox import linux

    linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return RequestSocket(socket.socket(fileno=fd))


def _exits_wake() -> tuple[int, int]:
    """A pipe that each SIGCHLD writes to (``signal.set_wakeup_fd``): the loop's select wakes when a child exits."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    return wake_r, wake_w


def _wait(sock_fd: int, wake_r: int) -> bool:
    """Block until a request or a child's exit; whether a request is waiting (the wake-up pipe is drained)."""
    try:
        readable, _, _ = select.select([sock_fd, wake_r], [], [])
    except InterruptedError:
        return False
    if wake_r in readable:
        try:
            while os.read(wake_r, 512):
                pass
        except BlockingIOError:
            pass
    return sock_fd in readable


def _become_server(
    msg: dict[str, Any],
    fds: list[int],
    parent_pid: int,
    import_path: Sequence[str],
    write_bytecode: bool,
    own: Sequence[int],
) -> None:
    """In a child of the base: a fork server of the request's kind, on the socket and stderr it brought."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for x in own:
        os.close(x)
    server, err = fds
    os.dup2(err, 2)
    os.close(err)
    os.set_inheritable(server, True)  # ``serve`` may exec itself afresh on it (a preload that poisons forks)
    serve(
        server,
        parent_pid,
        [str(x) for x in msg["preload"]],
        [str(x) for x in msg["run_modules"]],
        import_path,
        (),
        write_bytecode,
        [str(x) for x in msg["late"]],
    )


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
        launch.enter(
            spec, lambda: _python_signals() or runpy.run_module(command[1], run_name="__main__", alter_sys=True)
        )
    else:  # as `python -c`: '' first on the path, argv[0] "-c"
        sys.path[:] = [""] + [p for p in sys.path if p not in ("", cwd)]
        sys.argv = ["-c", *command[2:]]
        launch.enter(spec, lambda: _python_signals() or _run_code(command[1]))


def _inherited_signals(ignored: list[int]) -> None:
    """The dispositions an exec'd launcher would have passed on: the judge's ignored signals stay
    ignored, every other one is the default (a handler does not survive exec)."""
    from kernelfix.sandbox.launch import reset_signals

    reset_signals()
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
