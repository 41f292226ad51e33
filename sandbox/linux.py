"""The Linux calls the launcher needs and Python 3.11 lacks: unshare, mount,
prctl, capset. Child side only (``kernelfix.sandbox.launch``), which is our
trusted code; every call raises OSError with the errno's name on failure.
"""

from __future__ import annotations

import ctypes
import errno
import os

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24

# per-mount options in /proc/self/mountinfo that a read-only remount must keep
MOUNT_OPTION_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
    "strictatime": MS_STRICTATIME,
}

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
# root gets no capabilities from exec or setuid, each bit locked so the child cannot undo it:
# NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE and their locks, KEEP_CAPS locked off
SECURE_NOROOT_ALL_LOCKED = 0b11101111

_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what} failed: {errno.errorcode.get(e, e)}")


_FLAG_NAMES = {
    CLONE_NEWNS: "CLONE_NEWNS",
    CLONE_NEWIPC: "CLONE_NEWIPC",
    CLONE_NEWUSER: "CLONE_NEWUSER",
    CLONE_NEWPID: "CLONE_NEWPID",
    CLONE_NEWNET: "CLONE_NEWNET",
}


def unshare(flags: int) -> None:
    names = "|".join(n for f, n in _FLAG_NAMES.items() if flags & f)
    _check(_libc.unshare(flags), f"unshare({names})")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


MNT_DETACH = 2


def umount(target: str, flags: int = MNT_DETACH) -> None:
    _check(_libc.umount2(os.fsencode(target), flags), f"umount {target}")


_PR_NAMES = {
    PR_SET_PDEATHSIG: "PR_SET_PDEATHSIG",
    PR_SET_DUMPABLE: "PR_SET_DUMPABLE",
    PR_CAPBSET_DROP: "PR_CAPBSET_DROP",
    PR_SET_SECUREBITS: "PR_SET_SECUREBITS",
    PR_SET_NO_NEW_PRIVS: "PR_SET_NO_NEW_PRIVS",
    PR_CAP_AMBIENT: "PR_CAP_AMBIENT",
}


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> None:
    _check(_libc.prctl(option, arg2, arg3, arg4, arg5), f"prctl({_PR_NAMES.get(option, option)})")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_all_capabilities() -> None:
    """No capability now or after any exec: bounding set, ambient, effective/permitted/inheritable.

    Root without capabilities can no longer remount, leave its namespaces'
    restrictions, load modules, trace or signal other users' processes, or
    reconfigure the network; no_new_privs keeps setuid programs from giving
    any of it back.
    """
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError as e:
            if e.errno != errno.EINVAL:  # EINVAL: a capability this kernel does not know
                raise
    prctl(PR_SET_SECUREBITS, SECURE_NOROOT_ALL_LOCKED)
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    hdr = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(hdr), data), "capset")
    prctl(PR_SET_NO_NEW_PRIVS, 1)
