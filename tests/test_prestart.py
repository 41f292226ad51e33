"""A candidate worker started ahead (``Judge.prestart``, while the model writes) is the one that judges the
candidate of its workdir; one whose candidate never comes ends when dropped, not with the session."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import CORPUS

from kernelfix.agent import judging
from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.session_dir import SessionDir
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.handles import candidate_run as runs_module
from kernelfix.tools.judge import Judge
from kernelfix.tools.task import Task
from kernelfix.tools.verdict import Category

TASK = CORPUS / "tasks" / "relu.py"
RELU_OK = (CORPUS / "candidates" / "triton_relu_ok.py").read_text()


@pytest.fixture
def started(monkeypatch) -> list:
    """Every candidate worker the judge starts, in order."""
    runs: list = []

    class Counted(runs_module.CandidateRun):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            runs.append(self)

    monkeypatch.setattr(runs_module, "CandidateRun", Counted)  # where CandidateRuns starts them
    return runs


def _config() -> JudgeConfig:
    return JudgeConfig(device="cpu", trials=2, input_variants=["scaled"])


def _gone(run, within_s: float = 10.0) -> bool:
    ends = time.monotonic() + within_s
    while run.handle.alive and time.monotonic() < ends:
        time.sleep(0.05)
    return not run.handle.alive


def test_the_worker_started_ahead_judges_its_workdirs_candidate(tmp_path, started):
    wd = tmp_path / "turn-1"
    with Judge(TASK, _config(), workdir=tmp_path / "judge") as j:
        j.prestart(wd, wait=True)
        assert j.has_standby(wd) and started[0].handle.alive
        verdict = j.evaluate(RELU_OK, workdir=wd)
        assert verdict.category == Category.OK, verdict.message
        assert len(started) == 1, "a second worker was started although one waited for this workdir"
        assert not j.has_standby(wd)
        assert _gone(started[0]), "the worker outlived its evaluation"
        other = j.evaluate(RELU_OK, workdir=tmp_path / "turn-2")  # another workdir: a worker of its own
        assert other.category == Category.OK, other.message
        assert len(started) == 2


def test_a_dropped_standby_ends_at_once(tmp_path, started):
    wd = tmp_path / "turn-3"
    with Judge(TASK, _config(), workdir=tmp_path / "judge") as j:
        j.prestart(wd, wait=True)
        j.drop_standby(wd)
        assert not j.has_standby(wd)
        assert _gone(started[0]), "a dropped standby worker still runs"
        j.drop_standby(wd)  # nothing there: no error


def test_a_retried_turn_keeps_the_worker_started_for_it(tmp_path, started):
    """A model call that fails and is tried again calls prestart again for the same turn: the worker already
    waiting there, and the files in its workdir, stay."""
    store = SessionDir.create(
        tmp_path / "session", task=Task.load(TASK), model="replay:none", agent=AgentConfig(), judge=_config()
    )
    with Judge(TASK, _config(), workdir=tmp_path / "judge") as j:
        judging.prestart(store, j, 1)
        judging.prestart(store, j, 1)
        assert len(started) == 1
        assert (Path(store.eval_dir(1)) / "task.py").exists()
        judging.drop_prestart(store, j, 1)
        assert _gone(started[0])
