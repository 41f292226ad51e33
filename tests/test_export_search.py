"""`kernelfix export` of a search (width > 1), from a Trajectory built like the runner's (no judge): the best
path as one conversation, --all-branches, and rl-jsonl's one record per judged candidate with its reward."""

from __future__ import annotations

import json
import time
from pathlib import Path

from agent_support import TASK

from kernelfix.agent import messages as prompts
from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.state import (
    ChatMessage,
    Outcome,
    RoundRecord,
    Settings,
    TaskInfo,
    Trajectory,
    Turn,
    path_to,
    totals,
)
from kernelfix.cli import EXIT_OK, main
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.verdict import Category, Verdict

# (turn, parent, branch, round, category, speedup): round one drew 1 and 2, round two continued both
TREE = [
    (1, None, "b1", 1, "ok", 1.0),
    (2, None, "b2", 1, "correctness_error:numerical", None),
    (3, 1, "b1", 2, "ok", 1.5),
    (4, 1, "b3", 2, "compile_error:nvcc", None),
    (5, 2, "b2", 2, "correctness_error:numerical", None),
]


def search_trajectory() -> Trajectory:
    system = prompts.system_prompt(JudgeConfig(), "cuda")
    task_msg = prompts.task_prompt("relu", TASK.read_text(), shape_block=None, goal="correct")
    turns: list[Turn] = []
    for index, parent, branch, rnd, cat, speed in TREE:
        ok = cat == "ok"
        v = Verdict(category=Category(cat), task="relu", device="cuda", correct=ok, legal=ok, speedup_eager=speed)
        turns.append(
            Turn(
                index=index,
                source="model",
                parent=parent,
                branch=branch,
                round=rnd,
                code="...",
                verdict=v,
                started_at=time.time(),
                messages=prompts.build_messages(system, task_msg, path_to(turns, parent)),
                reply=ChatMessage(role="assistant", content=f"answer {index}", reasoning_content=f"reasoning {index}"),
                feedback=f"feedback on turn {index}: {cat}",
            )
        )
    rounds = [
        RoundRecord(round=r, started_at=0.0, wall_s=10.0, judge_s=15.0, slots=[], kept=kept)
        for r, kept in ((1, [1, 2]), (2, [3, 5]))
    ]
    return Trajectory(
        kernelfix_version="0",
        session_id="tree",
        task=TaskInfo(name="relu", path=str(TASK), sha1="t", source=TASK.read_text()),
        model="replay:x",
        settings=Settings(agent=AgentConfig(width=3, keep=2), judge=JudgeConfig()),
        device="cuda",
        created_at=0.0,
        updated_at=0.0,
        turns=turns,
        totals=totals(turns, rounds),
        rounds=rounds,
        outcome=Outcome(finished=True, success=True, best_turn=3, best_speedup_eager=1.5),
    )


def write(root: Path) -> Path:
    d = root / "tree"
    d.mkdir(parents=True)
    (d / "trajectory.json").write_text(search_trajectory().model_dump_json())
    return d


def assistant(rec: dict) -> list[str]:
    return [m["content"] for m in rec["messages"] if m["role"] == "assistant"]


def test_best_path_and_all_branches(tmp_path):
    session, out = write(tmp_path / "s"), tmp_path / "sft.jsonl"
    assert main(["export", str(session), "--out", str(out), "--min-speedup-gain", "0"]) == EXIT_OK
    (rec,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert assistant(rec) == ["answer 1", "answer 3"]  # the best kernel's branch only: b1, turns 1 and 3
    meta = rec["metadata"]
    assert (meta["path"], meta["branch"], meta["final_turn"], meta["first_correct_turn"]) == ([1, 3], "b1", 3, 1)
    assert [t["turn"] for t in meta["turns"]] == [1, 3] and "feedback on turn 1: ok" in rec["messages"][-2]["content"]

    args = ["--all-branches", "--keep-incorrect", "--min-speedup-gain", "0", "--per-task", "0"]
    assert main(["export", str(session), "--out", str(out), *args]) == EXIT_OK
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(tuple(r["metadata"]["path"]) for r in recs) == [(1, 3), (1, 4), (2, 5)]  # every root-to-leaf path
    assert sorted(assistant(r)[-1] for r in recs) == ["answer 3", "answer 4", "answer 5"]


def test_rl_jsonl_one_record_per_judged_candidate_with_its_reward(tmp_path):
    session, out = write(tmp_path / "s"), tmp_path / "rl.jsonl"
    assert main(["export", str(session), "--out", str(out), "--format", "rl-jsonl"]) == EXIT_OK
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["metadata"]["turn"], r["metadata"]["reward"]) for r in recs] == [
        (1, 1.0),
        (2, 0.0),
        (3, 1.5),
        (4, 0.0),
        (5, 0.0),
    ]
    r3 = recs[2]
    assert r3["completion"] == {"role": "assistant", "content": "answer 3", "reasoning_content": "reasoning 3"}
    assert [m["role"] for m in r3["prompt"]] == ["system", "user", "assistant", "user"] and r3["prompt"][2][
        "content"
    ] == "answer 1"
    assert (r3["metadata"]["parent"], r3["metadata"]["branch"], r3["metadata"]["round"]) == (1, "b1", 2)
    a = json.loads((tmp_path / "ANALYSIS.json").read_text())
    assert a["records_out"] == 5 and a["rewards"] == {"0": 3, "1 and above": 2}
