"""Where a fork server's imports read and write their bytecode (the judge's cache where the install has none beside its
sources), and the bytecode of what its workers import later, written ahead from a child of its own."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

NO_BYTECODE_CACHE_ENV = "KERNELFIX_NO_BYTECODE_CACHE"  # set (to anything): no folder of the judge's for it


def bytecode_prefix(write_bytecode: bool, preload: Sequence[str]) -> str | None:
    """Where this fork server's imports read and write their bytecode: None (Python's own place, beside each
    source) where the install has its bytecode there (torch's, as the sign of it) or the judge's process may
    write it there; else ``bytecode/`` in the judge's cache root. An install without .pyc files whose folder
    is read-only, or whose user said PYTHONDONTWRITEBYTECODE (as images often do: this workplace's machines
    do), compiled torch, numpy and sympy from source in every fork server of every judge process: 3.4-4.6 s
    of torch's import on the H100's host (bench/cold_timeline.py). The folder is the judge's: no worker
    writes it (the sandbox's mount layer makes the cache root read-only outside a worker's own caches), nothing beside
    the sources is written, and Python checks each entry against its source's size and mtime as beside it."""
    import importlib.util

    from kernelfix.base.cache_dir import (  # the judge's cache root, as it passes it every child
        BYTECODE_CACHE,
        CACHE_ENV,
    )

    cache = os.environ.get(CACHE_ENV)
    if not cache or os.environ.get(NO_BYTECODE_CACHE_ENV):
        return None
    origin = _origin([n for n in preload if n == "torch"] or list(preload[:1]))
    if origin is None or os.path.exists(importlib.util.cache_from_source(origin)):
        return None
    if write_bytecode and os.access(os.path.dirname(origin), os.W_OK):
        return None
    return os.path.join(cache, BYTECODE_CACHE)


def warm_late(late: Sequence[str], prefix: str | None, sock_fd: int) -> int | None:
    """Write the bytecode of what this kind's workers import later (zygote.LATE_IMPORTS) into the judge's folder, from
    a child of this fork server, once: where the folder is in use and some of it is missing there. The child only
    imports (the judge's own code and the install's, before any candidate), at a low priority, and exits; its pid, for
    the loop to reap. Its imports are its own: nothing forked later inherits them, only reads their bytecode."""
    if prefix is None or not late or all(has_bytecode(name) for name in late):
        return None
    try:
        pid = os.fork()
    except OSError:
        return None  # the workers import from source, as before
    if pid != 0:
        return pid
    try:
        from kernelfix.sandbox import linux

        linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
        os.close(sock_fd)  # the judge's side sees EOF when this fork server ends, not when this child does
        os.nice(10)
        sys.pycache_prefix, sys.dont_write_bytecode = prefix, False
        for name in late:
            try:
                __import__(name)
            except Exception:
                pass
    finally:
        os._exit(0)


def has_bytecode(name: str) -> bool:
    """Whether ``name``'s bytecode is where this process reads it (``sys.pycache_prefix``), found without importing it."""
    import importlib.util

    top, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level package: found, not run
    except (ImportError, ValueError):
        return True  # not installed: nothing to write
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return True
    base = os.path.join(os.path.dirname(spec.origin), *rest)
    source = base + ".py" if os.path.exists(base + ".py") else os.path.join(base, "__init__.py")
    return not os.path.exists(source) or os.path.exists(importlib.util.cache_from_source(source))


def _origin(names: Sequence[str]) -> str | None:
    import importlib.util

    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            return spec.origin
    return None
