"""[candidate worker] What a Triton candidate's worker would compute at its first kernel call, done once in the fork
server it is forked from.

Triton keys every compiled kernel by ``triton_key()``: a SHA-256 of its own sources and of libtriton.so (500 MB in
Triton 3.x), computed once per process at its first kernel lookup, 0.3 s on the 2-core box. Every candidate is a
fresh process, so each paid it inside its first judged forward (within the 0.7 s that first call took for 19_ReLU
on the H100, its kernels long cached on disk). The value depends only on the installed Triton and reading files
starts nothing of CUDA's: the fork servers that preload Triton import the candidate worker's module after it, which
computes the key here, and every worker forked from them finds it cached."""

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
