"""``--format rl-jsonl``: one record per judged model candidate, for reinforcement learning.

Each record is the prompt the candidate was drawn for (its messages, earlier reasoning already left out),
the completion (the reply, with its reasoning), the verdict and a reward. Every candidate of every branch
is written, failures included (they are the negatives); the SFT filters do not apply.

Reward (``REWARD_RULE``): the speedup over eager PyTorch when the kernel is correct, legal and timed;
0 when it is not correct or not legal (any failed verdict); null when it is correct and legal but was
not timed (judged without a CUDA GPU): there is no speed to reward, and 0 would call it a failure.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from kernelfix.agent.export.sft_records import Message, session_fields
from kernelfix.agent.state import Trajectory, Turn
from kernelfix.base import atomic

REWARD_RULE = (
    "speedup_eager if correct, legal and timed; 0 if not correct or not legal; null if correct and legal but untimed"
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RLMetadata(_Model):
    session_id: str
    session_dir: str
    task: str
    task_sha1: str
    model: str
    device: str
    turn: int
    parent: int | None
    branch: str | None
    round: int | None
    category: str
    correct: bool  # correct and legal: the judge's ok
    speedup_eager: float | None
    speedup_compile: float | None
    reward: float | None
    reward_rule: str = REWARD_RULE


class RLRecord(_Model):
    prompt: list[Message]
    completion: Message
    metadata: RLMetadata


def reward(turn: Turn) -> float | None:
    if not turn.correct:
        return 0.0
    return turn.verdict.speedup_eager  # None: correct but untimed


def machine_fault_in(messages, traj: Trajectory) -> bool:
    """Whether a prompt carries the feedback of a turn the machine failed to judge (sessions from before
    machine faults were retried recorded such turns)."""
    faulted = [
        t.feedback for t in traj.turns if t.verdict is not None and t.verdict.category.machine_fault and t.feedback
    ]
    return any(m.content in faulted for m in messages if m.role == "user")


def records(traj: Trajectory, *, session_dir: str) -> list[RLRecord]:
    out = []
    for t in traj.turns:
        if t.source != "model" or t.reply is None or t.verdict is None:
            continue
        if machine_fault_in(t.messages, traj) or t.verdict.category.machine_fault:
            continue  # the machine failed to judge it, or its prompt holds such a turn: no reward to learn
        v = t.verdict
        out.append(
            RLRecord(
                prompt=[Message(role=m.role, content=m.content) for m in t.messages],
                completion=Message(
                    role="assistant", content=t.reply.content, reasoning_content=t.reply.reasoning_content or None
                ),
                metadata=RLMetadata(
                    **session_fields(traj, session_dir),
                    turn=t.index,
                    parent=t.parent,
                    branch=t.branch,
                    round=t.round,
                    category=v.category.value,
                    correct=t.correct,
                    speedup_eager=v.speedup_eager,
                    speedup_compile=v.speedup_compile,
                    reward=reward(t),
                ),
            )
        )
    return out


class RLAnalysis(_Model):
    output: str
    format: str = "rl-jsonl"
    reward_rule: str = REWARD_RULE
    sessions_found: int
    unusable: list[dict[str, str]] = Field(default_factory=list)
    records_out: int
    tasks_out: int
    categories: dict[str, int]
    rewards: dict[str, int]  # zero / untimed (null) / below 1 / 1 and above


def write(rows: list[RLRecord], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic.replacing(out) as f:
        for r in rows:
            row = {
                "prompt": [m.model_dump(exclude_none=True) for m in r.prompt],
                "completion": r.completion.model_dump(exclude_none=True),
                "metadata": r.metadata.model_dump(mode="json"),  # a null reward stays: correct but untimed
            }
            f.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))


def analyse(rows: list[RLRecord], *, output: str, sessions_found: int, unusable: list[dict[str, str]]) -> RLAnalysis:
    def bucket(x: float | None) -> str:
        return "untimed (null)" if x is None else "0" if x == 0 else "below 1" if x < 1 else "1 and above"

    return RLAnalysis(
        output=output,
        sessions_found=sessions_found,
        unusable=unusable,
        records_out=len(rows),
        tasks_out=len({r.metadata.task_sha1 for r in rows}),
        categories=dict(Counter(r.metadata.category for r in rows).most_common()),
        rewards=dict(Counter(bucket(r.metadata.reward) for r in rows).most_common()),
    )


def write_analysis(directory: Path, a: RLAnalysis) -> None:
    lines = [
        "# Export analysis (rl-jsonl)",
        "",
        f"{a.records_out} judged model candidates of {a.tasks_out} tasks written to `{a.output}`; {a.sessions_found} sessions found, "
        f"{len(a.unusable)} unusable. Reward: {a.reward_rule}.",
        "",
        "| reward | records |",
        "| --- | --- |",
        *(f"| {k} | {n} |" for k, n in a.rewards.items()),
        "",
        "| category | records |",
        "| --- | --- |",
        *(f"| {k} | {n} |" for k, n in a.categories.items()),
    ]
    if a.unusable:
        lines += ["", "## Unusable sessions", ""] + [f"- `{u['path']}`: {u['why']}" for u in a.unusable]
    atomic.write_json(directory / "ANALYSIS.json", a.model_dump(mode="json"))
    atomic.write_text(directory / "ANALYSIS.md", "\n".join(lines) + "\n")
