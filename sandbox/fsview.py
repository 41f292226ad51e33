"""The filesystem a sandboxed child sees, built in its own mount namespace.

Everything is read-only except the writable directories (the candidate's work
dir and the caches it must fill); hidden paths (the judge's private reference
dir, files that hold credentials) are covered by empty read-only mounts; /dev
holds only the harmless devices and the GPU's; /dev/shm is private. Child side
only: runs in ``kernelfix.sandbox.launch`` after ``unshare(CLONE_NEWNS)``.
Every read-only remount is a bind remount, so the host's mounts never change.
"""

from __future__ import annotations

import glob
import os
import re
import stat

from kernelfix.sandbox import linux

# What a candidate may open under /dev. Block devices, /dev/mem, /dev/kmsg and the
# like stay out: root without capabilities may still write to a disk it can open.
DEFAULT_DEVICES = ("null", "zero", "full", "random", "urandom", "tty", "nvidia*", "nvidia-caps", "dxg")
SHM_SIZE = "1g"
# /proc stays writable: the NVIDIA driver (570+) names its threads through
# /proc/self/task/<tid>/comm while CUDA starts, and a read-only /proc turns that into
# cudaErrorOperatingSystem (304). What a writable /proc would expose of the host is
# closed one path at a time, as container runtimes do.
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
PROC_HIDDEN = ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/kallsyms")


def _mountinfo() -> list[tuple[str, set[str]]]:
    """(mount point, per-mount options) for every mount in this namespace, in mount order."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])  # \040 is a space
            out.append((point, set(fields[5].split(","))))
    return out


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def make_private() -> None:
    """Nothing mounted here propagates back to the host."""
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)


def _minimal_dev(devices: tuple[str, ...] | list[str]) -> list[str]:
    """A fresh /dev holding only ``devices`` (globs under /dev), bound from the real ones."""
    keep = sorted({p for pat in devices for p in glob.glob(os.path.join("/dev", pat))})
    # O_PATH handles reach the real nodes after /dev is covered (bound through /proc/self/fd).
    fds = {p: os.open(p, os.O_PATH | os.O_NOFOLLOW) for p in keep if not os.path.islink(p)}
    try:
        linux.mount("tmpfs", "/dev", "tmpfs", linux.MS_NOSUID | linux.MS_NOEXEC, "mode=755,size=256k")
        try:
            for p, fd in fds.items():
                if stat.S_ISDIR(os.fstat(fd).st_mode):
                    os.makedirs(p, exist_ok=True)
                else:
                    os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o666))
                linux.mount(f"/proc/self/fd/{fd}", p, None, linux.MS_BIND | linux.MS_REC)
        except OSError:
            linux.umount("/dev")  # back to the full /dev rather than a half-built one
            raise
    finally:
        for fd in fds.values():
            os.close(fd)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"/dev/{name}")
    os.mkdir("/dev/shm")
    linux.mount("tmpfs", "/dev/shm", "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, f"mode=1777,size={SHM_SIZE}")
    return [os.path.basename(p) for p in keep]


def _hide(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        linux.mount(
            "tmpfs",
            path,
            "tmpfs",
            linux.MS_RDONLY | linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC,
            "mode=000,size=4k",
        )
    else:
        linux.mount("/dev/null", path, None, linux.MS_BIND)
        linux.mount(None, path, None, linux.MS_BIND | linux.MS_REMOUNT | linux.MS_RDONLY)


def build(writable: list[str], hidden: list[str], devices: list[str]) -> list[str]:
    """Set up the view in this (already unshared, private) mount namespace; returns notes on what fell short."""
    notes: list[str] = []
    writable = [os.path.realpath(w) for w in writable if os.path.isdir(w)]
    cwd = os.getcwd()
    try:
        _minimal_dev(devices)
    except OSError as e:
        notes.append(f"devices not restricted: building /dev failed: {e.strerror or e}")
    for w in writable:
        linux.mount(w, w, None, linux.MS_BIND | linux.MS_REC)
    hidden_points = []
    for h in hidden:
        h = os.path.realpath(h)
        if not os.path.lexists(h):
            continue
        if any(_under(w, [h]) for w in writable):
            notes.append(f"not hidden: {h} holds a writable directory")
            continue
        try:
            _hide(h)
            hidden_points.append(h)
        except OSError as e:
            notes.append(f"not hidden: {h}: {e.strerror or e}")
    keep_rw = [*writable, "/dev/shm", "/proc"]
    failed = []
    done = set()
    for point, opts in _mountinfo():
        if point in done or _under(point, keep_rw) or point in hidden_points:
            continue
        done.add(point)
        flags = linux.MS_BIND | linux.MS_REMOUNT | linux.MS_RDONLY
        for opt in opts:
            flags |= linux.MOUNT_OPTION_FLAGS.get(opt, 0)
        try:
            linux.mount(None, point, None, flags)
        except OSError as e:
            if os.path.exists(point):  # a mount shadowed by a later one (old /dev/pts) is unreachable anyway
                failed.append(f"{point} ({e.strerror or e})")
    if failed:
        notes.append("filesystem partly writable: could not make read-only " + ", ".join(failed[:5]))
    notes += protect_proc()
    os.chdir(cwd)  # the old cwd is on the (now read-only) parent mount; re-enter through the writable bind
    return notes


def protect_proc() -> list[str]:
    """Make /proc's host-wide knobs read-only and hide its kernel secrets; the rest stays writable (see PROC_READ_ONLY)."""
    failed = []
    for path in PROC_READ_ONLY:
        if not os.path.exists(path):
            continue
        try:
            linux.mount(path, path, None, linux.MS_BIND | linux.MS_REC)
            linux.mount(
                None,
                path,
                None,
                linux.MS_BIND | linux.MS_REMOUNT | linux.MS_RDONLY | linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC,
            )
        except OSError as e:
            failed.append(f"{path} ({e.strerror or e})")
    for path in PROC_HIDDEN:
        if not os.path.exists(path):
            continue
        try:
            _hide(path)
        except OSError as e:
            failed.append(f"{path} ({e.strerror or e})")
    return ["/proc not fully protected: " + ", ".join(failed)] if failed else []


def mount_proc() -> list[str]:
    """A /proc showing only this PID namespace; writable for the driver, its host-wide knobs read-only."""
    linux.mount("proc", "/proc", "proc", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC)
    return protect_proc()
