"""Language models for the loop: any litellm model, or a replay of recorded replies.

``make_model("openai/gpt-4o", ...)`` calls litellm (streaming, retried with
tenacity on rate limits, timeouts, connection errors and 5xx); a bad key, an
unknown model or a rejected request fails at once. ``make_model("replay:PATH")``
answers from a JSONL file, one ``{"content": ..., "reasoning_content": ...}``
line per model turn, so tests and demos run without any API.
"""

from __future__ import annotations

import json
import os
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

# Offline machines must not try to fetch litellm's price list at import.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from pydantic import BaseModel, ConfigDict, ValidationError  # noqa: E402
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter  # noqa: E402
from tenacity.wait import wait_base  # noqa: E402

from kernelfix.agent.config import AgentConfig  # noqa: E402
from kernelfix.agent.state import ChatMessage, Usage  # noqa: E402

REPLAY_PREFIX = "replay:"

DeltaSink = Callable[[Literal["content", "reasoning"], str], None]
RetrySink = Callable[[int, str, float], None]  # attempt, error, seconds until the next try


class ModelError(Exception):
    """A model call failed for good.

    kind: ``config`` (bad key, unknown model, no permission: fix the settings),
    ``request`` (the provider refused this request, e.g. context too long),
    ``unavailable`` (still failing after every retry).
    """

    def __init__(self, message: str, kind: Literal["config", "request", "unavailable"]):
        super().__init__(message)
        self.kind = kind


class ReplayExhausted(Exception):
    """A replay file has no line for this model turn: the recorded session is over."""


class ModelReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str
    reasoning_content: str | None = None
    usage: Usage


class ChatModel(ABC):
    name: str

    @abstractmethod
    def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        call_index: int,
        on_delta: DeltaSink | None = None,
        on_retry: RetrySink | None = None,
    ) -> ModelReply:
        """The reply to ``messages``; ``call_index`` counts earlier replies in this session (0-based)."""


_THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.S)


def split_reasoning(content: str, reasoning: str | None) -> tuple[str, str | None]:
    """Separate ``<think>`` reasoning that a server left inline in the answer."""
    if reasoning:
        return content, reasoning
    m = _THINK.match(content)
    if m:
        return content[m.end() :], m.group(1).strip() or None
    return content, None


# --------------------------------------------------------------------------- replay


class ReplayLine(BaseModel):
    model_config = ConfigDict(extra="ignore")

    content: str
    reasoning_content: str | None = None


class ReplayModel(ChatModel):
    """Answers model turn ``i`` with line ``i`` of a JSONL file; deterministic across resumes."""

    def __init__(self, path: str | Path):
        self.path = Path(path).resolve()
        self.name = f"{REPLAY_PREFIX}{self.path}"  # absolute: a resume may run from another directory
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"cannot read replay file {self.path}: {e}") from None
        self.lines: list[ReplayLine] = []
        for n, raw in enumerate(text.splitlines(), 1):
            if not raw.strip():
                continue
            try:
                self.lines.append(ReplayLine.model_validate(json.loads(raw)))
            except (ValueError, ValidationError) as e:
                first = str(e).splitlines()[0]
                raise ValueError(
                    f'{self.path} line {n}: expected a JSON object {{"content": "...", "reasoning_content": "..."}}: {first}'
                ) from None
        if not self.lines:
            raise ValueError(f"replay file {self.path} has no replies")

    def complete(self, messages, *, call_index, on_delta=None, on_retry=None) -> ModelReply:
        if call_index >= len(self.lines):
            raise ReplayExhausted(f"replay file {self.path} ran out after {len(self.lines)} replies")
        line = self.lines[call_index]
        t0 = time.monotonic()
        if on_delta:
            if line.reasoning_content:
                on_delta("reasoning", line.reasoning_content)
            for piece in line.content.splitlines(keepends=True):
                on_delta("content", piece)
        return ModelReply(
            content=line.content,
            reasoning_content=line.reasoning_content,
            usage=Usage(latency_s=round(time.monotonic() - t0, 4), attempts=1, cost_usd=0.0),
        )


# --------------------------------------------------------------------------- litellm


def _litellm():
    import litellm

    litellm.suppress_debug_info = True  # its provider-list banner goes to stdout
    return litellm


def is_retryable(exc: BaseException) -> bool:
    """Rate limits, timeouts, dropped connections and server errors are worth another try; nothing else."""
    import openai

    litellm = _litellm()
    fatal = (
        openai.AuthenticationError,
        openai.PermissionDeniedError,
        openai.NotFoundError,
        openai.BadRequestError,
        openai.UnprocessableEntityError,
    )
    if isinstance(exc, fatal):
        return False
    retryable = (
        openai.RateLimitError,
        openai.APITimeoutError,
        openai.APIConnectionError,
        openai.InternalServerError,
        litellm.ServiceUnavailableError,
        litellm.BadGatewayError,
    )
    if isinstance(exc, retryable):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status >= 500 or status in (408, 429))


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:500]}"


def _give_up(exc: BaseException, model: str, attempts: int) -> ModelError:
    import openai

    if is_retryable(exc):
        return ModelError(f"model {model} still failing after {attempts} attempts: {_describe(exc)}", "unavailable")
    if isinstance(exc, openai.AuthenticationError):
        return ModelError(f"model {model}: the API key was refused ({_describe(exc)}); set the key (see --api-key-env)", "config")
    if isinstance(exc, openai.PermissionDeniedError):
        return ModelError(f"model {model}: permission denied ({_describe(exc)})", "config")
    if isinstance(exc, openai.NotFoundError) or "LLM Provider NOT provided" in str(exc):
        return ModelError(f"model {model} is unknown to the provider or to litellm ({_describe(exc)})", "config")
    return ModelError(f"model {model} refused the request: {_describe(exc)}", "request")


def check_model_name(model: str, api_base: str | None = None) -> None:
    """Fail at once (ModelError kind config) for a model string litellm cannot route."""
    litellm = _litellm()
    try:
        litellm.get_llm_provider(model, api_base=api_base)
    except Exception as e:
        hint = " For an OpenAI-compatible server (vLLM, SGLang, Ollama, llama.cpp) use openai/NAME with --api-base." if api_base else ""
        raise ModelError(f"litellm cannot route model {model!r}: {' '.join(str(e).split())[:300]}.{hint}", "config") from None


class LiteLLMModel(ChatModel):
    """Any litellm model; retries are tenacity's, litellm's own are off."""

    def __init__(
        self,
        model: str,
        config: AgentConfig,
        *,
        api_key: str | None = None,
        wait: wait_base | None = None,
        mock_responses: Sequence[Any] | None = None,
    ):
        self.name = model
        self.config = config
        self.api_key = api_key
        self.wait = wait or wait_exponential_jitter(initial=config.retry_min_wait_s, max=config.retry_max_wait_s)
        # litellm's mock_response for successive calls (strings, ModelResponse dicts or exceptions): tests and demos.
        self._mocks = list(mock_responses) if mock_responses is not None else None

    def _kwargs(self) -> dict[str, Any]:
        c = self.config
        kw: dict[str, Any] = {"model": self.name, "timeout": c.request_timeout_s, "num_retries": 0, "drop_params": True}
        if c.api_base:
            kw["api_base"] = c.api_base
        if self.api_key:
            kw["api_key"] = self.api_key
        if c.temperature is not None:
            kw["temperature"] = c.temperature
        if c.max_output_tokens is not None:
            kw["max_tokens"] = c.max_output_tokens
        if self._mocks is not None:
            if not self._mocks:
                raise RuntimeError("no mock response left for this call")
            kw["mock_response"] = self._mocks.pop(0)
        return kw

    def _once(self, payload: list[dict[str, str]], on_delta: DeltaSink | None) -> tuple[Any, float]:
        litellm = _litellm()
        t0 = time.monotonic()
        kw = self._kwargs()
        if not self.config.stream:
            return litellm.completion(messages=payload, **kw), time.monotonic() - t0
        chunks = []
        for chunk in litellm.completion(messages=payload, stream=True, stream_options={"include_usage": True}, **kw):
            chunks.append(chunk)
            delta = chunk.choices[0].delta if chunk.choices else None
            if delta is not None and on_delta is not None:
                if getattr(delta, "reasoning_content", None):
                    on_delta("reasoning", delta.reasoning_content)
                if delta.content:
                    on_delta("content", delta.content)
        return litellm.stream_chunk_builder(chunks, messages=payload), time.monotonic() - t0

    def complete(self, messages, *, call_index, on_delta=None, on_retry=None) -> ModelReply:
        litellm = _litellm()
        payload = [{"role": m.role, "content": m.content} for m in messages]
        attempts = 0

        def attempt() -> tuple[Any, float]:
            nonlocal attempts
            attempts += 1
            return self._once(payload, on_delta)

        def before_sleep(rs: RetryCallState) -> None:
            if on_retry is not None and rs.outcome is not None:
                on_retry(rs.attempt_number, _describe(rs.outcome.exception()), rs.next_action.sleep if rs.next_action else 0.0)

        retrying = Retrying(
            stop=stop_after_attempt(self.config.retry_attempts),
            wait=self.wait,
            retry=retry_if_exception(is_retryable),
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            response, latency = retrying(attempt)
        except Exception as e:
            raise _give_up(e, self.name, attempts) from e
        if response is None or not response.choices:
            raise ModelError(f"model {self.name} returned no choices", "request")
        msg = response.choices[0].message
        content, reasoning = split_reasoning(msg.content or "", getattr(msg, "reasoning_content", None))
        usage = getattr(response, "usage", None)
        try:
            cost = float(litellm.completion_cost(completion_response=response))
        except Exception:  # models litellm has no price for (local servers): unknown, not zero
            cost = None
        return ModelReply(
            content=content,
            reasoning_content=reasoning,
            usage=Usage(
                prompt_tokens=getattr(usage, "prompt_tokens", None),
                completion_tokens=getattr(usage, "completion_tokens", None),
                cost_usd=cost,
                latency_s=round(latency, 4),
                attempts=attempts,
            ),
        )


def make_model(spec: str, config: AgentConfig, *, api_key: str | None = None, **kwargs: Any) -> ChatModel:
    """``replay:PATH`` or a litellm model string. Raises ValueError / ModelError (kind config) on bad input."""
    if spec.startswith(REPLAY_PREFIX):
        return ReplayModel(spec[len(REPLAY_PREFIX) :])
    check_model_name(spec, config.api_base)
    return LiteLLMModel(spec, config, api_key=api_key, **kwargs)
