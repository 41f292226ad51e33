"""Where kernelfix keeps what outlives one evaluation: builds, compiler caches, stubs."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "KERNELFIX_CACHE"
LOCKS_ENV = "KERNELFIX_LOCKS"


def cache_root() -> Path:
    """``$KERNELFIX_CACHE``, else ``~/.cache/kernelfix``. The judge passes it to every child,
    whose HOME is its own working directory."""
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "kernelfix")
    root.mkdir(parents=True, exist_ok=True)
    return root


def lock_root() -> Path:
    """Where the GPU lease queues: ``$KERNELFIX_LOCKS``, else ``locks/`` in the cache. Judges that
    share a GPU must share this dir to be ordered, whatever caches they keep (a test with a cache of
    its own, a second user's cache): one lock dir per machine is what the variable is for."""
    root = Path(os.environ.get(LOCKS_ENV) or cache_root() / "locks")
    root.mkdir(parents=True, exist_ok=True)
    return root


# The parts of the cache that judged code writes: the CUDA build store and Triton's and
# Inductor's caches. The rest (the GPU lease's lock files and their hold log) stays
# read-only to every child, so a candidate cannot unlink a lock and time beside another run.
BUILD_CACHE, TRITON_CACHE, INDUCTOR_CACHE = "build", "triton", "inductor"
COMPILER_CACHES = (BUILD_CACHE, TRITON_CACHE, INDUCTOR_CACHE)
JUDGE_CACHE = "judge"  # the judge's own caches (baselines, the reference's compiler caches): never a candidate's
BYTECODE_CACHE = "bytecode"  # the fork servers' imports' bytecode (sandbox/fork_server.py): read-only to every child


def compiler_caches() -> list[Path]:
    """The cache dirs a judge's child may write, created (a bind mount needs its target)."""
    root = cache_root()
    dirs = [root / name for name in COMPILER_CACHES]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    return dirs


def judge_cache() -> Path:
    """The judge's own cache dir (baselines, the reference's compiler caches), created; no candidate sees it."""
    d = cache_root() / JUDGE_CACHE
    for sub in ("", INDUCTOR_CACHE, TRITON_CACHE, "baselines"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    return d
