"""A search (--width N, --keep K) against an OpenAI-compatible server (tests/llm_stub.py): real HTTP, the CPU
judge, real git branches and SQLite checkpoints. Candidates that fail before running (no code, a syntax
error) keep each round cheap; one Triton kernel per test is judged for real (~10 s on two cores)."""

from __future__ import annotations

import json

import git
import pytest
from agent_support import NO_CODE, candidate_code, check_search_dir, make_session, reply
from llm_stub import StubLLM

from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.models import make_model

OK, WRONG, BROKEN = (
    reply("triton_relu_ok.py", "Use max."),
    reply("triton_wrong_values.py", "Leaky."),
    reply("syntax_error.py", "Draft."),
)


pytestmark = pytest.mark.xdist_group("litellm")  # its stub model is litellm's: one worker imports it, not both


@pytest.fixture
def cpu_judge(judges):
    return judges("relu", "cpu")


def stub_model(llm: StubLLM, **kw):
    return make_model("openai/stub", AgentConfig(api_base=llm.url, retry_attempts=1, **kw), api_key="stub")


def test_width_3_draws_3_replies_judges_all_3_and_keeps_the_right_one(tmp_path, cpu_judge):
    round_two = [NO_CODE, reply("syntax_error.py", "Try again."), NO_CODE]
    with StubLLM([[BROKEN, WRONG, OK], round_two]) as llm:
        # untimed_goal off: on CPU the correct kernel would otherwise end the session after round one
        s = make_session(tmp_path, stub_model(llm), cpu_judge, width=3, keep=1, max_turns=2, untimed_goal=False)
        outcome = s.run()
        first = [d for d in llm.deliveries if d.index == 0]
        assert len(first) == 3 and all(d.complete and d.n == 1 for d in first), (
            llm.deliveries
        )  # exactly three, each drawn once
        assert len(llm.deliveries) == 6
    traj = check_search_dir(s.store.path)
    r1, r2 = traj.rounds
    one = {t.index: t for t in traj.turns if t.round == 1}
    assert sorted(one) == [1, 2, 3] and all(t.parent is None for t in one.values())
    assert sorted(t.reply.content for t in one.values()) == sorted([BROKEN, WRONG, OK])  # all three judged
    assert sorted(t.verdict.category.value for t in one.values()) == [
        "compile_error:syntax",
        "correctness_error:numerical",
        "ok",
    ]
    right = next(t for t in one.values() if t.correct)
    assert r1.kept == [right.index] and [s.status for s in r1.slots] == ["judged"] * 3
    assert (s.store.path / "best.py").read_text() == candidate_code("triton_relu_ok.py")
    assert (
        outcome.best_turn == right.index and outcome.stop_kind == "max_turns" and "2 of 2 rounds" in outcome.stop_reason
    )

    # Round two continues only the kept branch, each child from its conversation (the other branches unseen).
    two = [t for t in traj.turns if t.round == 2]
    assert [t.parent for t in two] == [right.index] * 3 and len(r2.slots) == 3
    assert right.branch in {t.branch for t in two} and len({t.branch for t in two}) == 3  # one continues it, two fork
    sent = "\n".join(m.content for m in two[0].messages)
    assert OK in sent and right.feedback in sent and WRONG not in sent and BROKEN not in sent

    # Each branch is a git branch; each candidate's commit is a child of its parent's.
    repo = git.Repo(s.store.path)
    assert {h.name for h in repo.heads} >= {t.branch for t in traj.turns}
    for t in two:
        assert repo.commit(t.commit).parents[0].hexsha == right.commit
    assert repo.head.ref.name == right.branch  # HEAD follows the best path
    journal = [json.loads(x)["call_index"] for x in (s.store.path / "replies.jsonl").read_text().splitlines()]
    assert sorted(journal) == [0, 1, 2, 3, 4, 5]


def test_a_round_stops_drawing_once_a_candidate_meets_the_goal(tmp_path, cpu_judge):
    slow = [NO_CODE + f"\n\n(slow reply {i})" for i in range(2)]
    with StubLLM([[OK, *slow]]) as llm:
        for text in slow:
            llm.delay_s[text] = (
                2.0  # 12 chunks: 24 s, far longer than judging the correct kernel (cut off within 2 s of it)
            )
        s = make_session(tmp_path, stub_model(llm), cpu_judge, width=3, max_turns=3)
        outcome = s.run()
        assert [d.complete for d in llm.deliveries].count(True) == 1, llm.deliveries  # the slow two were cut off
        assert len(llm.deliveries) == 3
    traj = check_search_dir(s.store.path)
    assert [t.verdict.category.value for t in traj.turns] == ["ok"] and outcome.stop_kind == "goal"
    (r1,) = traj.rounds
    cut = [x for x in r1.slots if x.status == "cancelled"]
    assert len(cut) == 2 and all("met the goal" in x.reason for x in cut), r1.slots
    assert len((s.store.path / "replies.jsonl").read_text().splitlines()) == 1  # nothing else was paid for in full


def test_n_sampling_draws_a_round_in_one_call(tmp_path, cpu_judge):
    with StubLLM([[NO_CODE, BROKEN, NO_CODE + " (third)"]]) as llm:
        s = make_session(tmp_path, stub_model(llm), cpu_judge, width=3, max_turns=1, sampling="n")
        s.run()
        assert [(d.index, d.n, d.complete) for d in llm.deliveries] == [(0, 3, True)]
    traj = check_search_dir(s.store.path)
    assert sorted(t.reply.content for t in traj.turns) == sorted([NO_CODE, BROKEN, NO_CODE + " (third)"])
    # one call's usage, shared out: the prompt billed once, the completion tokens in full
    u = [t.usage for t in traj.turns]
    assert sum(x.prompt_tokens for x in u) == 100 and sum(x.completion_tokens for x in u) == sum(
        len(t.reply.content) // 4 for t in traj.turns
    )
