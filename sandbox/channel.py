"""The message pipe between a sandboxed child and its parent, both ends.

The child finds the pipe's fd in ``KERNELFIX_MSG_FD``, so code running in the
child can find it too and write forged results. Each child therefore gets a
random token on its stdin, which the trusted child code reads before anything
untrusted runs; every message carries it, and the parent counts lines without
it as forged. Only the launcher's report, sent before the child's first
authenticated message, goes without a token: no untrusted code has run by then.

A long-lived child also gets a request socket (fd in ``KERNELFIX_REQ_FD``): the
parent sends it JSON requests there, with file descriptors attached (the shared
memory that carries tensors between processes), and a trusted child (the judge's
reference server) sends descriptors back the same way. The parent never reads
what a candidate's process writes there: its replies, like every result, travel
on the authenticated pipe.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

MSG_FD_ENV = "KERNELFIX_MSG_FD"
REQUEST_FD_ENV = "KERNELFIX_REQ_FD"
_MAX_FDS = 64  # descriptors one request may carry
LAUNCHER_MESSAGE = "sandbox"

# Bound at import (before any candidate code), so later patches of os/json change nothing here.
_os_write = os.write
_os_read = os.read
_json_dumps = json.dumps


def new_token() -> str:
    return secrets.token_hex(16)


class ChildChannel:
    """Child side: ``ChildChannel.open()`` once, early; then ``send(type, **payload)``."""

    def __init__(self, fd: int, token: str):
        self.fd = fd
        self._prefix = (token + " ").encode()

    @classmethod
    def open(cls) -> "ChildChannel":
        """The pipe from the environment and the token from stdin, which is then closed to /dev/null."""
        fd = int(os.environ[MSG_FD_ENV])
        token = b""
        while not token.endswith(b"\n") and len(token) < 256:
            chunk = _os_read(0, 256 - len(token))
            if not chunk:
                break
            token += chunk
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        return cls(fd, token.decode("ascii", "replace").strip())

    def send(self, type_: str, **payload: Any) -> None:
        data = self._prefix + (_json_dumps({"type": type_, **payload}, default=str) + "\n").encode()
        view = memoryview(data)
        while view:
            n = _os_write(self.fd, view)
            view = view[n:]

    def requests(self) -> "RequestSocket":
        """The request socket a long-lived child was started with."""
        return RequestSocket(socket.socket(fileno=int(os.environ[REQUEST_FD_ENV])))


class RequestSocket:
    """One end of a request socket: length-prefixed JSON frames, file descriptors attached."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._lock = threading.Lock()

    def send(self, msg: dict[str, Any], fds: Any = ()) -> bool:
        body = _json_dumps(msg, default=str).encode()
        frame = struct.pack("<I", len(body)) + body
        with self._lock:
            try:
                if fds:
                    n = socket.send_fds(self.sock, [frame], list(fds))
                    frame = frame[n:]
                if frame:
                    self.sock.sendall(frame)
                return True
            except OSError:
                return False

    def recv(self, timeout: float | None = None) -> tuple[dict[str, Any], list[int]] | None:
        """The next frame and the descriptors that came with it; None at EOF or on timeout."""
        try:
            self.sock.settimeout(timeout)  # raises too once this side is closed (a reader thread, after close())
            head, fds, _, _ = socket.recv_fds(self.sock, 4, _MAX_FDS)
            if not head:
                return None
            while len(head) < 4:
                more = self.sock.recv(4 - len(head))
                if not more:
                    return None
                head += more
            (size,) = struct.unpack("<I", head)
            body = bytearray()
            while len(body) < size:
                chunk = self.sock.recv(min(size - len(body), 1 << 20))
                if not chunk:
                    return None
                body += chunk
        except (OSError, TimeoutError):
            return None
        msg = _parse(bytes(body))
        return (msg if msg is not None else {"type": "garbage"}), fds

    def close(self) -> None:
        # shutdown first: a close alone neither wakes a thread blocked in recv() on this socket nor, while that thread is
        # inside it, ends the connection (the peer, a fork server, would never see EOF and never exit).
        for end in (lambda: self.sock.shutdown(socket.SHUT_RDWR), self.sock.close):
            try:
                end()
            except OSError:
                pass


class MessageReader:
    """Parent side: JSON lines from the pipe, each stamped with its arrival time (``_t``).

    ``items`` holds authenticated messages (and the launcher's report);
    ``forged`` the first bytes of each line that failed authentication.
    """

    def __init__(self, fd: int, t0: float, token: str | None, on_message: Callable[[dict[str, Any]], None] | None):
        self.items: list[dict[str, Any]] = []
        self.forged: list[str] = []
        self.t0 = t0
        self.token = token.encode() if token else None
        self._authenticated_seen = False
        self.on_message = on_message
        self._cond = threading.Condition()
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
                    self.forged.append(buf[:200].decode("utf-8", "replace"))
                    buf = b""
        except (OSError, ValueError):
            pass
        finally:
            if buf.strip():
                self._take(buf)
            self.file.close()
            with self._cond:
                self._cond.notify_all()

    def wait_new(self, since: int, timeout: float) -> tuple[list[dict[str, Any]], int]:
        """Messages from index ``since`` on (waiting up to ``timeout`` for one), and the count so far."""
        with self._cond:
            if len(self.items) <= since and timeout > 0 and self.thread.is_alive():
                self._cond.wait(timeout)
            return self.items[since:], len(self.items)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._cond:
            return list(self.items)

    def close(self) -> None:
        try:
            self.file.close()
        except OSError:
            pass

    def _take(self, line: bytes) -> None:
        body = line
        if self.token is not None:
            head, _, rest = line.partition(b" ")
            if hmac.compare_digest(head, self.token):
                body, self._authenticated_seen = rest, True
            else:
                msg = _parse(line)
                if msg is not None and msg.get("type") == LAUNCHER_MESSAGE and not self._authenticated_seen:
                    self._keep(msg)
                else:
                    self.forged.append(line[:200].decode("utf-8", "replace"))
                return
        msg = _parse(body)
        if msg is None:
            msg = {"type": "garbage", "raw": body[:200].decode("utf-8", "replace")}
        self._keep(msg)

    def _keep(self, msg: dict[str, Any]) -> None:
        msg["_t"] = time.monotonic() - self.t0
        with self._cond:
            self.items.append(msg)
            self._cond.notify_all()
        if self.on_message is not None:
            try:
                self.on_message(msg)
            except Exception:  # a UI callback must never break the judge
                pass


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None
