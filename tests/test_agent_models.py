"""Models: the replay file, and litellm (through its mock responses) with tenacity retries."""

from __future__ import annotations

import httpx
import pytest
from tenacity import wait_none

from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.models import (
    LiteLLMModel,
    ModelError,
    ReplayExhausted,
    ReplayModel,
    is_retryable,
    make_model,
    split_reasoning,
)
from kernelfix.agent.state import ChatMessage

pytestmark = pytest.mark.xdist_group("litellm")  # one worker imports litellm (seconds), not both: see lite()

MSGS = [ChatMessage(role="system", content="be brief"), ChatMessage(role="user", content="write a kernel")]
MODEL = "openai/gpt-4o-mini"  # a model litellm has prices for; never called: every response is a mock


def mock(*responses, **cfg) -> LiteLLMModel:
    return LiteLLMModel(MODEL, AgentConfig(**cfg), wait=wait_none(), mock_responses=list(responses))


def lite():
    """litellm, imported by the tests that use it rather than at collection: its import takes seconds, and every
    xdist worker collects every file."""
    import litellm
    import litellm.exceptions  # PermissionDeniedError lives here in every litellm since 1.60; the top level exports it only in later ones

    return litellm


def err(name, msg="nope"):
    return getattr(lite(), name)(message=msg, llm_provider="openai", model="gpt-4o-mini")


def test_replay_answers_in_order_streams_and_runs_out(tmp_path):
    f = tmp_path / "r.jsonl"
    f.write_text('{"content": "one\\ntwo\\n", "reasoning_content": "why"}\n\n{"content": "three"}\n')
    m = make_model(f"replay:{f}", AgentConfig())
    assert isinstance(m, ReplayModel) and m.name == f"replay:{f}"
    deltas = []
    r = m.complete(MSGS, call_index=0, on_delta=lambda ch, text: deltas.append((ch, text)))
    assert (r.content, r.reasoning_content) == ("one\ntwo\n", "why")
    assert deltas == [("reasoning", "why"), ("content", "one\n"), ("content", "two\n")]
    assert m.complete(MSGS, call_index=1).content == "three"
    assert m.complete(MSGS, call_index=0).content == "one\ntwo\n"  # by index: a resumed session gets the same reply
    with pytest.raises(ReplayExhausted, match="ran out after 2 replies"):
        m.complete(MSGS, call_index=2)


@pytest.mark.parametrize(
    "text,match",
    [('{"content": "a"}\nnot json\n', "line 2"), ('{"reasoning_content": "x"}\n', "line 1"), ("", "no replies")],
)
def test_replay_file_errors_are_clear(tmp_path, text, match):
    f = tmp_path / "r.jsonl"
    f.write_text(text)
    with pytest.raises(ValueError, match=match):
        ReplayModel(f)
    with pytest.raises(ValueError, match="cannot read"):
        ReplayModel(tmp_path / "missing.jsonl")


def test_litellm_streams_and_records_tokens_cost_reasoning():
    reply = lite().ModelResponse(
        choices=[{"message": {"role": "assistant", "content": "the answer", "reasoning_content": "the thinking"}}]
    )
    deltas = []
    r = mock(reply).complete(MSGS, call_index=0, on_delta=lambda ch, text: deltas.append((ch, text)))
    assert r.content == "the answer" and r.reasoning_content == "the thinking"
    assert ("reasoning", "the thinking") in deltas and "".join(t for ch, t in deltas if ch == "content") == "the answer"
    u = r.usage
    assert u.completion_tokens and u.completion_tokens > 0 and u.prompt_tokens is not None
    assert u.cost_usd is not None and u.cost_usd > 0  # litellm knows this model's price
    assert u.attempts == 1 and u.latency_s is not None


def test_litellm_without_streaming():
    r = mock("plain reply", stream=False).complete(MSGS, call_index=0)
    assert r.content == "plain reply" and r.usage.attempts == 1


def test_rate_limit_timeout_and_5xx_are_retried():
    retries = []
    m = mock(
        err("RateLimitError"),
        err("Timeout"),
        err("InternalServerError"),
        err("ServiceUnavailableError"),
        "finally",
        retry_attempts=5,
    )
    r = m.complete(MSGS, call_index=0, on_retry=lambda n, e, w: retries.append((n, e.split(":")[0], w)))
    assert r.content == "finally" and r.usage.attempts == 5
    assert [n for n, _, _ in retries] == [1, 2, 3, 4]
    assert [e for _, e, _ in retries] == ["RateLimitError", "Timeout", "InternalServerError", "ServiceUnavailableError"]


def test_retries_run_out():
    m = mock(*[err("RateLimitError")] * 3, retry_attempts=3)
    with pytest.raises(ModelError, match="still failing after 3 attempts") as e:
        m.complete(MSGS, call_index=0)
    assert e.value.kind == "unavailable"


@pytest.mark.parametrize(
    "make_exc,kind,match",
    [
        (lambda: err("AuthenticationError", "Incorrect API key"), "config", "API key was refused"),
        (lambda: err("NotFoundError", "model does not exist"), "config", "unknown"),
        (
            lambda: lite().exceptions.PermissionDeniedError(
                message="nope",
                llm_provider="openai",
                model="gpt-4o-mini",
                response=httpx.Response(403, request=httpx.Request("POST", "http://x")),
            ),
            "config",
            "permission denied",
        ),
        (lambda: err("ContextWindowExceededError", "too long"), "request", "refused the request"),
    ],
    ids=["auth", "not-found", "permission", "context-window"],
)
def test_fatal_errors_are_not_retried(make_exc, kind, match):
    exc = make_exc()
    retries = []
    m = mock(exc, "never reached")
    with pytest.raises(ModelError, match=match) as e:
        m.complete(MSGS, call_index=0, on_retry=lambda *a: retries.append(a))
    assert e.value.kind == kind and retries == []
    assert not is_retryable(exc)


def test_unknown_provider_fails_before_any_call():
    with pytest.raises(ModelError, match="cannot route model") as e:
        make_model("nosuchprovider/some-model", AgentConfig())
    assert e.value.kind == "config"


def test_inline_think_tags_are_split_off():
    assert split_reasoning("<think>\nplan\n</think>\n\nanswer", None) == ("answer", "plan")
    assert split_reasoning("answer", None) == ("answer", None)
    assert split_reasoning("<think>x</think>answer", "given") == ("<think>x</think>answer", "given")
