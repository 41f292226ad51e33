"""A machine fault (infra:*) is judged again, never a model turn: the chain, a resume, `kernelfix eval`.

The fault is injected where the judge reports it (its correctness stage answers infra:gpu_busy, as
it does when memory other processes hold runs out); everything around it is real: the replay
model, the judge's workers, the session's checkpoints and git history, the CLI.
"""

from __future__ import annotations

import json

import pytest
from agent_support import TASK, candidate_code, check_session_dir, replay_session, reply

from kernelfix.agent.events import Notice
from kernelfix.agent.session import Session
from kernelfix.agent.state import Trajectory
from kernelfix.tools import retry
from kernelfix.tools.judge import Judge
from kernelfix.tools.retry import MachineFault
from kernelfix.tools.verdict import Category

BUSY = "the GPU ran out of memory held by other processes: 0.1 of 79.2 GiB were free (injected by the test)"


@pytest.fixture
def cpu_judge(judges):
    return judges("relu", "cpu")


@pytest.fixture
def faults(monkeypatch):
    """``faults.left = N``: the next N correctness stages of any judge report infra:gpu_busy; no pauses."""
    original = Judge.correctness

    class Faults:
        left = 0
        met = 0

    def correctness(self, ev, on_event=None):
        if Faults.left > 0 and not ev.failed:
            Faults.left -= 1
            Faults.met += 1
            self.release(ev)
            ev.stages_done.append("correctness")
            return ev.fail("correctness", Category.GPU_BUSY, BUSY)
        return original(self, ev, on_event)

    monkeypatch.setattr(Judge, "correctness", correctness)
    monkeypatch.setattr(retry, "backoff_s", lambda first_s, tried: 0.0)
    return Faults


def test_a_fault_is_judged_again_and_no_turn_is_spent(tmp_path, cpu_judge, faults):
    faults.left = 2
    s = replay_session(tmp_path, [reply("triton_relu_ok.py")], cpu_judge, max_turns=1)
    outcome = s.run()
    traj = check_session_dir(s.store.path)
    (t1,) = traj.turns  # one model call, one turn: the faults cost no turn and no reply
    assert outcome.success and t1.verdict.category == Category.OK, t1.verdict.message
    assert t1.verdict.infra_retries == [f"infra:gpu_busy: {BUSY}"] * 2 and faults.met == 2
    assert "infra" not in (t1.feedback or "") and "held by other processes" not in (t1.feedback or "")
    again = [e.text for e in s.events if isinstance(e, Notice) and "judging it again" in e.text]
    assert len(again) == 2 and "turn 1" in again[0]


def test_a_fault_that_persists_stops_the_session_and_a_resume_judges_again(tmp_path, cpu_judge, faults, monkeypatch):
    monkeypatch.setattr(cpu_judge, "config", cpu_judge.config.model_copy(update={"infra_retries": 1}))
    faults.left = 5
    s = replay_session(tmp_path, [reply("triton_relu_ok.py")], cpu_judge, max_turns=1)
    with pytest.raises(MachineFault, match="could not judge turn 1 .2 tries"):
        s.run()
    assert faults.met == 2
    traj = Trajectory.model_validate_json((s.store.path / "trajectory.json").read_text())
    assert traj.turns == [] and not traj.outcome.finished and traj.outcome.resumable
    assert "infra:gpu_busy" in traj.outcome.stop_reason and "kernelfix resume" in traj.outcome.stop_reason
    faults.left = 0  # the machine is well again: the same reply is judged, not asked for again
    outcome = Session.open(s.store.path, s.model, judge=cpu_judge).run()
    (t1,) = check_session_dir(s.store.path).turns
    # the fault the session stopped on is the one a resume starts from: judged again, and listed
    assert (
        outcome.success
        and t1.verdict.category == Category.OK
        and t1.verdict.infra_retries == [f"infra:gpu_busy: {BUSY}"]
    )


def test_eval_retries_and_says_so_unless_told_not_to(tmp_path, faults, capsys):
    from kernelfix.cli import EXIT_FAIL, EXIT_OK, main

    cand = tmp_path / "cand.py"
    cand.write_text(candidate_code("triton_relu_ok.py"))
    faults.left = 1
    assert main(["eval", str(TASK), str(cand), "--device", "cpu", "--json"]) == EXIT_OK
    out, err = capsys.readouterr()
    v = json.loads(out)
    assert v["category"] == "ok" and v["infra_retries"] == [f"infra:gpu_busy: {BUSY}"]
    assert "machine fault" in err and "judging again" in err
    faults.left = 1
    assert main(["eval", str(TASK), str(cand), "--device", "cpu", "--json", "--no-retry"]) == EXIT_FAIL
    v = json.loads(capsys.readouterr().out)
    assert v["category"] == "infra:gpu_busy" and v["infra_retries"] == []


def test_a_fault_before_the_first_turn_is_waited_out_too(tmp_path, cpu_judge, monkeypatch):
    """The task's reference meets the fault (a batch's session starts while another process holds the
    GPU): judged again after a pause, and when it persists the session stops resumable, no turn spent."""
    from kernelfix.tools.handles.reference_failures import ReferenceUnavailable

    original = Judge.reference
    left = [1]

    def reference(self, on_event=None):
        if left[0] > 0:
            left[0] -= 1
            raise ReferenceUnavailable(Category.GPU_BUSY, BUSY)
        return original(self, on_event)

    monkeypatch.setattr(Judge, "reference", reference)
    monkeypatch.setattr(retry, "backoff_s", lambda first_s, tried: 0.0)
    s = replay_session(tmp_path, [reply("triton_relu_ok.py")], cpu_judge, max_turns=1)
    assert s.run().success
    assert any(isinstance(e, Notice) and "task's reference" in e.text for e in s.events)
    left[0] = 99
    (tmp_path / "again").mkdir()
    s2 = replay_session(tmp_path / "again", [reply("triton_relu_ok.py")], cpu_judge, max_turns=1)
    with pytest.raises(MachineFault, match="could not run the task's reference"):
        s2.run()
    traj = Trajectory.model_validate_json((s2.store.path / "trajectory.json").read_text())
    assert traj.turns == [] and traj.outcome.resumable
