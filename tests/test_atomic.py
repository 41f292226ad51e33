"""kernelfix.base.atomic under the failures it exists for: kill -9 at any moment, a full disk,
a read-only or unwritable directory. Real processes, real file systems (a small tmpfs in a
private mount namespace), no simulated errors."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernelfix.base import atomic
from kernelfix.sandbox import Isolation, Limits, run_child


def test_write_read_back_and_keep_permissions(tmp_path):
    p = tmp_path / "state.json"
    atomic.write_json(p, {"turn": 1})
    p.chmod(0o600)
    atomic.write_json(p, {"turn": 2})
    assert json.loads(p.read_text()) == {"turn": 2}
    assert p.stat().st_mode & 0o777 == 0o600
    assert [q.name for q in tmp_path.iterdir()] == ["state.json"]


def test_write_json_takes_pydantic_models(tmp_path):
    from kernelfix.tools.verdict import Category, Verdict

    v = Verdict(category=Category.OK, task="relu", device="cpu")
    atomic.write_json(tmp_path / "v.json", v)
    assert Verdict.model_validate_json((tmp_path / "v.json").read_text()) == v


def test_replacing_streams_and_leaves_the_old_file_when_the_writer_fails(tmp_path):
    p = tmp_path / "export.jsonl"
    atomic.write_text(p, "old\n")
    with pytest.raises(RuntimeError, match="writer broke"):
        with atomic.replacing(p) as f:
            f.write(b"half a ")
            raise RuntimeError("writer broke")
    assert p.read_text() == "old\n"
    with atomic.replacing(p) as f:
        for i in range(3):
            f.write(f"{i}\n".encode())
    assert p.read_text() == "0\n1\n2\n"
    assert [q.name for q in tmp_path.iterdir()] == ["export.jsonl"]


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(atomic.StorageError, match="the directory does not exist"):
        atomic.write_text(tmp_path / "nope" / "f.txt", "x")


def _in_private_mount_ns(code: str) -> dict:
    """Run ``code`` as root in its own mount namespace (mounts vanish with it); it prints one JSON object."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare to mount a small file system")
    r = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if r.returncode == 77:
        pytest.skip(f"cannot mount here: {r.stderr.strip()[-200:]}")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_full_disk_and_read_only_dir_leave_the_old_version(tmp_path):
    res = _in_private_mount_ns(
        f"""
        import json, os, subprocess, sys
        from pathlib import Path
        from kernelfix.base import atomic
        d = Path({str(tmp_path)!r}) / "small"
        d.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(d)]).returncode:
            sys.exit(77)
        out = {{}}
        f = d / "trajectory.json"
        atomic.write_text(f, "old")
        try:
            atomic.write_bytes(f, os.urandom(1 << 20))
        except atomic.StorageError as e:
            out["full"] = str(e)
        try:
            atomic.append_line(d / "log.jsonl", "x" * (1 << 20))
        except atomic.StorageError as e:
            out["full_append"] = str(e)
        out["after_full"] = [f.read_text(), sorted(p.name for p in d.iterdir()), (d / "log.jsonl").read_bytes().decode()]
        subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
        try:
            atomic.write_text(f, "new")
        except atomic.StorageError as e:
            out["ro"] = str(e)
        out["after_ro"] = f.read_text()
        print(json.dumps(out))
        """
    )
    assert "the disk is full (ENOSPC); the previous version is intact" in res["full"]
    assert "the disk is full (ENOSPC)" in res["full_append"]
    assert res["after_full"] == ["old", ["log.jsonl", "trajectory.json"], ""]  # no temp file, no torn line
    assert "the file system is read-only (EROFS); the previous version is intact" in res["ro"]
    assert res["after_ro"] == "old"


def test_unwritable_dir_is_permission_denied(tmp_path):
    """Root without capabilities (the sandbox's) in a directory another user owns: a real EACCES."""
    d = tmp_path / "theirs"
    d.mkdir()
    (d / "f.txt").write_text("old")
    os.chown(d, 65534, 65534)
    out = run_child(
        [
            sys.executable,
            "-c",
            f"from kernelfix.base import atomic\ntry:\n    atomic.write_text({str(d / 'f.txt')!r}, 'new')\nexcept atomic.StorageError as e:\n    print(e)",
        ],
        cwd=tmp_path,
        env={k: os.environ[k] for k in ("PATH", "PYTHONPATH") if k in os.environ},
        limits=Limits(wall_s=30),
        isolation=Isolation(network=False, pid=False, filesystem=False, cgroup=False, capabilities=True),
    )
    if not out.isolation.get("capabilities"):
        pytest.skip(f"cannot drop capabilities here: {out.sandbox_notes}")
    if os.geteuid() != 0:
        pytest.skip("the directory's owner is the test's user")
    assert "permission denied (EACCES); the previous version is intact" in out.stdout_tail, out.stderr_tail
    assert (d / "f.txt").read_text() == "old"


_WRITER = """
import hashlib, os, sys
from kernelfix.base import atomic
path, n = sys.argv[1], 0
print("ready", flush=True)
while True:
    n += 1
    body = os.urandom(1 << 21)
    atomic.write_bytes(path, hashlib.sha256(body).hexdigest().encode() + b"\\n" + body)
"""

_APPENDER = """
import json, os, sys
from kernelfix.base import atomic
n = 0
print("ready", flush=True)
while True:
    n += 1
    atomic.append_line(sys.argv[1], json.dumps({"n": n, "pad": "x" * 200000}), fsync=n % 4 == 0)
"""


def _kill_at_random(script: str, path: Path, rounds: int, rng: random.Random) -> None:
    for _ in range(rounds):
        p = subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE)
        assert p.stdout is not None
        # Killed anywhere in its first writes (a write of the checkpoint takes ~50 ms, an append ~4 ms), once it says
        # its imports are done: a fixed guess at its import time missed the loop on a loaded machine, and the log grew
        # (and was read back whole after each kill) for as long as the guess was too long.
        p.stdout.readline()
        time.sleep(rng.random() * 0.25)
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
        yield


def test_kill_9_mid_write_leaves_a_whole_version(tmp_path):
    rng = random.Random(8)
    path = tmp_path / "checkpoint.bin"
    seen = 0
    for _ in _kill_at_random(_WRITER, path, 15, rng):
        if not path.exists():
            continue
        head, _, body = path.read_bytes().partition(b"\n")
        assert hashlib.sha256(body).hexdigest().encode() == head, "a torn checkpoint"
        seen += 1
    assert seen >= 10
    atomic.remove_stale_temps(tmp_path, older_than_s=0)
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.bin"]


def test_kill_9_mid_append_never_corrupts_the_log(tmp_path):
    rng = random.Random(9)
    path = tmp_path / "trajectory.jsonl"
    for i, _ in enumerate(_kill_at_random(_APPENDER, path, 8, rng)):
        atomic.append_line(path, json.dumps({"after_kill": i}))
        lines = atomic.read_lines(path)
        records = [json.loads(line) for line in lines]  # every line whole
        assert records[-1] == {"after_kill": i}
        assert path.read_bytes().endswith(b"\n")
    assert sum("after_kill" in r for r in records) == 8


def test_a_torn_tail_is_cut_before_the_next_append(tmp_path):
    """What a writer killed between two write() calls leaves (a buffered writer, or a line
    larger than one write): the fragment must not merge into the next record."""
    path = tmp_path / "trajectory.jsonl"
    atomic.append_line(path, '{"turn": 1}')
    with open(path, "ab") as f:
        f.write(b'{"turn": 2, "code": "half of it')
    assert atomic.read_lines(path) == ['{"turn": 1}']
    atomic.append_line(path, '{"turn": 2}')
    assert path.read_text() == '{"turn": 1}\n{"turn": 2}\n'
    path.write_bytes(b"no newline anywhere")
    atomic.append_line(path, "first")
    assert path.read_text() == "first\n"
