"""A cold ``kernelfix eval``'s start (docs/service.md, "A cold eval with a cached CUDA build"): the fork servers
the command starts before it imports the judge are the ones the judge's workers fork from, a task or candidate
the judge will refuse starts none, and the fork server's driver check forks a child only where the driver's
library is loaded. Pure functions and one in-process call: no worker starts here."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from kernelfix.cli import eval as eval_command
from kernelfix.sandbox import fork_server, zygote
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
    worker_kinds = {"reference": ("reference", tmp_path / "reference"), "triton": ("candidate", tmp_path / "evals" / "abc")}
    for kind, env in early:
        role, workdir = worker_kinds[kind]
        worker_env = sandboxing.env(role, workdir, device, gpu)  # what Reference / CandidateRun give the worker
        assert zygote.key(sys.executable, env, kind) == zygote.key(sys.executable, worker_env, kind)
    assert sandboxing.fork_server_kinds(JudgeConfig(), CUDA_SOURCE, device, gpu)[1][0] == "cuda"
    assert [k for k, _ in sandboxing.fork_server_kinds(JudgeConfig(), None, device, gpu)] == ["reference"]  # a reply: its code not known yet
    assert sandboxing.fork_server_kinds(JudgeConfig(fork_server=False), source, device, gpu) == []


def _args(task: Path, candidate: Path) -> argparse.Namespace:
    return argparse.Namespace(task=str(task), candidate=str(candidate))


def test_eval_starts_its_fork_servers_only_for_what_the_judge_will_judge(tmp_path, monkeypatch):
    started: list[tuple[str | None, str | None]] = []
    monkeypatch.setattr(sandboxing, "start_fork_servers", lambda cfg, code, gpu=None: started.append((cfg.device, code)))
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


@pytest.mark.parametrize(
    "line,loaded",
    [
        (b"7f00-7f10 r-xp 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", True),
        (b"7f00-7f10 r-xp 00000000 08:01 123 /usr/lib64/libcuda.so.1", True),
        (b"7f00-7f10 r-xp 00000000 08:01 123 /opt/torch/lib/libcudart.so.12", False),
        (b"7f00-7f10 r-xp 00000000 08:01 123 /opt/nvidia/libcuda_stub/libfoo.so", False),
    ],
)
def test_the_driver_check_forks_only_where_the_drivers_library_is_mapped(line, loaded):
    maps = b"5600-5700 r--p 00000000 08:01 1 /usr/bin/python3.12\n" + line + b"\n7fff-8000 rw-p 00000000 00:00 0 [stack]\n"
    assert fork_server._driver_loaded(maps) is loaded
    assert fork_server._driver_loaded() is False or "libcuda" in Path("/proc/self/maps").read_text()  # this process
