"""One SFT record per session, in OpenAI chat format.

The record is the conversation up to and including the session's last model
turn: the context that turn was sent (system, task, earlier answers and the
judge's feedback on each, with earlier reasoning already left out) and its
answer. A search (width > 1) is a tree: its record is the best path (the best
kernel's branch, up to that branch's last model turn), or, with
``--all-branches``, one record per root-to-leaf path. Assistant messages carry OpenAI's per-message loss flag ``weight``
(1: trained on): the final answer only by default, or every answer
(``loss="all-assistant"``). The final answer keeps its reasoning as
``reasoning_content``; earlier answers never have any.
"""

from __future__ import annotations

import hashlib
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelfix.agent.export import tokens
from kernelfix.agent.state import Trajectory, Turn, path_to

LossMode = Literal["final", "all-assistant"]
# repair: the session's first judged turn failed (a broken kernel given, or the model's first answer wrong);
# optimization: it was correct from the first turn, so only a speedup can make it worth learning from.
SessionKind = Literal["repair", "optimization"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Message(_Model):
    role: Literal["system", "user", "assistant"]
    content: str
    reasoning_content: str | None = None  # the final answer's only
    weight: int | None = None  # assistant messages: 1 carries loss, 0 does not


class TurnInfo(_Model):
    turn: int
    source: str
    category: str | None


class Metadata(_Model):
    session_id: str
    session_dir: str
    task: str
    task_sha1: str
    model: str
    device: str
    loss: LossMode
    turns: list[TurnInfo]  # every judged turn, with its verdict category
    final_turn: int
    final_category: str | None
    final_correct: bool
    final_speedup_eager: float | None
    final_speedup_compile: float | None
    first_correct_turn: int | None
    first_correct_speedup_eager: float | None
    kind: SessionKind
    tokenizer: str
    reasoning_tokens: int  # the final answer's reasoning
    reasoning_tokens_all_turns: int
    prompt_tokens: int  # everything before the final answer, as the tokenizer counts it
    completion_tokens: int  # the final answer
    sha1: str = ""  # of normalized prompt|||completion (the dedup key)
    jaccard: float = 0.0  # word Jaccard of prompt and completion
    leakage: bool = False
    path: list[int] = Field(default_factory=list)  # the turns of this conversation, root first (a search: one branch's)
    branch: str | None = None  # the final answer's git branch


class FilterStep(_Model):
    """What one filter decided about one record, and why (ANALYSIS's per-session account)."""

    filter: str
    kept: bool
    why: str


class Record(_Model):
    messages: list[Message]
    metadata: Metadata
    prompt: str = Field(exclude=True)  # the text dedup and leakage look at
    completion: str = Field(exclude=True)
    trail: list[FilterStep] = Field(default_factory=list, exclude=True)  # each filter's decision, in order


# --------------------------------------------------------------------------- text keys

_SPACES = re.compile(r"[ \t]+")
_NEWLINES = re.compile(r"\n{3,}")
_WORD = re.compile(r"\w+")


def normalize(text: str) -> str:
    """Unify newlines, strip, collapse runs of spaces/tabs to one space and runs of 3+ newlines to two."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    return _NEWLINES.sub("\n\n", _SPACES.sub(" ", text))


def dedup_key(prompt: str, completion: str) -> str:
    return hashlib.sha1(f"{normalize(prompt)}|||{normalize(completion)}".encode()).hexdigest()


def word_jaccard(a: str, b: str) -> float:
    wa, wb = set(_WORD.findall(a.lower())), set(_WORD.findall(b.lower()))
    if not wa and not wb:
        return 0.0
    return len(wa & wb) / len(wa | wb)


# --------------------------------------------------------------------------- records


def final_model_turn(traj: Trajectory) -> Turn | None:
    return next((t for t in reversed(traj.turns) if t.source == "model" and t.reply is not None), None)


def _searched(traj: Trajectory) -> bool:
    return bool(traj.rounds)


def best_path_final(traj: Trajectory) -> Turn | None:
    """The final answer of the session's record: the chain's last model turn; in a search, the last model
    turn of the best kernel's branch (of the last model turn's branch when nothing was correct)."""
    last = final_model_turn(traj)
    if not _searched(traj) or last is None:
        return last
    by_index = {t.index: t for t in traj.turns}
    anchor = by_index.get(traj.outcome.best_turn) if traj.outcome.best_turn is not None else last
    on_branch = [
        t
        for t in traj.turns
        if t.source == "model" and t.reply is not None and t.branch == anchor.branch and t.index >= anchor.index
    ]
    return max(on_branch, key=lambda t: t.index, default=last)


def leaf_finals(traj: Trajectory) -> list[Turn]:
    """The final answer of every root-to-leaf path: each leaf's last model turn on its path (--all-branches)."""
    parents = {t.parent for t in traj.turns}
    finals: dict[int, Turn] = {}
    for leaf in (t for t in traj.turns if t.index not in parents):
        final = next(
            (t for t in reversed(path_to(traj.turns, leaf.index)) if t.source == "model" and t.reply is not None), None
        )
        if final is not None:
            finals[final.index] = final
    return (
        [finals[i] for i in sorted(finals)]
        if _searched(traj)
        else [t for t in [final_model_turn(traj)] if t is not None]
    )


def session_fields(traj: Trajectory, session_dir: str) -> dict:
    """What every exported record says of its session (SFT and RL records alike)."""
    return {
        "session_id": traj.session_id,
        "session_dir": session_dir,
        "task": traj.task.name,
        "task_sha1": traj.task.sha1,
        "model": traj.model,
        "device": traj.device,
    }


def _prompt_text(messages: list[Message]) -> str:
    return "\n\n".join(f"{m.role}: {m.content}" for m in messages)


def record(traj: Trajectory, *, session_dir: str, loss: LossMode = "final", final: Turn | None = None) -> Record | None:
    """The session's record (the path ending at ``final``; default its best path), or None when it has no
    model turn to learn from."""
    final = final or best_path_final(traj)
    if final is None:
        return None
    turns = path_to(traj.turns, final.index) if _searched(traj) else traj.turns
    # A turn the machine failed to judge (infra:*) is no model mistake: the record ends before it.
    fault = next(
        (t for t in turns if t.index <= final.index and t.verdict is not None and t.verdict.category.machine_fault),
        None,
    )
    if fault is not None:
        final = next(
            (t for t in reversed(turns) if t.index < fault.index and t.source == "model" and t.reply is not None), None
        )
        if final is None:
            return None
        turns = [t for t in turns if t.index <= final.index]
    context = [Message(role=m.role, content=m.content) for m in final.messages]  # reasoning_content dropped
    for m in context:
        if m.role == "assistant":
            m.weight = 1 if loss == "all-assistant" else 0
    answer = Message(
        role="assistant", content=final.reply.content, reasoning_content=final.reply.reasoning_content or None, weight=1
    )
    prompt, completion = _prompt_text(context), answer.content
    first_correct = next((t for t in turns if t.correct), None)
    v = final.verdict
    meta = Metadata(
        **session_fields(traj, session_dir),
        loss=loss,
        turns=[
            TurnInfo(turn=t.index, source=t.source, category=t.verdict.category.value if t.verdict else None)
            for t in turns
        ],
        final_turn=final.index,
        final_category=v.category.value if v else None,
        final_correct=final.correct,
        final_speedup_eager=v.speedup_eager if v else None,
        final_speedup_compile=v.speedup_compile if v else None,
        first_correct_turn=first_correct.index if first_correct else None,
        first_correct_speedup_eager=first_correct.verdict.speedup_eager if first_correct else None,
        kind="optimization" if traj.turns[0].correct else "repair",
        tokenizer=tokens.tokenizer()[0],
        reasoning_tokens=tokens.count(final.reply.reasoning_content),
        reasoning_tokens_all_turns=sum(tokens.count(t.reply.reasoning_content) for t in turns if t.reply is not None),
        prompt_tokens=tokens.count(prompt),
        completion_tokens=tokens.count(completion),
        sha1=dedup_key(prompt, completion),
        jaccard=round(word_jaccard(prompt, completion), 4),
        path=[t.index for t in turns if t.index <= final.index],
        branch=final.branch,
    )
    return Record(messages=[*context, answer], metadata=meta, prompt=prompt, completion=completion)
