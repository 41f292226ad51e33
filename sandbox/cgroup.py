"""A cgroup per child: a hard memory limit, a process-count limit, and a way to
kill everything the child started, wherever it moved.

cgroup v1 (a hierarchy per controller, as on our CI machines) and v2 (one
unified hierarchy with the controllers delegated to us). Parent side: the
parent creates the groups, the launcher joins them before it does anything
else, and the parent reads what happened and removes them. Where neither
works, ``create`` returns None and a note; ``run_child`` then falls back to
its RSS watchdog and process-session kill.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

from pydantic import BaseModel

PREFIX = "kernelfix-"
_swept = False


class CgroupStats(BaseModel):
    oom_kills: int = 0
    pids_limit_hits: int = 0  # forks refused at the process-count limit
    peak_memory_bytes: int = 0


def _mounts() -> dict[str, Path]:
    """Controller name -> mount point (v1), and "unified" -> the v2 mount."""
    out: dict[str, Path] = {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        fields = line.split()
        sep = fields.index("-")
        fstype, opts = fields[sep + 1], fields[sep + 3].split(",")
        point = Path(fields[4])
        if fstype == "cgroup2":
            out.setdefault("unified", point)
        elif fstype == "cgroup":
            for ctl in ("memory", "pids"):
                if ctl in opts:
                    out.setdefault(ctl, point)
    return out


def _own_paths() -> dict[str, str]:
    """This process's cgroup per v1 controller, and "unified" for v2 (from /proc/self/cgroup)."""
    out: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        hid, ctls, path = line.split(":", 2)
        if hid == "0" and ctls == "":
            out["unified"] = path
        for ctl in ctls.split(","):
            if ctl in ("memory", "pids"):
                out[ctl] = path
    return out


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _read_keyed(path: Path) -> dict[str, int]:
    out = {}
    try:
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if v.strip().lstrip("-").isdigit():
                out[k] = int(v)
    except OSError:
        pass
    return out


class Cgroup:
    """One child's cgroup(s). ``procs_files`` is what the launcher writes its pid into."""

    def __init__(self, dirs: dict[str, Path], version: int):
        self.dirs = dirs  # controller -> directory (v2: both map to the same directory)
        self.version = version

    @property
    def procs_files(self) -> list[str]:
        return sorted({str(d / "cgroup.procs") for d in self.dirs.values()})

    @classmethod
    def create(cls, *, memory_bytes: int | None, max_pids: int | None) -> tuple["Cgroup | None", list[str]]:
        """A fresh, uniquely named cgroup under this process's own (so outer limits still apply)."""
        global _swept
        if not _swept:  # groups of judges that were killed before they could remove theirs
            _swept = True
            sweep_stale()
        name = f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        mounts, own = _mounts(), _own_paths()
        wanted = [c for c, v in (("memory", memory_bytes), ("pids", max_pids)) if v is not None]
        if not wanted:
            return None, []
        if all(c in mounts for c in wanted):
            return cls._create_v1(name, mounts, own, memory_bytes, max_pids, wanted)
        if "unified" in mounts:
            return cls._create_v2(name, mounts["unified"], own.get("unified", "/"), memory_bytes, max_pids, wanted)
        return None, ["no memory or process-count cgroup: limits fall back to watchdogs (RSS, task count)"]

    @classmethod
    def _create_v1(cls, name, mounts, own, memory_bytes, max_pids, wanted) -> tuple["Cgroup | None", list[str]]:
        dirs: dict[str, Path] = {}
        notes = []
        for ctl in wanted:
            d = mounts[ctl] / own.get(ctl, "/").lstrip("/") / name
            try:
                d.mkdir()
                dirs[ctl] = d
                if ctl == "memory":
                    (d / "memory.limit_in_bytes").write_text(str(memory_bytes))
                    memsw = d / "memory.memsw.limit_in_bytes"
                    if memsw.exists():  # no escape into swap
                        memsw.write_text(str(memory_bytes))
                else:
                    (d / "pids.max").write_text(str(max_pids))
            except OSError as e:
                notes.append(
                    f"no {ctl} cgroup ({e.strerror or e}): "
                    + (
                        "memory limit falls back to an RSS watchdog"
                        if ctl == "memory"
                        else "process count falls back to a task-count watchdog"
                    )
                )
                dirs.pop(ctl, None)
                _rmdir(d)
        return (cls(dirs, 1) if dirs else None), notes

    @classmethod
    def _create_v2(cls, name, mount, own, memory_bytes, max_pids, wanted) -> tuple["Cgroup | None", list[str]]:
        parent = mount / own.lstrip("/")
        try:
            available = set((parent / "cgroup.subtree_control").read_text().split())
            missing = [c for c in wanted if c not in available]
            if missing:
                # Enabling controllers for children fails (EBUSY) while our own group holds processes.
                (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in missing))
            d = parent / name
            d.mkdir()
        except OSError as e:
            return None, [
                f"no cgroup v2 delegation under {parent} ({e.strerror or e}): memory and process limits fall back to watchdogs (RSS, task count)"
            ]
        try:
            if memory_bytes is not None:
                (d / "memory.max").write_text(str(memory_bytes))
                if (d / "memory.swap.max").exists():
                    (d / "memory.swap.max").write_text("0")
            if max_pids is not None:
                (d / "pids.max").write_text(str(max_pids))
        except OSError as e:
            _rmdir(d)
            return None, [
                f"cgroup v2 limits not settable ({e.strerror or e}): memory and process limits fall back to watchdogs (RSS, task count)"
            ]
        return cls({c: d for c in wanted}, 2), []

    @property
    def limits_memory(self) -> bool:
        return "memory" in self.dirs

    @property
    def limits_pids(self) -> bool:
        return "pids" in self.dirs

    def pids(self) -> list[int]:
        out: set[int] = set()
        for d in self.dirs.values():
            try:
                out.update(int(x) for x in (d / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return sorted(out)

    def stats(self) -> CgroupStats:
        s = CgroupStats()
        mem, pids = self.dirs.get("memory"), self.dirs.get("pids")
        if self.version == 1:
            if mem is not None:
                s.oom_kills = _read_keyed(mem / "memory.oom_control").get("oom_kill", 0)
                s.peak_memory_bytes = _read_int(mem / "memory.max_usage_in_bytes")
            if pids is not None:
                s.pids_limit_hits = _read_keyed(pids / "pids.events").get("max", 0)
        else:
            d = mem or pids
            if mem is not None:
                s.oom_kills = _read_keyed(d / "memory.events").get("oom_kill", 0)
                s.peak_memory_bytes = _read_int(d / "memory.peak")
            if pids is not None:
                s.pids_limit_hits = _read_keyed(d / "pids.events").get("max", 0)
        return s

    def kill_all(self, timeout_s: float = 5.0) -> None:
        """SIGKILL every process in the group until none is left (or the timeout)."""
        if self.version == 2:
            kill = next(iter(self.dirs.values())) / "cgroup.kill"
            if kill.exists():
                try:
                    kill.write_text("1")
                except OSError:
                    pass
        deadline = time.monotonic() + timeout_s
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.01)

    def remove(self) -> None:
        """Kill what is left, then remove the group (retrying while dying processes exit)."""
        self.kill_all()
        for d in set(self.dirs.values()):
            _rmdir(d, retry_s=2.0)


def _rmdir(d: Path, retry_s: float = 0.0) -> None:
    deadline = time.monotonic() + retry_s
    while True:
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.02)


def sweep_stale() -> int:
    """Remove empty kernelfix cgroups left by judges that died (their pid, in the name, is gone)."""
    removed = 0
    mounts, own = _mounts(), _own_paths()
    parents = {mounts[c] / own.get(c, "/").lstrip("/") for c in ("memory", "pids") if c in mounts}
    if "unified" in mounts:
        parents.add(mounts["unified"] / own.get("unified", "/").lstrip("/"))
    for parent in parents:
        try:
            entries = list(parent.glob(f"{PREFIX}*"))
        except OSError:
            continue
        for d in entries:
            try:
                owner = int(d.name[len(PREFIX) :].split("-")[0])
            except ValueError:
                continue
            if owner != os.getpid() and not Path(f"/proc/{owner}").exists():
                _rmdir(d)
                removed += not d.exists()
    return removed
