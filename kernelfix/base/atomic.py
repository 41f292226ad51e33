"""Files that are never half-written: a reader sees the old version or the new one,
whenever the writer is killed (kill -9 included) and, after fsync, across power loss.

    write_text(path, text)          # temp file in the same dir, fsync, rename over, fsync the dir
    write_json(path, model_or_obj)
    with replacing(path) as f: ...  # streaming writers (parquet, plots): same guarantees
    append_line(path, json_line)    # JSONL logs: a torn last line is cut off before the next append
    read_lines(path)                # complete lines only

A full disk, a read-only or unwritable directory raises :class:`StorageError`
with a message a user can act on; the previous version of the file is left as it
was and no temp file remains.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

_TEMP_SUFFIX = ".kftmp"

_REASONS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOENT: "the directory does not exist",
    errno.ENOTDIR: "a parent of it is not a directory",
    errno.EISDIR: "it is a directory",
}


class StorageError(OSError):
    """A write that could not be done; ``str()`` says where, why, and that nothing was damaged."""

    def __init__(self, path: Path, cause: OSError, *, intact: bool = True):
        self.path, self.cause = path, cause
        reason = _REASONS.get(cause.errno or 0, cause.strerror or str(cause))
        code = errno.errorcode.get(cause.errno or 0, "?")
        tail = "; the previous version is intact" if intact and path.exists() else ""
        super().__init__(cause.errno, f"cannot write {path}: {reason} ({code}){tail}")

    def __str__(self) -> str:
        return self.strerror or ""


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _new_file_mode(path: Path) -> int:
    """An existing file's permissions, else what the umask gives a new file."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
    except OSError as e:
        raise StorageError(path, e) from None


@contextmanager
def replacing(path: str | Path, *, fsync: bool = True) -> Iterator[IO[bytes]]:
    """A binary file to write ``path``'s new content into; it replaces ``path`` when the block
    ends normally; when the block raises it is removed, and when the process dies it stays as a
    hidden temp file (:func:`remove_stale_temps`); ``path`` is untouched in both cases.
    For writers that stream to a file object (pyarrow, matplotlib, large JSONL)."""
    path = Path(path)
    mode = _new_file_mode(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}{_TEMP_SUFFIX}")
    try:
        f = open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb")
    except OSError as e:
        raise StorageError(path, e) from None
    try:
        with f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())  # ENOSPC can surface only here, on some file systems
        os.replace(tmp, path)
        if fsync:
            _fsync_dir(path.parent)
    except BaseException as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        if isinstance(e, OSError) and not isinstance(e, StorageError):
            raise StorageError(path, e) from None
        raise


def write_bytes(path: str | Path, data: bytes, *, fsync: bool = True) -> None:
    """Replace ``path``'s content with ``data``, all or nothing. Keeps an existing file's permissions."""
    with replacing(path, fsync=fsync) as f:
        f.write(data)


def write_text(path: str | Path, text: str, *, encoding: str = "utf-8", fsync: bool = True) -> None:
    write_bytes(path, text.encode(encoding), fsync=fsync)


def write_json(path: str | Path, obj: Any, *, indent: int | None = 2, fsync: bool = True) -> None:
    """A pydantic model (its JSON) or any JSON-serializable object."""
    text = (
        obj.model_dump_json(indent=indent)
        if hasattr(obj, "model_dump_json")
        else json.dumps(obj, indent=indent, default=str)
    )
    write_text(path, text + "\n", fsync=fsync)


def append_line(path: str | Path, line: str, *, fsync: bool = True) -> None:
    """Append one line (no newline inside) to a log of lines, e.g. JSONL.

    A writer killed mid-append leaves a torn last line; it is cut off here before
    the new line goes in, so the torn bytes never merge into a later record.
    """
    if "\n" in line:
        raise ValueError("append_line takes a single line")
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
    except OSError as e:
        raise StorageError(path, e) from None
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            size = _last_newline_end(fd, size)
            os.ftruncate(fd, size)
        data = (line + "\n").encode()
        written = 0
        try:
            while written < len(data):
                written += os.write(fd, data[written:])
            if fsync:
                os.fsync(fd)
        except OSError:
            os.ftruncate(fd, size)  # no torn line of ours left behind
            raise
    except OSError as e:
        raise StorageError(path, e) from None
    finally:
        os.close(fd)


def _last_newline_end(fd: int, size: int) -> int:
    """The offset just past the last newline in the file (0 when there is none)."""
    pos = size
    while pos > 0:
        start = max(0, pos - 65536)
        chunk = os.pread(fd, pos - start, start)
        i = chunk.rfind(b"\n")
        if i >= 0:
            return start + i + 1
        pos = start
    return 0


def read_lines(path: str | Path) -> list[str]:
    """The complete lines of a log written with :func:`append_line` (a torn last line is left out)."""
    data = Path(path).read_bytes()
    end = data.rfind(b"\n") + 1
    return data[:end].decode("utf-8").splitlines()


def remove_stale_temps(directory: str | Path, older_than_s: float = 3600.0) -> int:
    """Delete temp files that writers killed mid-write left behind; returns how many."""
    n = 0
    cutoff = time.time() - older_than_s
    for p in Path(directory).glob(f".*{_TEMP_SUFFIX}"):
        try:
            if p.stat().st_mtime < cutoff:
                p.unlink()
                n += 1
        except OSError:
            pass
    return n
