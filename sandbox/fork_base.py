"""The judge's side of the base its fork servers are forked from (``Base``; its own side is ``fork_server.serve_base``),
and what starting any of them takes: an interpreter by exec, its stderr's tail kept."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from kernelfix.sandbox.channel import RequestSocket


class Base:
    """The process a judge's fork servers of one environment are forked from: it imported numpy and torch (zygote's ``BASE_PRELOAD``)
    once, so each kind's fork server imports only its own modules (``zygote.PRELOADS``).

    Why: a judge starts two fork servers (its reference's and its candidate's), and each imported torch by itself,
    1.5-2 s of CPU on a 2-core machine; a machine running many judges (a test suite, a batch) paid it twice per judge.
    Forked from here, the kinds still import their own modules side by side, after torch, as each did before.

    It holds what a fork server holds before its own imports: the scrubbed environment, library code, nothing of a
    worker's. It dies with the judge's process (started from the spawner thread); its fork servers die with it. A base
    that cannot start or fork (or is gone) leaves each fork server to start by exec, as it did before."""

    def __init__(
        self, python: str, env: dict[str, str], import_path: Sequence[str], cwd: str, spawn, preload: Sequence[str]
    ) -> None:
        self.error: str | None = None
        self.sock: RequestSocket | None = None
        pid = os.getpid()

        def boot(fd: int) -> str:
            return (
                f"import sys; sys.path[:0] = {list(import_path)!r}; from kernelfix.sandbox.fork_server import serve_base; "
                f"serve_base({fd}, {pid}, {list(preload)!r}, {list(import_path)!r}, {not sys.dont_write_bytecode!r})"
            )

        try:
            self.proc, ours = spawn_server(spawn, python, cwd, env, boot)
        except OSError as e:
            self.error = f"cannot start: {e}"
            return
        self.sock = RequestSocket(ours)
        self._stderr = StderrTail(self.proc.stderr)
        threading.Thread(target=self._watch, args=(self.sock,), daemon=True, name="kernelfix-zygote-base").start()

    def _watch(self, sock: RequestSocket) -> None:
        while (got := sock.recv()) is not None:
            for fd in got[1]:  # it sends none; never leak what a broken peer might
                os.close(fd)
        self.error = self.error or "the fork servers' base exited" + self._stderr.said()

    @property
    def alive(self) -> bool:
        return self.error is None

    def fork_server(
        self, preload: Sequence[str], run_modules: Sequence[str], late: Sequence[str]
    ) -> tuple[socket.socket, Any] | None:
        """A fork server of these preloads, forked from here (``fork_server.serve`` in the child, with the base's import
        path and bytecode setting): this side of its socket and its stderr. None when the base cannot take the request
        (the caller starts one by exec)."""
        if not self.alive or self.sock is None:
            return None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        err_r, err_w = os.pipe()
        request = {"type": "server", "preload": list(preload), "run_modules": list(run_modules), "late": list(late)}
        try:
            sent = self.sock.send(request, [theirs.fileno(), err_w])
        finally:
            theirs.close()
            os.close(err_w)
        if not sent:
            ours.close()
            os.close(err_r)
            return None
        return ours, os.fdopen(err_r, "rb")

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()


class StderrTail:
    """A fork server's stderr, drained, its last lines kept for the error that says why it ended."""

    def __init__(self, stream) -> None:
        self.tail = b""
        threading.Thread(target=self._drain, args=(stream,), daemon=True, name="kernelfix-zygote-stderr").start()

    def _drain(self, stream) -> None:
        try:
            while chunk := stream.read1(65536):
                self.tail = (self.tail + chunk)[-8192:]
        except (OSError, ValueError):
            pass

    def said(self) -> str:
        lines = self.tail.decode("utf-8", "replace").strip().splitlines()[-3:]
        return f": {' | '.join(lines)}" if lines else ""


def spawn_server(
    spawn, python: str, cwd: str, env: dict[str, str], boot: Callable[[int], str]
) -> tuple[subprocess.Popen, socket.socket]:
    """Start ``python -c boot(fd)``, ``fd`` its end of a new socket pair: the process, and this side's end. Raises
    OSError (both ends closed) when it cannot start."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    theirs.set_inheritable(True)
    try:
        proc = spawn(
            [python, "-c", boot(theirs.fileno())],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(theirs.fileno(),),
            start_new_session=True,
        )
    except OSError:
        ours.close()
        raise
    finally:
        theirs.close()
    return proc, ours
