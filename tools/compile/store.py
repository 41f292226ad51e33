"""[judge, candidate worker, one-shot child] A content-addressed directory store, safe across processes.

``Store(root).get(key)`` is a finished entry or None. ``lock(key)`` is an
exclusive file lock (released by the kernel if the holder dies, so a killed
build never wedges the next one). ``publish(key, fill)`` lets ``fill`` write a
private directory and renames it into place in one step: readers see a whole
entry or none. Entries are never modified after publishing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def digest(*parts: Any) -> str:
    """sha256 over a JSON rendering of ``parts`` (bytes are hashed first)."""
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, (bytes, bytearray)):
            h.update(b"b" + hashlib.sha256(p).digest())
        else:
            h.update(b"j" + json.dumps(p, sort_keys=True, default=str).encode())
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Store:
    def __init__(self, root: Path):
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str) -> Path | None:
        p = self.path(key)
        return p if p.is_dir() else None

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        locks = self.root / ".locks"
        locks.mkdir(exist_ok=True)
        with open(locks / f"{key}.lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def put_file(self, key: str, src: Path) -> None:
        """Publish one file with its checksum; a failure (full disk) only loses the cache entry."""

        def fill(d: Path) -> None:
            shutil.copyfile(src, d / src.name)
            (d / "meta.json").write_text(json.dumps({"file": src.name, "sha256": file_sha256(d / src.name)}))

        try:
            self.publish(key, fill)
        except OSError:
            pass

    def fetch_file(self, key: str, dst: Path) -> bool:
        """Copy the entry's file to ``dst`` (atomically) if it is there and its checksum holds."""
        entry = self.get(key)
        if entry is None:
            return False
        try:
            meta = json.loads((entry / "meta.json").read_text())
            src = entry / meta["file"]
            if file_sha256(src) != meta["sha256"]:
                return False  # torn or tampered with; see discard
            tmp = dst.with_name(f".{dst.name}.{uuid.uuid4().hex[:8]}")
            shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return True

    def discard(self, key: str) -> None:
        """Remove an entry (one that failed its checksum), so a rebuild can take its place.
        Call under the key's lock."""
        entry = self.get(key)
        if entry is not None:
            shutil.rmtree(entry, ignore_errors=True)

    def publish(self, key: str, fill: Callable[[Path], None]) -> Path:
        """Create the entry from what ``fill(tmpdir)`` writes; if another process won the race, keep theirs."""
        final = self.path(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.root / ".tmp" / f"{key}.{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        try:
            fill(tmp)
            try:
                os.rename(tmp, final)
            except OSError:
                if not final.is_dir():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return final
