"""Reading what a sandboxed child wrote: a regular file only, never through a link or a FIFO it planted."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def read_plain(path: Path, limit: int = 64 << 20) -> str:
    """A file the sandbox wrote, only if it is a regular file (not a link to the judge's files, not a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return f.read(limit).decode("utf-8", "replace")
