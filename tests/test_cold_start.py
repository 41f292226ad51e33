"""A cold ``kernelfix eval``'s start (docs/service.md, "A cold eval with a cached CUDA build"): the fork servers
the command starts before it imports the judge are the ones the judge's workers fork from, a task or candidate
the judge will refuse starts none, and the fork server's driver check forks a child only where the driver's
library is loaded. Pure functions and one in-process call: no worker starts here."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pytest

from kernelfix.base.cache_dir import CACHE_ENV
from kernelfix.cli import eval as eval_command
from kernelfix.sandbox import fork_bytecode, scrubbed_env, zygote
from kernelfix.sandbox.spawner import import_path as _import_path
from kernelfix.sandbox.spawner import spawn as _spawn
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.handles import sandboxing

REPO = Path(__file__).resolve().parent.parent
TASK = REPO / "examples/tasks/relu.py"
TRITON = REPO / "examples/candidates/relu_triton.py"
CUDA_SOURCE = "from torch.utils.cpp_extension import load_inline\nsrc = '__global__ void k() {}'\n"


@pytest.mark.parametrize("device,gpu", [("cpu", None), ("cuda", None), ("cuda", "1")])
def test_the_early_fork_servers_are_the_ones_the_workers_use(tmp_path, device, gpu):
    """Same kind, same environment outside each worker's own paths (zygote.key): the worker finds the fork
    server started early instead of starting its own."""
    source = TRITON.read_text()
    early = sandboxing.fork_server_kinds(JudgeConfig(), source, device, gpu)
    assert [k for k, _ in early] == ["reference", "triton"]
    worker_kinds = {
        "reference": ("reference", tmp_path / "reference"),
        "triton": ("candidate", tmp_path / "evals" / "abc"),
    }
    for kind, env in early:
        role, workdir = worker_kinds[kind]
        worker_env = sandboxing.env(role, workdir, device, gpu)  # what Reference / CandidateRun give the worker
        assert zygote.key(sys.executable, env, kind) == zygote.key(sys.executable, worker_env, kind)
    assert sandboxing.fork_server_kinds(JudgeConfig(), CUDA_SOURCE, device, gpu)[1][0] == "cuda"
    assert [k for k, _ in sandboxing.fork_server_kinds(JudgeConfig(), None, device, gpu)] == [
        "reference"
    ]  # a reply: its code not known yet
    assert sandboxing.fork_server_kinds(JudgeConfig(fork_server=False), source, device, gpu) == []


def _args(task: Path, candidate: Path) -> argparse.Namespace:
    return argparse.Namespace(task=str(task), candidate=str(candidate))


def test_eval_starts_its_fork_servers_only_for_what_the_judge_will_judge(tmp_path, monkeypatch):
    started: list[tuple[str | None, str | None]] = []
    monkeypatch.setattr(
        sandboxing, "start_fork_servers", lambda cfg, code, gpu=None: started.append((cfg.device, code))
    )
    cfg = JudgeConfig(device="cpu")
    eval_command._start_fork_servers(_args(TASK, TRITON), cfg)
    assert started == [("cpu", TRITON.read_text())]
    reply = tmp_path / "reply.md"
    reply.write_text("```python\nclass ModelNew: pass\n```\n")
    eval_command._start_fork_servers(_args(TASK, reply), cfg)
    assert started[-1] == ("cpu", None)  # a reply: the reference's fork server only
    started.clear()
    not_a_task = tmp_path / "not_a_task.py"
    not_a_task.write_text("x = 1\n")
    eval_command._start_fork_servers(_args(not_a_task, TRITON), cfg)
    eval_command._start_fork_servers(_args(tmp_path / "missing.py", TRITON), cfg)
    eval_command._start_fork_servers(_args(TASK, tmp_path / "missing.py"), cfg)
    assert started == []  # usage errors: nothing started


def test_the_fork_servers_bytecode_goes_to_the_judges_cache_where_the_install_takes_none(tmp_path, monkeypatch):
    """Where the judge's process writes no bytecode (PYTHONDONTWRITEBYTECODE) or the library's folder is
    read-only, a fork server compiles its preloads once into $KERNELFIX_CACHE/bytecode and reads them from
    there after; elsewhere Python's own place, as before."""
    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    monkeypatch.delenv(fork_bytecode.NO_BYTECODE_CACHE_ENV, raising=False)
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "kf_bytecode_probe.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(lib))
    probe = ["kf_bytecode_probe"]
    assert fork_bytecode.bytecode_prefix(False, probe) == str(cache / "bytecode")  # none beside it, none to be written
    assert fork_bytecode.bytecode_prefix(True, probe) is None  # Python writes it beside its source
    (lib / "__pycache__").mkdir()
    import importlib.util

    Path(importlib.util.cache_from_source(str(lib / "kf_bytecode_probe.py"))).write_bytes(b"")
    assert fork_bytecode.bytecode_prefix(False, probe) is None  # the install has it
    (Path(importlib.util.cache_from_source(str(lib / "kf_bytecode_probe.py")))).unlink()
    (lib / "__pycache__").rmdir()
    monkeypatch.setenv(fork_bytecode.NO_BYTECODE_CACHE_ENV, "1")
    assert fork_bytecode.bytecode_prefix(False, probe) is None
    monkeypatch.delenv(fork_bytecode.NO_BYTECODE_CACHE_ENV)

    # A fork server of one small module (no torch: it says so and exits), started as a judge whose user said
    # PYTHONDONTWRITEBYTECODE: the module's bytecode lands in the cache, nothing beside its source.
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    env = {**scrubbed_env(), CACHE_ENV: str(cache)}
    z = zygote.Zygote(
        sys.executable, env, [str(lib), *map(str, _import_path())], str(tmp_path), _spawn, ("kf_bytecode_probe",)
    )
    assert z.ready.wait(60)  # it exits by itself: no torch
    assert "kf_bytecode_probe" in z.info.get("imports", {})
    assert list((cache / "bytecode").rglob("kf_bytecode_probe.*.pyc")), sorted(map(str, cache.rglob("*")))
    assert not (lib / "__pycache__").exists()


def test_what_a_kinds_workers_import_later_is_compiled_ahead_once(tmp_path, monkeypatch):
    """A fork server that keeps its bytecode in the judge's folder writes there, from a child of its own, the bytecode of
    what its workers import later (zygote.LATE_IMPORTS: the reference's dynamo and inductor, 8-10 s from source on the
    H100's install), and its workers read it; once written, no child is started again."""
    import socket

    prefix = tmp_path / "bytecode"
    lib = tmp_path / "lib"
    (lib / "kf_late_pkg").mkdir(parents=True)
    (lib / "kf_late_pkg" / "__init__.py").write_text("")
    (lib / "kf_late_pkg" / "heavy.py").write_text("VALUE = 2\n")
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.setattr(sys, "pycache_prefix", str(prefix))  # as the fork server leaves it for its workers
    late = ["kf_late_pkg.heavy", "kf_not_installed_anywhere"]
    assert not fork_bytecode.has_bytecode("kf_late_pkg.heavy") and fork_bytecode.has_bytecode(
        "kf_not_installed_anywhere"
    )
    assert fork_bytecode.warm_late(late, None, -1) is None  # no folder of the judge's: nothing to do
    a, b = socket.socketpair()
    with a, b:
        pid = fork_bytecode.warm_late(late, str(prefix), b.fileno())
        assert pid is not None
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert list(prefix.rglob("heavy.*.pyc")) and list(prefix.rglob("__init__.*.pyc"))
    assert not (lib / "kf_late_pkg" / "__pycache__").exists()  # nothing beside the sources
    assert fork_bytecode.has_bytecode("kf_late_pkg.heavy")
    assert fork_bytecode.warm_late(late, str(prefix), -1) is None  # all there: no child
    assert "kf_late_pkg.heavy" not in sys.modules  # the child's imports were its own
