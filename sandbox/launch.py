"""Put a child in its sandbox, then exec its command.

Run as ``main([SPEC_JSON, "--", CMD...])`` in a fresh interpreter by
``run_child``; runs in the child after fork, holding no locks and no threads.
In order, each layer where the platform allows it (else a one-line note):

0. die with the parent (the judge) if it dies;
1. join the stage's cgroups (memory and process-count limits, kill-all);
2. rlimits: CPU time, file size, open files, no core dumps;
3. namespaces: network (no interfaces but a downed loopback), mount (see
   ``fsview``), PID + IPC (the command cannot see or signal anything outside,
   and nothing it starts outlives it);
4. no capabilities, no_new_privs: root inside cannot undo any of the above.

With a PID namespace the launcher forks a small init (PID 1) that forks and
execs the command, reaps orphans and, when the command ends, exits, which
kills everything left in the namespace; the launcher relays the command's exit
status or signal as its own. What was set up goes to the parent as the first
message on the message pipe (``{"type": "sandbox", ...}``).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from collections.abc import Callable

from kernelfix.sandbox import fsview, linux
from kernelfix.sandbox.channel import LAUNCHER_MESSAGE, MSG_FD_ENV

LAYERS = ("network", "pid", "filesystem", "capabilities")


def _rlimit(kind: int, value: int) -> None:
    soft, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    try:
        resource.setrlimit(kind, (value, value if hard == resource.RLIM_INFINITY else hard))
    except (ValueError, OSError):
        pass


def _join_cgroups(procs_files: list[str], notes: list[str]) -> None:
    for path in procs_files:
        try:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        except OSError as e:
            notes.append(f"cgroup not joined: {path}: {e.strerror or e}")


class _Setup:
    def __init__(self, iso: dict):
        self.iso = iso
        self.active = {k: False for k in LAYERS}
        self.notes: list[str] = []

    def note(self, layer: str, why: str) -> None:
        self.notes.append(f"{_WHAT[layer]}: {why}")

    def namespaces(self) -> None:
        want = {k for k in ("network", "pid", "filesystem") if self.iso.get(k)}
        if not want:
            return
        if os.geteuid() != 0:
            self._user_namespace()
        flags = {
            "network": linux.CLONE_NEWNET,
            "pid": linux.CLONE_NEWPID | linux.CLONE_NEWIPC,
            "filesystem": linux.CLONE_NEWNS,
        }
        need_ns = "filesystem" in want or "pid" in want  # a PID namespace needs its own /proc
        combined = sum(flags[k] for k in want) | (linux.CLONE_NEWNS if need_ns else 0)
        try:
            linux.unshare(combined)
            got = set(want)
            mount_ns = need_ns
        except OSError:
            got, mount_ns = set(), False
            if need_ns:
                try:
                    linux.unshare(linux.CLONE_NEWNS)
                    mount_ns = True
                except OSError as e:
                    for k in ("filesystem", "pid"):
                        if k in want:
                            self.note(k, e.strerror)
            for k in ("network", "pid"):
                if k not in want or (k == "pid" and not mount_ns):
                    continue
                try:
                    linux.unshare(flags[k])
                    got.add(k)
                except OSError as e:
                    self.note(k, e.strerror)
            if "filesystem" in want and mount_ns:
                got.add("filesystem")
        if mount_ns:
            try:
                fsview.make_private()
            except OSError as e:  # without this, mounts below would reach the host: stop here
                raise SystemExit(f"kernelfix sandbox: cannot make mounts private: {e}") from None
        for k in got:
            self.active[k] = True
        if self.active["filesystem"]:
            try:
                self.notes += fsview.build(
                    self.iso.get("writable", []),
                    self.iso.get("hidden", []),
                    self.iso.get("devices") or list(fsview.DEFAULT_DEVICES),
                )
            except OSError as e:
                self.active["filesystem"] = False
                self.note("filesystem", e.strerror or str(e))

    def _user_namespace(self) -> None:
        """Not root: namespaces need a user namespace, where this user is root."""
        uid, gid = os.geteuid(), os.getegid()
        try:
            linux.unshare(linux.CLONE_NEWUSER)
            with open("/proc/self/setgroups", "w") as f:
                f.write("deny")
            with open("/proc/self/uid_map", "w") as f:
                f.write(f"0 {uid} 1")
            with open("/proc/self/gid_map", "w") as f:
                f.write(f"0 {gid} 1")
        except OSError as e:
            self.notes.append(
                f"no user namespace for a non-root user ({e.strerror or e}): namespaces below will likely fail"
            )

    def drop_capabilities(self) -> None:
        if not self.iso.get("capabilities"):
            return
        try:
            linux.drop_all_capabilities()
            self.active["capabilities"] = True
        except OSError as e:
            self.note("capabilities", e.strerror or str(e))

    def report(self) -> None:
        """The first message on the pipe, before any of the command's code runs."""
        fd = os.environ.get(MSG_FD_ENV)
        if fd is None:
            return
        line = json.dumps({"type": LAUNCHER_MESSAGE, "layers": self.active, "notes": self.notes}) + "\n"
        try:
            os.write(int(fd), line.encode())
        except OSError:
            pass


_WHAT = {
    "network": "network not isolated",
    "pid": "processes not isolated (the candidate can see and signal other processes)",
    "filesystem": "filesystem not isolated (the candidate can write outside its work dir)",
    "capabilities": "capabilities not dropped (root in the sandbox can undo its limits)",
}


def _exec(cmd: list[str]) -> None:
    try:
        os.execvp(cmd[0], cmd)
    except OSError as e:
        print(f"kernelfix sandbox: cannot run {cmd[0]}: {e}", file=sys.stderr)
        os._exit(127)


def reset_signals() -> None:
    for sig in range(1, signal.NSIG):
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass


def _init(setup: _Setup, run: Callable[[], None], status_w: int) -> None:
    """PID 1 of the namespace: start the command, reap orphans, leave with it."""
    try:
        linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
        try:
            setup.notes += fsview.mount_proc()
        except OSError as e:
            setup.notes.append(f"/proc shows the host's processes: {e}")
        setup.drop_capabilities()
        linux.prctl(linux.PR_SET_DUMPABLE, 0)  # the candidate cannot read this process's memory
        reset_signals()  # signals from inside the namespace to an init without handlers are dropped
        pid = os.fork()
        if pid == 0:
            os.close(status_w)
            os.setsid()  # kill(0, ...) by the candidate reaches its own group only
            linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
            setup.report()
            _run(run)
        os.close(0)
        while True:
            try:
                got, status = os.waitpid(-1, 0)
            except ChildProcessError:
                os._exit(0)
            if got == pid:
                os.write(status_w, status.to_bytes(4, "little"))
                os._exit(0)
    except BaseException as e:  # never return into the launcher's code as PID 1
        print(f"kernelfix sandbox: init failed: {e}", file=sys.stderr)
        os._exit(125)


def _relay(init_pid: int, status_r: int) -> None:
    """The launcher's exit: the command's status, re-raised when it was a signal."""
    _, status = os.waitpid(init_pid, 0)
    data = os.read(status_r, 4)
    if len(data) == 4:
        status = int.from_bytes(data, "little")
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 125)


def enter(spec: dict, run: Callable[[], None]) -> None:
    """Set up every layer ``spec`` asks for in this (fresh, single-threaded) process, then ``run``
    the command where the layers hold: ``run`` execs it (``main``), or, in a child of the fork
    server (``kernelfix.sandbox.zygote``), runs it in the already-imported interpreter. Never returns."""
    # The stage dies with whoever started it (the judge's spawner thread, or the fork server).
    linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
    if spec.get("parent_pid") and os.getppid() != spec["parent_pid"]:
        os._exit(125)  # the parent died before the line above took effect
    iso = spec.get("isolation") or {}
    setup = _Setup(iso)
    _join_cgroups(spec.get("cgroup_procs") or [], setup.notes)
    lim = spec.get("rlimits") or {}
    _rlimit(resource.RLIMIT_CORE, 0)  # a crashing kernel must not write gigabytes of core
    for kind, key in (
        (resource.RLIMIT_CPU, "cpu_s"),
        (resource.RLIMIT_FSIZE, "file_size_bytes"),
        (resource.RLIMIT_NOFILE, "open_files"),
    ):
        if lim.get(key) is not None:
            _rlimit(kind, int(lim[key]))
    setup.namespaces()
    if not setup.active["pid"]:
        setup.drop_capabilities()
        setup.report()
        _run(run)
    status_r, status_w = os.pipe()
    init_pid = os.fork()
    if init_pid == 0:
        os.close(status_r)
        _init(setup, run, status_w)
    os.close(status_w)
    os.close(0)
    _relay(init_pid, status_r)


def _run(run: Callable[[], None]) -> None:
    try:
        run()
    except SystemExit as e:
        code = e.code
        os._exit(code if isinstance(code, int) else (0 if code is None else 1))
    except BaseException:
        import traceback

        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m kernelfix.sandbox.launch SPEC_JSON -- CMD...", file=sys.stderr)
        os._exit(2)
    cmd = argv[2:]
    enter(json.loads(argv[0]), lambda: _exec(cmd))


if __name__ == "__main__":
    main(sys.argv[1:])
