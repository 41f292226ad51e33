"""The demo session judged on a CUDA GPU: the correct turn is timed, and timing drives the loop.

On the device: ``python -m pytest -q -m gpu tests/test_agent_gpu.py -s``; with OUT set, the
session's trajectory.json and git log are copied to $OUT/agent_gpu/.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from agent_support import REPO, check_session_dir

from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.models import ReplayModel
from kernelfix.agent.session import Session
from kernelfix.tools.config import JudgeConfig


@pytest.mark.gpu
def test_demo_on_the_gpu(tmp_path):
    s = Session.create(
        tmp_path / "gpu-demo",
        task_path=REPO / "examples" / "tasks" / "relu.py",
        model=ReplayModel(REPO / "examples" / "replays" / "relu.jsonl"),
        agent=AgentConfig(target_speedup=1000.0),  # out of reach: the replay runs out after the correct turn
        judge_config=JudgeConfig(device="cuda"),
    )
    outcome = s.run()
    traj = check_session_dir(s.store.path)
    out = os.environ.get("OUT")
    if out:
        dest = Path(out) / "agent_gpu"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(s.store.path / "trajectory.json", dest / "trajectory.json")
        (dest / "git_log.txt").write_text(s.store.repo.git.log("--stat"))
    cats = [t.verdict.category.value for t in traj.turns]
    print("\nturns:", cats, "| stop:", outcome.stop_reason, "| best speedup vs eager:", outcome.best_speedup_eager)
    assert cats[0] == "compile_error:import" and cats[1] == "correctness_error:numerical" and cats[2] == "ok"
    t3 = traj.turns[2]
    v = t3.verdict
    assert v.timings is not None and v.timings.candidate is not None and v.speedup_eager and v.speedup_eager > 0
    assert "x over eager" in s.store.repo.commit(t3.commit).message
    assert t3.feedback.startswith("Turn 3 passed.") and "Runtime" in t3.feedback and "Make it faster" in t3.feedback
    assert outcome.stop_kind == "replay_end" and not outcome.goal_met
    assert outcome.best_turn == 3 and outcome.best_speedup_eager == v.speedup_eager
