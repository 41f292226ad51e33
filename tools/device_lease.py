"""One judged run per GPU at a time, across threads and processes: a lock file per device.

The judge takes the lease around every stage that runs on the GPU (reference,
correctness, benchmark, profile), so that concurrent sessions (batch workers,
Ray tasks on one node) compile in parallel but never time on a shared GPU.
``flock`` locks belong to an open file description: two threads of one process
that each open the file exclude each other as two processes do, and the kernel
drops a dead holder's lock. Each hold appends a line to ``gpu-<id>.log`` beside
the lock (pid, stage, when it asked, got and gave back the GPU), written while the
lock is held: a record of the queue that shows no two holds overlapped.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOG_MAX_BYTES = 1 << 20  # the hold log starts over past this

# Stages whose child runs code on the GPU. compile stays outside: it is CPU work (nvcc, ninja, Triton's parse).
GPU_STAGES = frozenset({"reference", "correctness", "benchmark", "profile_ncu", "profile_torch", "sanitize"})


def cuda_available() -> bool:
    """Whether torch here can use a CUDA GPU, as ``torch.cuda.is_available()`` says, without importing
    torch into the judge's process (a second or more that only the workers need): torch's CUDA
    library must be installed and the driver must count a device."""
    import ctypes
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    if not any(lib.glob("libtorch_cuda*.so*")):
        return False  # a CPU build of torch
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        count = ctypes.c_int(0)
        return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0
    except OSError:
        return False


def visible_gpu() -> str:
    """The GPU a child uses by default: the first of CUDA_VISIBLE_DEVICES (an index or a UUID), else "0"."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return first or "0"


class DeviceLease:
    """Exclusive use of one GPU, queued on ``LOCK_DIR/gpu-<id>.lock``."""

    def __init__(self, lock_dir: Path, gpu: str):
        self.gpu = gpu
        lock_dir.mkdir(parents=True, exist_ok=True)
        self.path = lock_dir / f"gpu-{re.sub(r'[^A-Za-z0-9_.-]', '_', gpu)}.lock"
        self.log = self.path.with_suffix(".log")
        # One file per hold asked for and not yet given back: who else wants the GPU's memory now.
        self.wants = self.path.with_suffix(".wants")
        self.wants.mkdir(exist_ok=True)
        self.token = uuid.uuid4().hex[:12]  # this lease's holder (a judge): several may share a process

    @contextmanager
    def hold(self, what: str = "") -> Iterator[None]:
        mark = self.wants / f"{os.getpid()}-{self.token}-{uuid.uuid4().hex[:12]}"
        try:
            mark.touch()
        except OSError:  # a courtesy to the other judges, like the log
            pass
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            asked = time.time()
            fcntl.flock(fd, fcntl.LOCK_EX)  # waits in line; a signal handler that raises (Ctrl-C) ends the wait
            got = time.time()
            try:
                yield
            finally:
                self._record(what, asked, got)
        finally:
            os.close(fd)  # releases the lock
            mark.unlink(missing_ok=True)

    def others_want(self) -> bool:
        """Whether another judge (in this process or another) has asked for this GPU and not yet given
        it back: then what this one keeps on the GPU while it does not hold it (cached trials, free
        allocator blocks) is in their way. A dead process's mark is swept."""
        try:
            marks = os.listdir(self.wants)
        except OSError:
            return False
        found = False
        for name in marks:
            pid, token, _ = (name.split("-", 2) + ["", ""])[:3]
            if token == self.token:
                continue
            if pid.isdigit() and _alive(int(pid)):
                found = True
            else:
                (self.wants / name).unlink(missing_ok=True)
        return found

    def note(self, entry: dict) -> None:
        """A line in ``gpu-<id>.memory`` (not the hold log): GPU memory a judge gave back to the others."""
        self._write({"gpu": self.gpu, "pid": os.getpid(), "at": round(time.time(), 4), **entry}, self.path.with_suffix(".memory"))

    def _record(self, what: str, asked: float, got: float) -> None:
        self._write({"gpu": self.gpu, "pid": os.getpid(), "what": what, "asked": round(asked, 4), "got": round(got, 4), "released": round(time.time(), 4)})

    def _write(self, entry: dict, log: Path | None = None) -> None:
        log = log or self.log
        try:
            mode = "w" if log.exists() and log.stat().st_size > LOG_MAX_BYTES else "a"
            with open(log, mode, encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
        except OSError:  # the record is a courtesy; the lock is what matters
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True
