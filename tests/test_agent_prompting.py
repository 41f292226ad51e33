"""Prompts: templates are package files; repair vs optimize feedback; reasoning never goes back."""

from __future__ import annotations

from importlib import resources

import pytest

from kernelfix.agent import messages as prompts
from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.state import ChatMessage, Turn
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.feedback import verdict_text as feedback
from kernelfix.tools.verdict import Category, CompileReport, LegalityReport, Timings, TimingStats, Verdict


def verdict(category: Category, **kw) -> Verdict:
    v = Verdict(category=category, task="relu", device=kw.pop("device", "cuda"), **kw)
    v.feedback = feedback.render(v)
    return v


def stats(ms: float) -> TimingStats:
    return TimingStats(median_ms=ms, mean_ms=ms, std_ms=0.001, min_ms=ms, p10_ms=ms, p90_ms=ms, runs=100)


def turn(
    index: int,
    v: Verdict | None = None,
    *,
    source="model",
    content="```python\nclass ModelNew: ...\n```",
    reasoning=None,
    **kw,
) -> Turn:
    return Turn(
        index=index,
        source=source,
        reply=ChatMessage(role="assistant", content=content, reasoning_content=reasoning)
        if source == "model"
        else None,
        code=kw.pop("code", "class ModelNew: ..."),
        verdict=v,
        started_at=0.0,
        **kw,
    )


@pytest.mark.parametrize("name", ["system", "task", "candidate", "repair", "optimize", "hint"])
def test_templates_are_package_files(name):
    text = resources.files("kernelfix.prompts").joinpath(f"{name}.md").read_text()
    assert "$" in text  # every template has something to fill


def test_system_prompt_names_the_rules_and_tolerances():
    s = prompts.system_prompt(JudgeConfig(atol=1e-3, rtol=2e-3, extra_allowed_ops=["mm"]), "cuda")
    assert "ModelNew" in s and "atol 0.001" in s and "rtol 0.002" in s and ", mm" in s
    assert "$" not in s
    assert "times nothing" in prompts.system_prompt(JudgeConfig(), "cpu")


def test_task_prompt_carries_source_shape_block_and_goal():
    msg = prompts.task_prompt(
        "relu", "class Model: ...", shape_block="inputs:\n  arg 0: float32[16, 4096]", goal="be fast."
    )
    assert "class Model: ..." in msg and "float32[16, 4096]" in msg and "ShapeProp" in msg and "Goal: be fast." in msg
    assert "ShapeProp" not in prompts.task_prompt("relu", "class Model: ...", shape_block=None, goal="g")


def test_repair_feedback_names_the_failing_lines():
    v = verdict(
        Category.NVCC,
        compile=CompileReport(
            backend="cuda", seconds=1.0, ok=False, errors=['kernel.cu(12): error: identifier "blockIdy" is undefined']
        ),
        message="nvcc failed",
    )
    msg = prompts.feedback_message(turn(2, v), best=None, config=AgentConfig(), device="cuda", turns_left=3)
    assert "Turn 2 was rejected: `compile_error:nvcc`" in msg
    assert 'identifier "blockIdy" is undefined' in msg
    assert "(3 turns left.)" in msg


def test_repair_feedback_names_forbidden_ops():
    v = verdict(
        Category.DISALLOWED_ATEN,
        legality=LegalityReport(forbidden_ops={"relu": 1}, runtime_checked=True),
        message="forward ran torch compute ops: relu",
    )
    msg = prompts.feedback_message(turn(1, v), best=None, config=AgentConfig(), device="cuda", turns_left=1)
    assert "aten::relu" in msg and "native kernels" in msg and "This is the last turn." in msg


def test_optimize_feedback_after_success_reports_speed_profile_and_best():
    v = verdict(
        Category.OK,
        correct=True,
        legal=True,
        speedup_eager=1.5,
        speedup_compile=0.9,
        timings=Timings(candidate=stats(0.02), eager=stats(0.03), compiled=stats(0.018)),
        profile={"highlights": ["dram throughput 41% of peak", "achieved occupancy 33%"]},
    )
    best = turn(1, verdict(Category.OK, speedup_eager=2.0))
    msg = prompts.feedback_message(
        turn(3, v), best=best, config=AgentConfig(target_speedup=2.5), device="cuda", turns_left=2
    )
    assert msg.startswith("Turn 3 passed.")
    assert "1.50x" in msg and "0.90x" in msg and "Runtime 0.02 ms" in msg
    assert "dram throughput 41% of peak" in msg
    assert "best candidate so far is turn 1 at 2.00x" in msg
    assert "2.5x faster than eager" in msg and "Make it faster" in msg


def test_context_drops_reasoning_keeps_code_and_feedback_and_alternates_roles():
    t0 = turn(0, verdict(Category.SYNTAX, message="line 3: invalid syntax"), source="candidate", code="def broken(:\n")
    t0.feedback = "FEEDBACK-0"
    t1 = turn(
        1,
        verdict(Category.NUMERICAL),
        content="ANSWER-1 ```python\nx\n```",
        reasoning="SECRET-REASONING-1",
        hints=["HINT-1"],
    )
    t1.feedback = "FEEDBACK-1"
    msgs = prompts.build_messages("SYS", "TASK", [t0, t1], hints=["HINT-2"])
    roles = [m.role for m in msgs]
    assert roles == ["system", "user", "assistant", "user"]
    first_user, answer, last_user = msgs[1].content, msgs[2].content, msgs[3].content
    # turn 0 came from the user: its code and feedback join the task message, and turn 1's hint precedes its answer
    assert (
        first_user.startswith("TASK")
        and "def broken(:" in first_user
        and "FEEDBACK-0" in first_user
        and "HINT-1" in first_user
    )
    assert answer == "ANSWER-1 ```python\nx\n```"
    assert "FEEDBACK-1" in last_user and "A hint from the user: HINT-2" in last_user
    assert all("SECRET-REASONING" not in m.content and m.reasoning_content is None for m in msgs)


def test_a_correct_turns_feedback_carries_the_notes_its_findings_call_for_once():
    from kernelfix.tools.verdict import Finding, ProfileReport

    finding = Finding(
        kind="uncoalesced",
        kernel="k",
        share_pct=100.0,
        what="uncoalesced global access: 8.0x the sectors",
        fix="make lanes contiguous",
    )
    v = verdict(
        Category.OK,
        timings=Timings(candidate=stats(1.0), eager=stats(2.0)),
        speedup_eager=2.0,
        profile=ProfileReport(
            source="ncu", findings=[finding], highlights=["Findings (most costly first):", f"1. {finding.what}."]
        ),
    )
    t = turn(1, v)
    notes = prompts.picked_notes(t)
    assert notes and "uncoalesced" in notes[0].findings
    text = prompts.feedback_message(t, best=t, config=AgentConfig(), device="cuda", turns_left=3, notes=notes)
    assert notes[0].title in text and "```python" in text and "class ModelNew" in text
    assert "Techniques for these findings:" in v.feedback  # the judge's own feedback names them by title
    t.notes = [n.slug for n in notes]
    again = prompts.picked_notes(turn(2, v), prompts.shown_notes([t]))
    assert not {n.slug for n in again} & set(t.notes)  # a note's text goes into the context once
    assert prompts.picked_notes(turn(3, verdict(Category.NUMERICAL, message="wrong"))) == []


def test_the_feedback_names_the_notes_the_next_message_carries():
    """Notes are picked in one place (knowledge.for_profile): the technique titles the verdict's feedback names
    are the notes the next message carries. The judge's feedback once picked three while the message took two,
    so where a third note matched, the feedback named a technique whose text the model never got."""
    from kernelfix.tools.feedback import knowledge
    from kernelfix.tools.verdict import Finding, ProfileReport

    kinds = ["uncoalesced", "occupancy", "memory_bound"]
    assert len(knowledge.pick(kinds, k=3)) == 3  # a third match: where the two picks differed
    findings = [Finding(kind=k, kernel="k", share_pct=100.0, what=k, fix="fix it") for k in kinds]
    v = verdict(
        Category.OK,
        timings=Timings(candidate=stats(1.0), eager=stats(2.0)),
        speedup_eager=2.0,
        profile=ProfileReport(source="ncu", findings=findings),
    )
    notes = prompts.picked_notes(turn(1, v))
    named = next(line for line in v.feedback.splitlines() if line.startswith("Techniques for these findings:"))
    assert (
        named
        == f"Techniques for these findings: {'; '.join(n.title for n in notes)} (kernelfix.tools.feedback.knowledge)."
    )
    assert len(notes) == knowledge.NOTES_PER_TURN
