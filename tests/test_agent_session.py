"""The whole graph on CPU with replay models: real judge, real git history, real SQLite checkpoints."""

from __future__ import annotations

import json
import threading

import pytest
from agent_support import (
    NO_CODE,
    TASK,
    candidate_code,
    check_session_dir,
    make_session,
    replay_session,
    reply,
    write_replay,
)
from tenacity import wait_none

from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.events import (
    ModelDelta,
    ModelRetry,
    SessionEnded,
    SessionPaused,
    SessionStarted,
    SessionUnpaused,
    StageUpdate,
    TurnJudged,
)
from kernelfix.agent.models import LiteLLMModel, ModelError, ReplayModel
from kernelfix.agent.session import Session
from kernelfix.agent.session_dir import SessionDir
from kernelfix.agent.state import Trajectory
from kernelfix.tools.evaluation import STAGES
from kernelfix.tools.verdict import Verdict


@pytest.fixture
def cpu_judge(judges):
    return judges("relu", "cpu")


def categories(traj: Trajectory) -> list[str]:
    return [t.verdict.category.value for t in traj.turns]


def test_broken_wrong_correct_then_worse_keeps_the_best(tmp_path, cpu_judge):
    lines = [
        {"content": reply("syntax_error.py", "First try."), "reasoning_content": "REASONING-1"},
        {"content": reply("triton_wrong_values.py", "Fixed the syntax."), "reasoning_content": "REASONING-2"},
        {"content": reply("triton_relu_ok.py", "Use max, not leaky."), "reasoning_content": "REASONING-3"},
        {"content": reply("triton_wrong_shape.py", "Try a different layout.")},
    ]
    # untimed_goal off: on cpu the correct turn 3 does not end the session, so turn 4 (wrong) follows it
    s = replay_session(tmp_path, lines, cpu_judge, max_turns=4, untimed_goal=False)
    outcome = s.run()
    traj = check_session_dir(s.store.path)
    assert categories(traj) == ["compile_error:syntax", "correctness_error:numerical", "ok", "correctness_error:shape"]
    assert outcome.finished and outcome.success and outcome.stop_kind == "max_turns"
    assert outcome.best_turn == 3 and traj.outcome == outcome
    assert (s.store.path / "best.py").read_text() == candidate_code("triton_relu_ok.py")
    assert "[best]" in s.store.repo.commit(traj.turns[2].commit).message
    assert "[best]" not in s.store.repo.commit(traj.turns[3].commit).message

    t1, t2, t3, t4 = traj.turns
    # per turn: messages sent, reply and reasoning received, extracted code, tokens/timings
    assert t1.reply.reasoning_content == "REASONING-1" and t1.code == candidate_code("syntax_error.py")
    assert [m.role for m in t1.messages] == ["system", "user"]
    assert [m.role for m in t3.messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    sent = "\n".join(m.content for m in t4.messages)
    assert "REASONING" not in sent  # earlier reasoning is dropped from the context
    assert t1.reply.content in sent and t2.reply.content in sent  # code and feedback stay
    assert t1.feedback in sent and t2.feedback in sent and t3.feedback in sent
    assert "rejected: `compile_error:syntax`" in t1.feedback and "Turn 3 passed." in t3.feedback
    assert "max abs error" in t2.feedback
    assert all(t.usage.attempts == 1 and t.judge_s is not None and t.wall_s >= t.judge_s for t in traj.turns)

    # trajectory.json's verdicts are exactly `kernelfix eval --json`'s JSON
    raw = json.loads((s.store.path / "trajectory.json").read_text())
    for t, rt in zip(traj.turns, raw["turns"]):
        assert (
            rt["verdict"]
            == json.loads(t.verdict.model_dump_json())
            == Verdict.model_validate(rt["verdict"]).model_dump(mode="json")
        )

    # events: every judge stage of every turn, one TurnJudged per turn, start and end
    ev = s.events
    assert isinstance(ev[0], SessionStarted) and isinstance(ev[-1], SessionEnded)
    assert [e.turn.index for e in ev if isinstance(e, TurnJudged)] == [1, 2, 3, 4]
    streamed = "".join(e.text for e in ev if isinstance(e, ModelDelta) and e.turn == 1 and e.channel == "content")
    assert streamed == t1.reply.content
    finished = {
        (e.turn, e.event.stage) for e in ev if isinstance(e, StageUpdate) and e.event.status in ("finished", "skipped")
    }
    assert {(i, st) for i in (1, 2, 3, 4) for st in STAGES} <= finished


def test_max_turns_then_resume_with_more(tmp_path, cpu_judge):
    s = replay_session(tmp_path, [NO_CODE, reply("syntax_error.py"), NO_CODE], cpu_judge, max_turns=2)
    outcome = s.run()
    assert outcome.finished and not outcome.success
    assert outcome.stop_kind == "max_turns" and outcome.stop_reason == "max turns reached: 2 of 2 model turns"
    assert categories(check_session_dir(s.store.path)) == ["format_error:no_code", "compile_error:syntax"]

    # a resume under the same limit changes nothing; a higher one continues
    again = Session.open(s.store.path, s.model, judge=cpu_judge).run()
    assert again.stop_kind == "max_turns" and len(check_session_dir(s.store.path).turns) == 2
    SessionDir.open(s.store.path).change_agent_settings(s.store.settings.agent.model_copy(update={"max_turns": 5}))
    assert s.store.repo.head.commit.message == "settings: max_turns 2 -> 5\n"
    more = Session.open(s.store.path, s.model, judge=cpu_judge).run()
    traj = check_session_dir(s.store.path)
    assert categories(traj) == ["format_error:no_code", "compile_error:syntax", "format_error:no_code"]
    assert more.stop_kind == "replay_end" and "ran out after 3 replies" in more.stop_reason


def test_candidate_is_turn_zero_in_repair_mode(tmp_path, cpu_judge):
    s = Session.create(
        tmp_path / "s",
        task_path=TASK,
        model=ReplayModel(write_replay(tmp_path / "r.jsonl", [NO_CODE])),
        agent=AgentConfig(max_turns=1, shape_block=False),
        judge_config=cpu_judge.config,
        judge=cpu_judge,
        candidate=candidate_code("syntax_error.py"),
        candidate_name="syntax_error.py",
    )
    s.run()
    traj = check_session_dir(s.store.path)
    t0, t1 = traj.turns
    assert (t0.index, t0.source, t0.verdict.category.value) == (0, "candidate", "compile_error:syntax")
    assert t0.messages == [] and t0.reply is None
    first_prompt = t1.messages[1].content
    assert candidate_code("syntax_error.py").strip() in first_prompt and t0.feedback in first_prompt


def test_controls_hint_user_candidate_pause_and_accept(tmp_path, cpu_judge):
    s = replay_session(tmp_path, [NO_CODE] * 5, cpu_judge)
    c = s.controls
    seen = []

    def steer(e):
        seen.append(e)
        if isinstance(e, TurnJudged) and e.turn.index == 1:
            c.hint("mask the tail")
            c.submit_candidate(candidate_code("syntax_error.py"))
        elif isinstance(e, TurnJudged) and e.turn.index == 2:
            c.pause()
        elif isinstance(e, SessionPaused):
            threading.Timer(0.3, c.resume).start()  # from another thread, while the loop waits
        elif isinstance(e, TurnJudged) and e.turn.index == 3:
            c.accept()

    s._on_event = steer
    outcome = s.run()
    traj = check_session_dir(s.store.path)
    assert [(t.index, t.source) for t in traj.turns] == [(1, "model"), (2, "user"), (3, "model")]
    assert traj.turns[1].verdict.category.value == "compile_error:syntax"
    assert (
        traj.turns[2].hints == ["mask the tail"]
        and "A hint from the user: mask the tail" in traj.turns[2].messages[-1].content
    )
    assert "edited by the user" in traj.turns[2].messages[-1].content  # the user's candidate is in the context
    kinds = [type(e) for e in seen]
    assert kinds.index(SessionPaused) < kinds.index(SessionUnpaused)
    assert outcome.stop_kind == "user_accept" and outcome.finished


@pytest.mark.xdist_group("litellm")  # with test_agent_models: one worker imports litellm (seconds), not both
def test_model_error_retried_inside_a_session(tmp_path, cpu_judge):
    import litellm

    model = LiteLLMModel(
        "openai/gpt-4o-mini",
        AgentConfig(),
        wait=wait_none(),
        mock_responses=[
            litellm.RateLimitError(message="slow down", llm_provider="openai", model="gpt-4o-mini"),
            NO_CODE,
        ],
    )
    s = make_session(tmp_path, model, cpu_judge, max_turns=1)
    s.run()
    traj = check_session_dir(s.store.path)
    (t1,) = traj.turns
    assert t1.usage.attempts == 2 and t1.usage.completion_tokens and t1.usage.cost_usd is not None
    retries = [e for e in s.events if isinstance(e, ModelRetry)]
    assert len(retries) == 1 and "RateLimitError" in retries[0].error and retries[0].turn == 1


@pytest.mark.xdist_group("litellm")
def test_fatal_model_error_stops_at_once_and_the_session_resumes(tmp_path, cpu_judge):
    import litellm

    bad = LiteLLMModel(
        "openai/gpt-4o-mini",
        AgentConfig(),
        wait=wait_none(),
        mock_responses=[
            litellm.AuthenticationError(message="Incorrect API key", llm_provider="openai", model="gpt-4o-mini")
        ],
    )
    s = make_session(tmp_path, bad, cpu_judge, max_turns=1)
    with pytest.raises(ModelError, match="API key was refused") as e:
        s.run()
    assert e.value.kind == "config"
    traj = Trajectory.model_validate_json((s.store.path / "trajectory.json").read_text())
    assert not traj.outcome.finished and traj.turns == [] and "kernelfix resume" in traj.outcome.stop_reason
    assert isinstance(s.events[-1], SessionEnded) and not s.events[-1].outcome.finished
    # with the key fixed, the same session continues from its checkpoint
    good = LiteLLMModel("openai/gpt-4o-mini", AgentConfig(), wait=wait_none(), mock_responses=[NO_CODE])
    outcome = Session.open(s.store.path, good, judge=cpu_judge).run()
    assert outcome.finished and categories(check_session_dir(s.store.path)) == ["format_error:no_code"]


def test_a_running_session_cannot_be_opened_twice(tmp_path, cpu_judge):
    from kernelfix.agent.session_dir import SessionError

    s = replay_session(tmp_path, [NO_CODE], cpu_judge, max_turns=1)
    s.store.lock()
    other = SessionDir.open(s.store.path)
    with pytest.raises(SessionError, match="in use"):
        other.lock()
    s.store.unlock()
    other.lock()
    other.unlock()


def test_controls_are_thread_safe_and_rearm_for_a_new_run():
    from kernelfix.agent.events import Controls

    c = Controls()
    c.pause()
    assert c.wait_while_paused(timeout=0.05) is False  # paused with nothing to do: keeps waiting
    threading.Timer(0.1, c.submit_candidate, args=("class ModelNew: ...",)).start()
    assert c.wait_while_paused(timeout=5) is True and c.paused  # a submitted candidate is judged while paused
    assert c.take_candidate() == "class ModelNew: ..." and c.take_candidate() is None
    c.hint("  ")
    c.hint(" unroll by 4 ")
    assert c.take_hints() == ["unroll by 4"] and c.take_hints() == []
    c.stop()
    c.accept()
    assert c.stop_requested and c.accept_requested
    c.rearm()
    assert not c.stop_requested and not c.accept_requested


def test_opening_a_session_clears_what_a_killed_judge_left_in_its_work_tree(tmp_path, cpu_judge):
    """A kill that lands while the judge writes a worker's spec (work/reference/) leaves a hidden temp file there; the
    crash test met one after a resume (the session root and turns/ were cleared, not work/). Taking the lock clears it;
    what is not a temp file stays."""
    s = replay_session(tmp_path, [NO_CODE], cpu_judge, max_turns=1)
    ref = s.store.path / "work" / "reference"
    ref.mkdir(parents=True, exist_ok=True)
    stale = ref / ".reference.spec.json.626cb012.kftmp"
    stale.write_text("{")
    kept = ref / "reference.spec.json"
    kept.write_text("{}")
    other = SessionDir.open(s.store.path)
    other.lock()
    other.unlock()
    assert not stale.exists() and kept.exists()
