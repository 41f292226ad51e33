"""[candidate worker, one-shot child] What a Triton candidate's worker would compute at its first kernel call, done once in the fork
server it is forked from.

Triton keys every compiled kernel by ``triton_key()``: a SHA-256 of its own sources and of libtriton.so (500 MB in
Triton 3.x), computed once per process at its first kernel lookup, 0.3 s on the 2-core box. Every candidate is a
fresh process, so each paid it inside its first judged forward (within the 0.7 s that first call took for 19_ReLU
on the H100, its kernels long cached on disk). The value depends only on the installed Triton and reading files
starts nothing of CUDA's: the fork servers that preload Triton import the candidate worker's module after it, which
computes the key here, and every worker forked from them finds it cached.

What needs the GPU but no candidate is done by each worker before its candidate arrives (``triton_driver_ahead``,
while a standby worker waits for ``go``, CUDA already up): Triton's active driver (its C helpers loaded from the
compiler cache, libcuda's directory found by running ``ldconfig -p``), the device's target and the backend's hash
(``ptxas --version``, another subprocess). Each is computed once per process and read by the first kernel call;
nothing is compiled, loaded onto the GPU or launched, so a standby beside another candidate's timing adds no GPU
work."""

from __future__ import annotations

import importlib
import sys


def triton_key_ahead() -> bool:
    """Compute Triton's key now where Triton is imported already; whether it was."""
    if "triton" not in sys.modules:
        return False  # a CUDA candidate's fork server, or a worker started without one: its first call computes it
    for where in ("triton.runtime.cache", "triton.compiler.compiler"):  # Triton 3.4+, and before
        try:
            key = getattr(importlib.import_module(where), "triton_key", None)
        except ImportError:
            continue
        if key is not None:
            try:
                key()
                return True
            except Exception:  # an install whose files moved: the first kernel call computes it, as before
                return False
    return False


def triton_driver_ahead() -> bool:
    """Start Triton's driver for the current CUDA device now (the standby worker, CUDA up); whether it ran.

    What a first kernel call would do before its cache lookup, done while no candidate exists: the values are
    the installed Triton's and the device's, not the candidate's, and the first call finds them cached."""
    if "triton" not in sys.modules:
        return False  # a worker that has not imported Triton: a candidate that needs it pays this in its first call
    try:
        from triton.compiler.compiler import make_backend
        from triton.runtime.driver import driver

        active = driver.active  # CudaDriver(): its helpers' .so, built once into the compiler cache, loaded
        target = active.get_current_target()
        make_backend(target).hash()  # the backend's key part: ptxas's version
        return True
    except Exception:  # another Triton layout, a driver that will not start: the first kernel call does it, as before
        return False
