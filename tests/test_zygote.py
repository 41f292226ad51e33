"""The fork server (kernelfix.sandbox.zygote): a worker forked from it starts as an exec'd one would,
inside the same sandbox, and the zygote itself holds nothing a candidate could use.

Each test compares with the exec path where it can: the same probe, once started each way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from proc_support import wait_gone

from kernelfix.sandbox import Isolation, Limits, fork_base, fork_cuda, probe, scrubbed_env, zygote
from kernelfix.sandbox.process import Child, run_child

# What a worker sees of its own start: everything here must be the same forked or exec'd.
PROBE = r"""
import json, os, resource, signal, socket, sys, tempfile
fd = int(os.environ["KERNELFIX_MSG_FD"])
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
def writes(path):
    try:
        open(path, "w").close()
        return "wrote"
    except OSError as e:
        return type(e).__name__
try:
    socket.create_connection(("127.0.0.1", 9), timeout=1)
    net = "connected"
except OSError as e:
    net = type(e).__name__
knobs = sys.modules.get("triton.knobs")
info = {
    "argv": sys.argv, "name": __name__, "cwd": os.getcwd(), "path0": sys.path[0], "env": dict(os.environ),
    "tmp": tempfile.gettempdir(), "home": os.path.expanduser("~"),
    "fds": sorted(int(x) for x in os.listdir("/proc/self/fd")),
    "session_leader": os.getsid(0) == os.getpid(), "pid_namespace": os.getpid() < 10,
    "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
    "sigpipe": signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN,
    "sigterm": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, "sigchld": signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL,
    "caps": status["CapEff"].strip(), "no_new_privs": status["NoNewPrivs"].strip(),
    "rlimits": [resource.getrlimit(r) for r in (resource.RLIMIT_CPU, resource.RLIMIT_FSIZE, resource.RLIMIT_NOFILE, resource.RLIMIT_CORE)],
    "write_outside": writes("/etc/kernelfix-zygote-probe"), "write_own": writes(os.path.join(os.getcwd(), "mine.txt")),
    "net": net, "dev": sorted(os.listdir("/dev")),
    "triton_home": knobs.cache.home_dir if knobs is not None else os.path.expanduser("~/"),
    "preloaded": "torch" in sys.modules,
}
os.write(fd, (json.dumps({"type": "probe", **info}) + "\n").encode())
"""

SECRET = "sk-zygote-test-do-not-leak"
# The fork server that imports least (numpy, torch, the candidate worker's module; not Triton, the C++ extension
# machinery or sympy, ~2 CPU-s less to start): for the tests of how fork servers and bases die and are replaced, which
# hold for every kind. Each of those starts one or two anew.
LIGHT = "torch"


def _start(
    tmp_path: Path, *, fork: bool, isolation: Isolation | None = None, code: str = PROBE, wall_s: float = 60.0, **extra
):
    (tmp_path / "probe_mod.py").write_text(code)
    env = scrubbed_env({"HOME": str(tmp_path), "TMPDIR": str(tmp_path), "TRITON_CACHE_DIR": str(tmp_path / "triton")})
    iso = isolation if isolation is not None else Isolation(writable=[str(tmp_path)])
    return Child(
        [sys.executable, "-m", "probe_mod", "arg1"],
        cwd=tmp_path,
        env=env,
        limits=Limits(wall_s=wall_s, memory_bytes=4 << 30),
        isolation=iso,
        fork=fork,
        **extra,
    )


def _probe(tmp_path: Path, fork: bool, isolation: Isolation | None = None, **extra) -> dict:
    child = _start(tmp_path, fork=fork, isolation=isolation, **extra)
    out = child.wait()
    assert child.forked is fork
    got = out.last("probe")
    assert out.returncode == 0 and got is not None, out.stderr_tail[-3000:]
    got.pop("_t")
    msg_fd = int(got["env"].pop("KERNELFIX_MSG_FD"))  # the pipe's number in the judge, kept in the child
    got["fds"] = ["msg" if fd == msg_fd else fd for fd in got["fds"]][:4]  # the last one is listdir's own
    return {"isolation": out.isolation, "notes": out.sandbox_notes, **got}


@pytest.mark.parametrize("layers", ["sandbox", "off", "off-sigint-ignored"])
def test_a_forked_worker_starts_as_an_execd_one_would(tmp_path, layers):
    if layers == "off-sigint-ignored":
        # A judge that a shell started in the background ignores SIGINT, and an exec'd child without
        # a PID namespace (no init to reset it) inherits that: so must a forked one (CI met this).
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            _compare(tmp_path, Isolation.off(), "off")
        finally:
            signal.signal(signal.SIGINT, previous)
        return
    iso = Isolation(writable=[str(tmp_path / "x")]) if layers == "sandbox" else Isolation.off()
    _compare(tmp_path, iso, layers)


def _compare(tmp_path, iso, layers):
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    execd = _probe(tmp_path / "x", False, iso)
    forked = _probe(tmp_path / "y" if layers == "off" else tmp_path / "x", True, iso)
    assert forked.pop("preloaded") is True and execd.pop("preloaded") is False
    if layers == "off":  # two dirs, so two sets of paths; everything else the same
        forked = json.loads(json.dumps(forked).replace(str(tmp_path / "y"), str(tmp_path / "x")))
    assert forked == execd
    if layers == "sandbox" and probe().has("filesystem", "pid", "network", "capabilities"):
        assert forked["write_outside"] == "OSError" or forked["write_outside"].endswith("Error")
        assert forked["write_own"] == "wrote" and forked["pid_namespace"] and forked["caps"] == "0000000000000000"
        assert forked["net"] != "connected" and not any(d.startswith(("sd", "nvme", "mem")) for d in forked["dev"])


def test_the_zygote_holds_no_secret_and_passes_none(tmp_path, monkeypatch):
    """The judge's environment holds a key; neither the zygote nor a forked worker sees it."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("KERNELFIX_API_TOKEN", SECRET)
    forked = _probe(tmp_path, True)
    assert SECRET not in json.dumps(forked["env"])
    zygotes = list(zygote._zygotes.values())
    assert zygotes and zygote._bases
    for z in [*zygotes, *zygote._bases.values()]:  # the fork servers, and the base they were forked from
        pid = z.pid if isinstance(z, zygote.Zygote) else z.proc.pid
        assert pid is not None
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert SECRET.encode() not in environ


def test_exit_codes_signals_and_timeouts_are_relayed(tmp_path):
    exits = _start(tmp_path, fork=True, code="import sys; sys.exit(7)").wait()
    assert exits.returncode == 7 and exits.signal is None
    crash = _start(tmp_path, fork=True, code="import os, signal; os.kill(os.getpid(), signal.SIGSEGV)").wait()
    assert crash.signal == "SIGSEGV"
    marker = tmp_path / "grandchild_alive"
    grandchild = tmp_path / "grandchild.py"
    grandchild.write_text(f"import time\ntime.sleep(3)\nopen({str(marker)!r}, 'w').write('x')\n")
    hang = f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, {str(grandchild)!r}])\ntime.sleep(60)\n"
    t0 = time.monotonic()
    out = _start(tmp_path, fork=True, code=hang, wall_s=2.0).wait()
    assert out.timed_out and time.monotonic() - t0 < 15
    time.sleep(4)
    assert not marker.exists(), "a grandchild outlived the timeout"


def test_an_exit_before_the_caller_registers_it_is_not_lost(tmp_path):
    for _ in range(5):  # a child that ends at once, its exit reported while fork() still returns
        assert _start(tmp_path, fork=True, code="pass").wait().returncode == 0


def test_a_forked_childs_exit_wakes_its_watcher(tmp_path):
    # Polled once a minute, its exit is still recorded at once: the fork server's report wakes the watcher
    # (every verdict waits for its candidate worker's exit, sandbox/process.py).
    child = _start(tmp_path, fork=True, code="pass", poll_s=60.0)
    assert child.forked and child.ended(30.0) and child.wait().returncode == 0


def test_a_childs_sandbox_notes_are_known_before_it_ends(tmp_path):
    # A verdict that goes back before its worker's exit (kernelfix.Judge(keep_files=False)) takes them from here.
    up = "import os, time\nos.write(int(os.environ['KERNELFIX_MSG_FD']), b'{\"type\": \"up\"}\\n')\ntime.sleep(60)\n"
    child = _start(tmp_path, fork=True, code=up)
    msg, _ = child.wait_message(["up"])  # its code runs after the launcher's report
    assert msg is not None and msg["type"] == "up"
    before = child.sandbox_notes()
    child.kill()
    assert before == child.wait().sandbox_notes


def test_a_dead_zygote_ends_its_children_and_is_replaced(tmp_path):
    child = _start(tmp_path, fork=True, code="import time; time.sleep(60)", fork_kind=LIGHT)
    z = next(z for z in zygote._zygotes.values() if z.alive and child.proc.pid in z._procs)
    assert z.pid is not None
    os.kill(z.pid, signal.SIGKILL)
    t0 = time.monotonic()
    out = child.wait()
    assert out.returncode is not None and out.returncode < 0 and time.monotonic() - t0 < 10
    again = _probe(tmp_path, True, fork_kind=LIGHT)  # a new zygote starts
    assert again["preloaded"]
    assert any(z.alive and z.pid != child.proc.pid for z in zygote._zygotes.values())


def test_a_forked_worker_dies_with_its_judge(tmp_path):
    """kill -9 of the judge: its zygote dies, and with it every worker forked from it."""
    pidfile = tmp_path / "worker.pid"
    judge = subprocess.Popen(
        [
            sys.executable,
            "-P",  # kernelfix as installed, not the checkout's kernelfix/ folder (a non-editable install, as on the GPU machine)
            "-c",
            textwrap.dedent(f"""
        import sys
        from kernelfix.sandbox import Isolation, Limits, run_child, scrubbed_env
        d = {str(tmp_path)!r}
        code = "import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
        run_child([sys.executable, "-c", code], cwd=d, env=scrubbed_env({{"HOME": d, "TMPDIR": d}}), limits=Limits(wall_s=120),
                  isolation=Isolation.off(), fork=True, fork_kind={LIGHT!r})
        """),
        ]
    )
    deadline = time.monotonic() + 60
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    worker = int(pidfile.read_text())
    assert Path(f"/proc/{worker}").exists()
    judge.kill()
    judge.wait()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{worker}").exists() and time.monotonic() < deadline:
        status = Path(f"/proc/{worker}/status").read_text() if Path(f"/proc/{worker}/status").exists() else ""
        if "State:\tZ" in status:
            break
        time.sleep(0.1)
    alive = Path(f"/proc/{worker}/status").exists() and "State:\tZ" not in Path(f"/proc/{worker}/status").read_text()
    if alive:
        os.kill(worker, signal.SIGKILL)
    assert not alive, "a forked worker outlived its judge"


def test_what_the_zygote_cannot_run_starts_by_exec(tmp_path):
    out = run_child(
        ["/bin/sh", "-c", "echo plain"], cwd=tmp_path, env=scrubbed_env(), limits=Limits(wall_s=30), fork=True
    )
    assert out.returncode == 0 and out.stdout_tail == "plain\n"


def test_no_preload_starts_the_cuda_driver(monkeypatch):
    """While the zygote imports, torch.cuda.is_available() (asked by torch.utils.cpp_extension at
    import) is answered from the device files, not by the driver (which would mark every fork bad),
    and torch's own answer is back afterwards."""
    import types

    asked = []
    cuda = types.SimpleNamespace(is_available=lambda: asked.append("driver") or True)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    original = cuda.is_available
    with fork_cuda.DriverlessAvailability():
        assert cuda.is_available() is os.path.exists("/dev/nvidiactl")
    assert asked == [] and cuda.is_available is original


MODULES_PROBE = r"""
import json, os, sys
wanted = ["torch", "triton", "torch.utils.cpp_extension", "torch._dynamo"]
os.write(int(os.environ["KERNELFIX_MSG_FD"]), (json.dumps({"type": "modules", **{m: m in sys.modules for m in wanted}}) + "\n").encode())
"""


@pytest.mark.parametrize("kind", ["triton", "cuda"])
def test_a_candidates_fork_server_imports_what_its_language_needs(tmp_path, kind):
    """A Triton candidate's worker starts with Triton and without the C++ extension machinery; a CUDA one
    the reverse; neither with torch._dynamo (docs/judge.md, "A cold kernelfix eval")."""
    child = _start(tmp_path, fork=True, isolation=Isolation.off(), code=MODULES_PROBE, fork_kind=kind)
    out = child.wait()
    got = out.last("modules")
    assert child.forked and got is not None, out.stderr_tail[-2000:]
    assert got["torch"] and not got["torch._dynamo"]
    assert (got["triton"], got["torch.utils.cpp_extension"]) == ((True, False) if kind == "triton" else (False, True))


def test_the_candidates_language_picks_its_fork_server():
    pick = zygote.kind_for_candidate
    assert pick("import triton\n@triton.jit\ndef k(x): tl.load(x)") == "triton"
    assert pick("from torch.utils.cpp_extension import load_inline\nsrc = '__global__ void k() {}'") == "cuda"
    assert pick("import triton\nfrom torch.utils.cpp_extension import load_inline") == "candidate"
    assert pick("import torch\nclass ModelNew: pass") == "torch"
    assert pick(None) == "candidate"  # started ahead: the candidate is not written yet
    assert "torch._dynamo" not in zygote.PRELOADS["reference"]


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def test_a_judges_fork_servers_are_forked_from_one_base_that_imported_torch(tmp_path):
    """Each kind's fork server (a Triton candidate's, a CUDA one's) is a child of one base process per environment,
    which imported torch once for them all (fork_base.Base): the kinds import only their own modules."""
    for kind in ("triton", "cuda"):
        child = _start(tmp_path, fork=True, isolation=Isolation.off(), code=MODULES_PROBE, fork_kind=kind)
        assert child.wait().returncode == 0 and child.forked
    env = scrubbed_env({"HOME": str(tmp_path), "TMPDIR": str(tmp_path), "TRITON_CACHE_DIR": str(tmp_path / "triton")})
    servers = [zygote._zygotes[zygote.key(sys.executable, env, kind)] for kind in ("triton", "cuda")]
    assert all(z.alive and z.pid is not None for z in servers)
    parents = {_parent(z.pid) for z in servers}
    assert len(parents) == 1
    (base,) = parents
    assert base in {b.proc.pid for b in zygote._bases.values() if b.alive}
    assert "libtorch" in Path(f"/proc/{base}/maps").read_text()


def test_a_dead_base_ends_its_fork_servers_and_the_next_worker_starts_from_a_new_one(tmp_path):
    child = _start(tmp_path, fork=True, code="import time; time.sleep(60)", fork_kind=LIGHT)
    z = next(z for z in zygote._zygotes.values() if z.alive and child.proc.pid in z._procs)
    assert z.pid is not None
    base = _parent(z.pid)
    os.kill(base, signal.SIGKILL)
    out = child.wait()
    assert out.returncode is not None and out.returncode < 0
    assert _probe(tmp_path, True, fork_kind=LIGHT)["preloaded"]
    fresh = [z for z in zygote._zygotes.values() if z.alive and z.pid is not None]
    assert fresh and all(_parent(z.pid) != base for z in fresh)


def test_a_base_that_cannot_start_leaves_the_fork_server_to_start_by_exec(tmp_path):
    from kernelfix.sandbox.spawner import import_path, spawn

    env = scrubbed_env({"HOME": str(tmp_path), "TMPDIR": str(tmp_path)})
    base = fork_base.Base(
        str(tmp_path / "no-python-here"), env, import_path(), str(tmp_path), spawn, zygote.BASE_PRELOAD
    )
    assert not base.alive and base.error and "cannot start" in base.error
    z = zygote.Zygote(sys.executable, env, import_path(), str(tmp_path), spawn, ("numpy",), base=base)
    try:
        assert z.proc is not None and z.ready.wait(60)  # exec'd; no torch among its preloads, so it says so and exits
        assert z.pid == z.proc.pid and "torch did not import" in (z.error or "")
    finally:
        z.close()


def test_shutdown_ends_every_fork_server_and_base_of_the_process(tmp_path):
    """Closing this side ends the peer even while a reader thread is blocked on the socket (a close alone did not:
    the fork servers lived on until the judge's process exited)."""
    assert _probe(tmp_path, True, fork_kind=LIGHT)["preloaded"]
    pids = [z.pid for z in zygote._zygotes.values() if z.alive and z.pid is not None]
    pids += [b.proc.pid for b in zygote._bases.values() if b.alive]
    assert pids
    zygote.shutdown()
    deadline = time.monotonic() + 30
    assert [p for p in pids if not wait_gone(p, max(0.0, deadline - time.monotonic()))] == []
    assert _probe(tmp_path, True, fork_kind=LIGHT)["preloaded"]  # the next worker starts a new one
