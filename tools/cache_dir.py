"""Where kernelfix keeps what outlives one evaluation: builds, compiler caches, stubs."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "KERNELFIX_CACHE"


def cache_root() -> Path:
    """``$KERNELFIX_CACHE``, else ``~/.cache/kernelfix``. The judge passes it to every child,
    whose HOME is its own working directory."""
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "kernelfix")
    root.mkdir(parents=True, exist_ok=True)
    return root
