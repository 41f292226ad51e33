"""One judged run per GPU at a time, across threads and processes: a lock file per device.

The judge takes the lease around every stage that runs on the GPU (reference,
correctness, benchmark, profile), so that concurrent sessions (batch workers,
Ray tasks on one node) compile in parallel but never time on a shared GPU.
``flock`` locks belong to an open file description: two threads of one process
that each open the file exclude each other as two processes do, and the kernel
drops a dead holder's lock.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Stages whose child runs code on the GPU. compile stays outside: it is CPU work (nvcc, ninja, Triton's parse).
GPU_STAGES = frozenset({"reference", "correctness", "benchmark", "profile"})


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

    @contextmanager
    def hold(self) -> Iterator[None]:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # waits in line; a signal handler that raises (Ctrl-C) ends the wait
            yield
        finally:
            os.close(fd)  # releases the lock
