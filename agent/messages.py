"""The messages the model sees, rendered from the templates in ``kernelfix.prompts``.

Templates are ``string.Template`` files (``$name`` placeholders): system, task,
candidate, repair, optimize, hint. The context for a turn is the system and
task messages, then for every judged turn its code (the model's answer, or a
candidate from the user) and the feedback it earned. Reasoning is never sent
back: only the answer's content.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from importlib import resources
from string import Template
from typing import Any

from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.state import ChatMessage, Turn
from kernelfix.prompts.blocks import build_times_block, floor_distance, nvrtc_line
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.correctness.tolerance import describe
from kernelfix.tools.feedback import knowledge
from kernelfix.tools.gpu.floor import TaskFloor
from kernelfix.tools.verdict import Category

# The allocation/view ops named in the system prompt; the judge's full list is longer.
_NAMED_ALLOWED = "empty, empty_like, zeros, ones, full, view, reshape, permute, transpose, contiguous, clone, copy_"


@functools.cache
def template(name: str) -> Template:
    return Template(resources.files("kernelfix.prompts").joinpath(f"{name}.md").read_text(encoding="utf-8"))


def render(name: str, **values: Any) -> str:
    """A template with every placeholder filled (a missing value is a bug: KeyError)."""
    return template(name).substitute({k: "" if v is None else str(v) for k, v in values.items()}).strip()


def goal_text(config: AgentConfig, device: str) -> str:
    if device == "cuda":
        return f"correct, legal, and at least {config.target_speedup:g}x faster than eager PyTorch."
    return f"correct and legal (this session judges on {device}, where nothing is timed)."


def system_prompt(judge: JudgeConfig, device: str, *, gpu_block: str | None = None) -> str:
    allowed = _NAMED_ALLOWED + (", " + ", ".join(judge.extra_allowed_ops) if judge.extra_allowed_ops else "")
    timing = (
        "times it on the GPU against eager PyTorch and torch.compile"
        if device == "cuda"
        else f"on {device} times nothing (timing needs a CUDA GPU)"
    )
    text = render(
        "system",
        allowed_ops=allowed,
        tolerance=describe(judge.atol, judge.rtol),
        timing=timing,
        build_times=build_times_block(judge.build.object_cache),
        nvrtc=nvrtc_line(device),
        gpu=f"The GPU that judges and times your kernel:\n{gpu_block.strip()}\n" if gpu_block else "",
    )
    if judge.backward:  # docs/backward.md: what is judged, and the autograd.Function pattern
        text = text.replace(EXPERT, render("backward") + "\n\n" + EXPERT, 1)
    return text


EXPERT = "How an expert approaches a kernel:"


def task_prompt(
    task_name: str, task_source: str, *, shape_block: str | None, goal: str, floor: str | None = None
) -> str:
    block = (
        f"\nShapes, strides and contiguity of the reference (from torch.fx ShapeProp):\n\n{shape_block}\n"
        if shape_block
        else ""
    )
    block += f"\nThe floor: {floor}\n" if floor else ""
    return render("task", task_name=task_name, task_source=task_source.strip(), shape_block=block, goal=goal)


def candidate_message(turn: Turn) -> str:
    origin = (
        "A candidate kernel given with the task"
        if turn.source == "candidate"
        else "A candidate kernel edited by the user"
    )
    return render("candidate", origin=origin, turn=turn.index, code=(turn.code or "").strip())


def _turns_left(left: int) -> str:
    if left <= 0:
        return ""
    return "This is the last turn." if left == 1 else f"({left} turns left.)"


def _best_line(turn: Turn, best: Turn | None, floor: TaskFloor | None = None) -> str:
    if best is None:
        return ""
    ms = (
        best.verdict.timings.candidate.median_ms
        if best.verdict and best.verdict.timings and best.verdict.timings.candidate
        else None
    )
    distance = (" " + floor_distance(floor, ms)) if floor is not None and floor_distance(floor, ms) else ""
    if best.index == turn.index:
        return "This is the best candidate so far." + distance
    s = best.verdict.speedup_eager if best.verdict else None
    return (
        f"The best candidate so far is turn {best.index}"
        + (f" at {s:.2f}x over eager." if s is not None else ".")
        + distance
    )


NOTES_MAX_CHARS = 6000


def picked_notes(turn: Turn, shown: Collection[str] = ()) -> list[knowledge.Note]:
    """The knowledge notes for a correct turn's findings (knowledge.for_profile), leaving out those an
    earlier turn's feedback already carried: each note's text stays in the context once."""
    v = turn.verdict
    if v is None or v.category != Category.OK:
        return []
    return knowledge.for_profile(v.profile, exclude=shown)


def shown_notes(turns: Sequence[Turn]) -> set[str]:
    return {slug for t in turns for slug in t.notes}


def feedback_message(
    turn: Turn,
    *,
    best: Turn | None,
    config: AgentConfig,
    device: str,
    turns_left: int,
    floor: TaskFloor | None = None,
    notes: Sequence[knowledge.Note] = (),
) -> str:
    """The next user message: repair-oriented after a failure, optimization-oriented after a success
    (with ``notes``, the techniques its findings call for, each with a worked exemplar)."""
    v = turn.verdict
    assert v is not None, "feedback needs a verdict"
    if v.category == Category.OK:
        extra = ""
        if notes:
            extra = (
                "\n\nHow to fix what the profile found (notes, each with a judged exemplar):\n\n"
                + knowledge.render(notes, max_chars=NOTES_MAX_CHARS)
            )
        return render(
            "optimize",
            turn=turn.index,
            feedback=v.feedback.strip() + extra,
            best=_best_line(turn, best, floor),
            goal=goal_text(config, device),
            turns_left=_turns_left(turns_left),
        )
    return render(
        "repair",
        turn=turn.index,
        category=v.category.value,
        feedback=v.feedback.strip(),
        turns_left=_turns_left(turns_left),
    )


def hint_message(hints: Sequence[str]) -> str:
    return "\n".join(render("hint", hint=h) for h in hints)


def build_messages(system: str, task: str, turns: Sequence[Turn], hints: Sequence[str] = ()) -> list[ChatMessage]:
    """The context for the next model turn. Consecutive user messages are merged, so roles alternate."""
    msgs = [ChatMessage(role="system", content=system), ChatMessage(role="user", content=task)]
    for t in turns:
        if t.hints:  # as they were sent: just before that turn's answer
            msgs.append(ChatMessage(role="user", content=hint_message(t.hints)))
        if t.source == "model":
            # The answer only: earlier reasoning stays out of the context.
            msgs.append(ChatMessage(role="assistant", content=t.reply.content if t.reply else ""))
        else:
            msgs.append(ChatMessage(role="user", content=candidate_message(t)))
        if t.feedback:
            msgs.append(ChatMessage(role="user", content=t.feedback))
    if hints:
        msgs.append(ChatMessage(role="user", content=hint_message(hints)))
    merged: list[ChatMessage] = []
    for m in msgs:
        if merged and m.role == "user" and merged[-1].role == "user":
            merged[-1] = ChatMessage(role="user", content=merged[-1].content + "\n\n" + m.content)
        else:
            merged.append(m)
    return merged
