"""How the sandbox starts a child and keeps its output: one long-lived thread forks every child (``spawn``), and a
child's stream is drained keeping only its tail (``Tail``)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import deque
from typing import Any


class Tail:
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


def import_path() -> list[str]:
    return [p for p in sys.path if p and os.path.isabs(p) and os.path.isdir(p)]


class Spawner:
    """Every child is started from one thread that lives as long as the process.

    The launcher asks the kernel to kill it when its parent dies (PR_SET_PDEATHSIG),
    and Linux sends that signal when the *thread* that forked the child exits, not
    the process. A worker that outlives the stage that started it (started from a
    thread pool's thread, say) would die with that thread; started from here, it
    dies only with the judge's process.
    """

    def __init__(self) -> None:
        import queue

        self._jobs: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _run(self) -> None:
        while True:
            args, kwargs, done, box = self._jobs.get()
            try:
                box.append(subprocess.Popen(*args, **kwargs))
            except BaseException as e:
                box.append(e)
            done.set()

    def __call__(self, *args: Any, **kwargs: Any) -> subprocess.Popen:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True, name="kernelfix-spawner")
                self._thread.start()
        done, box = threading.Event(), []
        self._jobs.put((args, kwargs, done, box))
        done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]


spawn = Spawner()
