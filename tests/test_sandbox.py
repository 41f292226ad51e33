"""The child-process sandbox: limits, group kill, output caps, the message pipe, scrubbed env;
then each isolation layer seen from inside a real child: what it can write, see, reach and
start, and what is left of it afterwards. Small children (no torch), so these run in seconds.

Where this machine cannot give a layer (not root, no cgroups), the tests that need it skip with
the sandbox's own note; ``test_hostile`` fails instead on a root machine that lost a layer.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from proc_support import wait_gone

from kernelfix.sandbox import Isolation, Limits, probe, run_child, scrubbed_env
from kernelfix.sandbox.channel import ChildChannel, MessageReader, new_token


def py(code: str, tmp_path, **limits):
    return run_child([sys.executable, "-c", code], cwd=tmp_path, env=scrubbed_env(), limits=Limits(**limits))


def test_messages_arrive_on_the_pipe_not_stdout(tmp_path):
    code = "import os, json\nprint('noise')\nfd = int(os.environ['KERNELFIX_MSG_FD'])\nos.write(fd, b'{\"type\": \"result\", \"x\": 1}\\n')"
    out = py(code, tmp_path)
    assert out.returncode == 0 and out.stdout_tail.strip() == "noise"
    assert out.last("result")["x"] == 1 and out.last("result")["_t"] >= 0


def test_timeout_kills_the_whole_group(tmp_path):
    marker = tmp_path / "grandchild_alive"
    grandchild = tmp_path / "grandchild.py"
    grandchild.write_text(f"import time\ntime.sleep(3)\nopen({str(marker)!r}, 'w').write('x')\n")
    code = f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, {str(grandchild)!r}])\ntime.sleep(60)\n"
    t0 = time.monotonic()
    out = py(code, tmp_path, wall_s=1.5)
    assert out.timed_out and time.monotonic() - t0 < 10
    time.sleep(4)
    assert not marker.exists(), "a grandchild outlived the timeout"


def test_huge_output_is_drained_and_capped(tmp_path):
    out = py(
        "import sys\nfor _ in range(2000):\n    sys.stdout.write('x' * 100000)\n", tmp_path, output_tail_bytes=1000
    )
    assert out.returncode == 0 and out.stdout_bytes == 200_000_000
    assert len(out.stdout_tail) == 1000


def test_memory_limit_kills(tmp_path):
    code = "b = []\nwhile True:\n    b.append(bytearray(50 << 20))\n"
    out = py(code, tmp_path, wall_s=60, memory_bytes=400 << 20)
    assert out.memory_exceeded and out.peak_rss_bytes > 400 << 20


def test_signals_are_reported(tmp_path):
    out = py("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", tmp_path)
    assert out.signal == "SIGSEGV" and out.returncode < 0


def test_cpu_limit(tmp_path):
    out = py("while True:\n    pass\n", tmp_path, wall_s=30, cpu_s=1)
    assert out.signal in ("SIGXCPU", "SIGKILL") and not out.timed_out


def test_garbage_on_the_pipe_is_recorded_not_fatal(tmp_path):
    code = "import os\nfd = int(os.environ['KERNELFIX_MSG_FD'])\nos.write(fd, b'not json\\n[1, 2]\\n')"
    out = py(code, tmp_path)
    assert [m["type"] for m in out.messages] == ["garbage", "garbage"]


def test_env_is_scrubbed_of_secrets():
    env = scrubbed_env(
        {"KERNELFIX_X": "1"},
        base={
            "PATH": "/bin",
            "OPENAI_API_KEY": "sk-1",
            "HOME": "/root",
            "CUDA_VISIBLE_DEVICES": "0",
            "GITHUB_TOKEN": "t",
            "TRITON_API_TOKEN": "t",
        },
    )
    assert env["PATH"] == "/bin" and env["CUDA_VISIBLE_DEVICES"] == "0" and env["KERNELFIX_X"] == "1"
    assert (
        "OPENAI_API_KEY" not in env
        and "GITHUB_TOKEN" not in env
        and "TRITON_API_TOKEN" not in env
        and "HOME" not in env
    )


def test_launch_failure_is_reported(tmp_path):
    out = run_child(["/nonexistent/binary"], cwd=tmp_path, env=scrubbed_env(), limits=Limits())
    assert out.returncode != 0
    assert os.path.exists(tmp_path)


# ------------------------------------------------------------------ isolation layers

# PYTHONPATH too: on the device kernelfix is found through it
_BASE_ENV = {k: os.environ[k] for k in ("PATH", "PYTHONPATH") if k in os.environ}


def _needs(*layers: str) -> None:
    report = probe()
    missing = [layer for layer in layers if not report.layers.get(layer)]
    if missing:
        pytest.skip(f"this machine does not give {missing}: {'; '.join(report.notes)}")


def _run(code: str, workdir: Path, *, isolation: Isolation | None = None, env: dict | None = None, **limits):
    lim = {"wall_s": 30.0, "memory_bytes": 1 << 30, "max_processes": 64, **limits}
    return run_child(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=workdir,
        env={**_BASE_ENV, **(env or {})},
        limits=Limits(**lim),
        isolation=isolation if isolation is not None else Isolation(writable=[str(workdir)]),
    )


def test_probe_reports_every_layer_with_a_note_for_each_missing_one():
    report = probe()
    assert set(report.layers) == {"network", "pid", "filesystem", "capabilities", "cgroup"}
    for layer, active in report.layers.items():
        if not active:
            assert any(layer in n or "cgroup" in n for n in report.notes), (layer, report.notes)


def test_isolation_off_sets_up_nothing(tmp_path):
    out = _run("print('hi')", tmp_path, isolation=Isolation.off())
    assert out.returncode == 0 and out.stdout_tail == "hi\n"
    assert not any(out.isolation.values()) and out.sandbox_notes == []


def test_filesystem_is_read_only_outside_the_writable_dirs(tmp_path):
    _needs("filesystem")
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (outside / "canary").write_text("intact")
    out = _run(
        f"""
        import os, errno
        results = []
        for action in (lambda: open({str(outside / "canary")!r}, 'a').write('x'),
                       lambda: os.remove({str(outside / "canary")!r}),
                       lambda: open({str(outside / "new")!r}, 'w'),
                       lambda: os.mkdir('/var/tmp/kernelfix-escape'),
                       lambda: open('/etc/kernelfix-escape', 'w')):
            try:
                action(); results.append('WROTE')
            except OSError as e:
                results.append(errno.errorcode[e.errno])
        open('mine.txt', 'w').write('ok')  # its own dir, relative to its cwd
        open('/dev/shm/scratch', 'w').write('ok')
        print(results)
        """,
        work,
        isolation=Isolation(writable=[str(work)]),
    )
    assert out.returncode == 0, out.stderr_tail
    assert out.stdout_tail.strip() == str(["EROFS"] * 5)
    assert (outside / "canary").read_text() == "intact" and not (outside / "new").exists()
    assert (work / "mine.txt").read_text() == "ok"
    assert not Path("/etc/kernelfix-escape").exists() and not Path("/var/tmp/kernelfix-escape").exists()


def test_hidden_paths_cannot_be_read(tmp_path):
    _needs("filesystem", "capabilities")
    work, private = tmp_path / "work", tmp_path / "private"
    work.mkdir()
    private.mkdir()
    (private / "reference.pt").write_text("answers")
    secret = tmp_path / "id_rsa"
    secret.write_text("KEY")
    out = _run(
        f"""
        import os
        try:
            print(os.listdir({str(private)!r}))
        except OSError as e:
            print('dir', type(e).__name__)
        print('file', repr(open({str(secret)!r}).read()))
        """,
        work,
        isolation=Isolation(writable=[str(work)], hidden=[str(private), str(secret)]),
    )
    assert out.stdout_tail.splitlines() == ["dir PermissionError", "file ''"], out.stderr_tail


def test_dev_holds_only_harmless_devices(tmp_path):
    _needs("filesystem")
    out = _run("import os; print(sorted(os.listdir('/dev')))", tmp_path)
    devs = set(eval(out.stdout_tail))
    assert {"null", "zero", "urandom", "shm"} <= devs
    assert not any(d.startswith(("sd", "vd", "nvme", "loop", "mem", "kmsg", "port")) for d in devs), devs


def test_network_is_unreachable(tmp_path):
    _needs("network")
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        out = _run(
            f"""
            import socket
            try:
                socket.create_connection(('127.0.0.1', {port}), timeout=3); print('connected')
            except OSError as e:
                print(e.errno)
            """,
            tmp_path,
        )
    finally:
        server.close()
    import errno

    assert out.stdout_tail.strip() == str(errno.ENETUNREACH), out.stdout_tail + out.stderr_tail


def test_pid_namespace_hides_and_shields_the_parent(tmp_path):
    _needs("pid", "filesystem")
    out = _run(
        """
        import os, signal
        print(os.getppid(), sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))
        for pid in (os.getppid(), 1):
            os.kill(pid, signal.SIGKILL)  # init of the namespace ignores it
        print('alive')
        """,
        tmp_path,
    )
    lines = out.stdout_tail.splitlines()
    assert lines == ["1 [1, 2]", "alive"], out.stdout_tail + out.stderr_tail
    assert out.returncode == 0


def test_proc_lets_a_thread_name_itself_but_not_the_host_be_changed(tmp_path):
    """The NVIDIA driver writes /proc/self/task/<tid>/comm while CUDA starts (read-only /proc: error 304)."""
    _needs("pid", "filesystem")
    out = _run(
        """
        import os, threading
        path = f'/proc/self/task/{threading.get_native_id()}/comm'
        with open(path, 'w') as f:
            f.write('kf-probe')
        print(open(path).read().strip())
        for knob in ('/proc/sys/kernel/hostname', '/proc/sysrq-trigger'):
            try:
                with open(knob, 'w') as f:
                    f.write('x')
                print('wrote', knob)
            except OSError as e:
                print(knob, e.errno)
        print(len(open('/proc/kallsyms').read()) if os.path.exists('/proc/kallsyms') else 0)
        """,
        tmp_path,
    )
    import errno

    lines = out.stdout_tail.splitlines()
    assert lines[:2] == ["kf-probe", f"/proc/sys/kernel/hostname {errno.EROFS}"], out.stdout_tail + out.stderr_tail
    assert lines[2] in (f"/proc/sysrq-trigger {errno.EROFS}", f"/proc/sysrq-trigger {errno.ENOENT}"), lines[
        2
    ]  # absent on some kernels
    assert lines[3] == "0", "kallsyms is hidden"


def test_no_capabilities_and_no_way_back(tmp_path):
    _needs("capabilities", "filesystem")
    out = _run(
        """
        import subprocess
        caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapBnd', 'CapPrm'))]
        print(caps)
        r = subprocess.run(['mount', '-o', 'remount,rw', '/'], capture_output=True)
        print(r.returncode != 0)
        """,
        tmp_path,
    )
    assert out.stdout_tail.splitlines() == [str(["0000000000000000"] * 3), "True"], out.stdout_tail + out.stderr_tail


def test_environment_is_what_the_parent_passed(tmp_path):
    out = _run("import os; print(sorted(os.environ))", tmp_path, env={"TRITON_CACHE_DIR": "/x"})
    names = set(eval(out.stdout_tail))
    assert names <= {"PATH", "PYTHONPATH", "TRITON_CACHE_DIR", "KERNELFIX_MSG_FD", "LC_CTYPE"}, names


@pytest.mark.parametrize("isolated", [True, False], ids=["sandbox", "fallback"])
def test_nothing_the_child_started_outlives_it(tmp_path, isolated):
    marker = f"{time.time_ns() % 10**9}.5"  # a unique sleep duration to find leftovers by
    out = _run(
        f"""
        import os, time
        if os.fork() == 0:
            os.setsid()  # leaves the session: a classic daemon
            if os.fork() == 0:
                os.execvp('sleep', ['sleep', {marker!r}])
            os._exit(0)
        time.sleep(0.3)
        print('parent leaves')
        """,
        tmp_path,
        isolation=Isolation(writable=[str(tmp_path)]) if isolated else Isolation.off(),
    )
    assert out.stdout_tail == "parent leaves\n"
    time.sleep(0.2)
    left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True).stdout.split()
    for pid in left:  # clean up before failing
        os.kill(int(pid), signal.SIGKILL)
    if not isolated and left:
        pytest.xfail("without a PID namespace or cgroup a setsid'd grandchild escapes the session kill")
    assert not left


def test_memory_limit_kills_and_says_so(tmp_path):
    out = _run("x = []\nwhile True: x.append(bytearray(32 << 20))", tmp_path, memory_bytes=256 << 20)
    assert out.memory_exceeded and out.returncode != 0


def test_process_limit_refuses_a_fork_bomb(tmp_path):
    _needs("cgroup")
    out = _run(
        """
        import os
        n = 0
        for _ in range(500):
            try:
                if os.fork() == 0:
                    import time; time.sleep(30)
                n += 1
            except OSError:
                break
        print(n)
        """,
        tmp_path,
        max_processes=32,
    )
    assert out.process_limit_hit
    assert int(out.stdout_tail) < 32


def test_process_limit_without_a_cgroup_is_a_watchdog(tmp_path):
    """Where no pids cgroup can be had (the lent GPU machine delegates none), the watchdog
    stops a fork bomb: 512 sleepers against a limit of 64."""
    marker = f"{time.time_ns() % 10**9}.25"  # in every bomb process's command line, to find leftovers by
    out = _run(
        f"""
        import os, time
        for _ in range(9):
            os.fork()
        time.sleep({marker})
        """,
        tmp_path,
        max_processes=64,
        isolation=Isolation(writable=[str(tmp_path)], cgroup=False),
    )
    time.sleep(0.2)
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    for pid in left:  # clean up before failing
        os.kill(int(pid), signal.SIGKILL)
    assert out.process_limit_hit and not out.timed_out, out
    assert out.wall_s < 20
    assert not left, f"{len(left)} processes of the bomb outlived the child"


def test_output_limit_kills_a_flood(tmp_path):
    out = _run("import sys\nwhile True: sys.stdout.write('x' * 65536)", tmp_path, output_limit_bytes=4 << 20)
    assert out.output_exceeded and out.timed_out is False
    assert out.stdout_bytes >= 4 << 20 and len(out.stdout_tail) <= 64 << 10


def test_wall_limit(tmp_path):
    out = _run("while True: pass", tmp_path, wall_s=1.0)
    assert out.timed_out and out.signal == "SIGKILL"


def test_signal_of_the_command_is_relayed(tmp_path):
    _needs("pid")
    out = _run("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", tmp_path)
    assert out.signal == "SIGSEGV"


def test_forged_messages_are_told_apart(tmp_path):
    """The trusted child reads its token first; whatever writes the pipe without it is a forger."""
    code = textwrap.dedent(
        """
        import os
        from kernelfix.sandbox.channel import ChildChannel, MSG_FD_ENV
        chan = ChildChannel.open()
        chan.send('hello')
        os.write(int(os.environ[MSG_FD_ENV]), b'{"type": "result", "forged": true}\\n')
        os.write(int(os.environ[MSG_FD_ENV]), b'{"type": "sandbox", "layers": {}}\\n')
        chan.send('result', ok=True)
        """
    )
    out = run_child(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=_BASE_ENV,
        limits=Limits(wall_s=30),
        isolation=Isolation(writable=[str(tmp_path)]),
        authenticate=True,
    )
    assert [m["type"] for m in out.messages] == ["hello", "result"], out.stderr_tail
    assert out.last("result") == {"type": "result", "ok": True, "_t": out.last("result")["_t"]}
    assert len(out.forged_messages) == 2  # the late "sandbox" report too: only the launcher's, first, is trusted


def test_message_reader_keeps_the_launcher_report_only_before_the_child_speaks():
    token = new_token()
    r, w = os.pipe()
    reader = MessageReader(r, time.monotonic(), token, None)
    os.write(w, b'{"type": "sandbox", "layers": {"network": true}}\n')
    chan = ChildChannel(w, token)
    chan.send("hello")
    os.write(w, b"no token at all\n")
    os.close(w)
    reader.thread.join(5)
    assert [m["type"] for m in reader.items] == ["sandbox", "hello"]
    assert reader.forged == ["no token at all"]


_GPU_PROBE = r"""
import json, os, subprocess, sys, tempfile
out = {}
import torch
out["cuda"] = torch.cuda.is_available()
x = torch.randn(1 << 20, device="cuda")
out["sum_ok"] = abs((x * 2).sum().item() - 2 * x.sum().item()) < 1.0
import triton, triton.language as tl

@triton.jit
def add_one(p, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    tl.store(p + o, tl.load(p + o, mask=m) + 1.0, mask=m)

y = torch.zeros(4096, device="cuda")
add_one[(4,)](y, y.numel(), BLOCK=1024)
out["triton_ok"] = bool((y == 1).all().item())
src = os.path.join(os.environ["TMPDIR"], "k.cu")
open(src, "w").write("__global__ void k(float* p) { p[threadIdx.x] = 1.f; }\n")
r = subprocess.run(["nvcc", "-c", src, "-o", src + ".o"], capture_output=True, text=True)
out["nvcc_ok"] = r.returncode == 0 and os.path.exists(src + ".o")
out["nvcc_err"] = r.stderr[-300:]
out["devices"] = sorted(os.listdir("/dev"))
print(json.dumps(out))
"""


@pytest.mark.gpu
def test_cuda_triton_and_nvcc_work_inside_the_full_sandbox(tmp_path):
    """On the device: every layer asked for, and the GPU, Triton's JIT and nvcc still work."""
    from kernelfix.sandbox import scrubbed_env

    (tmp_path / "tmp").mkdir()
    (tmp_path / "cache").mkdir()
    env = scrubbed_env(
        {"HOME": str(tmp_path / "tmp"), "TMPDIR": str(tmp_path / "tmp"), "TRITON_CACHE_DIR": str(tmp_path / "cache")}
    )
    probe = tmp_path / "tmp" / "probe.py"  # a file, not -c: Triton's @jit reads its function's source
    probe.write_text(_GPU_PROBE)
    out = run_child(
        [sys.executable, str(probe)],
        cwd=tmp_path,
        env=env,
        limits=Limits(wall_s=300, memory_bytes=32 << 30),
        isolation=Isolation(writable=[str(tmp_path / "tmp"), str(tmp_path / "cache")]),
    )
    print(f"\nsandbox on the device: layers={out.isolation} notes={out.sandbox_notes}")
    assert out.returncode == 0, out.stderr_tail[-3000:]
    res = json.loads(out.stdout_tail.strip().splitlines()[-1])
    print(f"inside: {res}")
    assert res["cuda"] and res["sum_ok"] and res["triton_ok"], res
    assert res["nvcc_ok"], res["nvcc_err"]
    assert (
        out.isolation.get("network")
        and out.isolation.get("pid")
        and out.isolation.get("filesystem")
        and out.isolation.get("capabilities")
    ), out.sandbox_notes


def test_without_privileges_each_layer_falls_back_with_a_note(tmp_path):
    """Root without capabilities cannot unshare or drop anything: the judge still judges, and the
    verdict's warnings say, one line per layer, what was not isolated."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to take the capabilities away")
    corpus = Path(__file__).parent / "corpus"
    r = subprocess.run(
        [
            "setpriv",
            "--bounding-set=-all",
            "--inh-caps=-all",
            "--ambient-caps=-all",
            sys.executable,
            "-m",
            "kernelfix",
            "eval",
            str(corpus / "tasks" / "relu.py"),
            str(corpus / "candidates" / "triton_relu_ok.py"),
            "--device",
            "cpu",
            "--trials",
            "2",
            "--json",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "KERNELFIX_CACHE": str(tmp_path / "cache")},
    )
    verdict = json.loads(r.stdout)
    assert verdict["category"] == "ok", r.stderr[-2000:]
    notes = [w for w in verdict["warnings"] if w.startswith("sandbox: ")]
    assert "sandbox: network not isolated: unshare(CLONE_NEWNET) failed: EPERM" in notes, notes
    for what in ("filesystem not isolated", "processes not isolated", "capabilities not dropped"):
        assert any(what in n for n in notes), (what, notes)
    assert "sandbox:" not in verdict["feedback"]


def test_stale_cgroups_of_dead_judges_are_swept():
    _needs("cgroup")
    from kernelfix.sandbox import cgroup

    cg, _ = cgroup.Cgroup.create(memory_bytes=1 << 30, max_pids=16)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    stale = [d.parent / f"{cgroup.PREFIX}{dead}-0000" for d in cg.dirs.values()]
    for d in stale:
        d.mkdir()
    try:
        assert cgroup.sweep_stale() >= len(stale)
        assert not any(d.exists() for d in stale)
        assert all(d.exists() for d in cg.dirs.values())  # a live judge's group stays
    finally:
        cg.remove()
    assert not any(d.exists() for d in cg.dirs.values())


@pytest.mark.parametrize("isolated", [True, False], ids=["sandbox", "fallback"])
def test_a_stage_dies_with_its_judge(tmp_path, isolated):
    """kill -9 of the judge mid-stage: the stage's processes go too, they do not run on unowned."""
    marker = f"{time.time_ns() % 10**9}.25"
    iso = "Isolation(writable=[d])" if isolated else "Isolation.off()"
    judge = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys
        from kernelfix.sandbox import Isolation, Limits, run_child
        d = {str(tmp_path)!r}
        run_child(["sleep", {marker!r}], cwd=d, env={{"PATH": "/usr/bin:/bin"}}, limits=Limits(wall_s=120), isolation={iso})
        """),
        ]
    )

    def running(pattern: str) -> list[str]:
        return subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()

    # The stage itself, exec'd (the launcher's own command line, still starting Python, names the command too).
    deadline = time.monotonic() + 30
    while not running(f"^sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running(f"^sleep {marker}"), "the stage never started"
    stage = running(f"sleep {marker}")
    judge.kill()
    judge.wait()
    # the kernel's death signal, delivered at once; 5 s for a loaded machine
    left = [pid for pid in stage if not wait_gone(int(pid), 5)] + [
        p for p in running(f"sleep {marker}") if p not in stage
    ]
    for pid in left:
        os.kill(int(pid), signal.SIGKILL)
    assert not left


def test_gpu_settings_keep_every_layer_that_cuda_survives(monkeypatch):
    """The search behind for_gpu, against a machine where the PID and mount namespaces each break CUDA."""
    from kernelfix.sandbox import isolation, probes

    tried = []

    def fake_cuda_runs(iso, python):
        tried.append(iso)
        ok = not (iso.pid or iso.filesystem)
        return ok, "" if ok else "RuntimeError: ... Error 304"

    monkeypatch.setattr(probes, "_cuda_runs", fake_cuda_runs)
    probes._gpu_known.clear()
    chosen, note = probes.for_gpu(Isolation(writable=["/w"]), python="py-a")
    assert (chosen.network, chosen.capabilities, chosen.cgroup, chosen.pid, chosen.filesystem) == (
        True,
        True,
        True,
        False,
        False,
    )
    assert chosen.writable == ["/w"]
    assert "without its pid, filesystem layer(s)" in note and "Error 304" in note
    n = len(tried)
    probes.for_gpu(Isolation(writable=["/other"]), python="py-a")
    assert len(tried) == n, "probed once per settings and interpreter, whatever the writable dirs"

    monkeypatch.setattr(probes, "_cuda_runs", lambda iso, python: (True, ""))
    probes._gpu_known.clear()
    assert probes.for_gpu(Isolation(), python="py-b") == (Isolation(), None)

    monkeypatch.setattr(
        probes, "_cuda_runs", lambda iso, python: (not any(getattr(iso, k) for k in isolation.LAYERS), "no")
    )
    probes._gpu_known.clear()
    chosen, note = probes.for_gpu(Isolation(), python="py-c")
    assert not any(getattr(chosen, k) for k in isolation.LAYERS) and "without isolation" in note
    probes._gpu_known.clear()


def test_gpu_settings_are_checked_once_per_boot(monkeypatch, tmp_path):
    """A cold process reads the check's answer from the judge's cache (the check starts CUDA in a
    child: seconds of a cold eval); a reboot or another driver checks again; a torn record is ignored."""
    from kernelfix.sandbox import probes

    tried = []
    monkeypatch.setattr(probes, "_cuda_runs", lambda iso, python: (tried.append(iso) or not iso.pid, "Error 304"))
    machine = ["boot-1"]
    monkeypatch.setattr(probes, "_machine_id", lambda: machine[0])

    def cold_process():
        probes._gpu_known.clear()
        return probes.for_gpu(Isolation(), python="py-rec", record_dir=tmp_path)

    first = cold_process()
    assert not first[0].pid and "pid" in first[1]
    n = len(tried)
    assert n > 1 and cold_process() == first and len(tried) == n, "read back, not checked again"
    machine[0] = "boot-2"
    assert cold_process() == first and len(tried) == 2 * n, "another boot: checked again"
    for rec in tmp_path.glob("gpu-layers-*.json"):
        rec.write_text("{torn")
    assert cold_process() == first and len(tried) == 3 * n
    probes._gpu_known.clear()
