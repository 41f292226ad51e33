"""What a fork server does so that the workers it forks can still use CUDA: the driver must not start in the fork server
(its state does not survive a fork), and torch marks every later fork bad once anything asked the driver. Each check
runs in a child of its own, once, since only a forked child can tell."""

from __future__ import annotations

import os
import sys


def driver_usable_after_fork() -> bool:
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


class DriverlessAvailability:
    """``torch.cuda.is_available()`` answered from the device files while a preload imports.

    torch.utils.cpp_extension asks it at import (only to warn when CUDA_HOME has no runtime), and
    torch's answer starts the driver, which marks every later fork bad: on the H100 each such
    module cost the zygote a restart without it (15 s of a 24 s cold eval, measured). NVML would
    answer without the driver, but NVML's state does not survive a fork either (children then saw
    no device: "Invalid device id", measured)."""

    def __enter__(self) -> None:
        torch = sys.modules.get("torch")
        self.saved = getattr(getattr(torch, "cuda", None), "is_available", None)
        if torch is not None and self.saved is not None:
            torch.cuda.is_available = lambda: os.path.exists("/dev/nvidiactl")

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            sys.modules["torch"].cuda.is_available = self.saved


def fork_poisoned() -> bool:
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
