"""A child's process tree as /proc shows it: its processes (wherever they moved), their threads and
resident memory, the machine's tasks and OOM kills, and the kill of the whole tree (sandbox/process.py watches
a child with these)."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence

from kernelfix.sandbox.cgroup import Cgroup


def tree_pids(root: int) -> list[int]:
    """The child's session (``root`` leads it) and all descendants of ``root``, wherever they moved."""
    parent: dict[int, int] = {}
    session: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name may hold spaces and parentheses: split after the last ')'
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 3:
            pid = int(entry.name)
            parent[pid], session[pid] = int(fields[1]), int(fields[3])
    found = {p for p, sid in session.items() if sid == root}
    if root in parent:
        found.add(root)
    grew = True
    while grew:
        new = {p for p, pp in parent.items() if pp in found and p not in found}
        found |= new
        grew = bool(new)
    return sorted(found)


def oom_kills() -> int | None:
    """The kernel's OOM kills since boot (/proc/vmstat): whether the machine, not a limit, killed a child."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def system_tasks() -> int | None:
    """Tasks (processes and threads) alive on the machine: one read of /proc/loadavg, cheap
    enough for every poll, so a fork bomb is noticed before it fills the machine."""
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().split()[3].split(b"/")[1])
    except (OSError, IndexError, ValueError):
        return None


def tree_tasks(pids: Sequence[int]) -> int:
    """Processes and threads of ``pids``: the count the pids cgroup would limit."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            total += int(stat[stat.rfind(b")") + 2 :].split()[17])  # num_threads
        except (OSError, IndexError, ValueError):
            total += 1
    return total


def rss_bytes(pids: Sequence[int]) -> int:
    """Resident memory of these processes, summed (what the memory watch counts)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
    return total


def kill_tree(root: int, cgroup: Cgroup | None) -> None:
    """Kill the child and everything it started: its process group, session, descendants and cgroup.

    Killing the launcher's init (PID 1 of the child's namespace) also kills every
    process in that namespace.
    """
    try:
        os.killpg(root, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in tree_pids(root):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if cgroup is not None:
        cgroup.kill_all()
