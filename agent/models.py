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

from kernelfix.agent.agent_config import AgentConfig  # noqa: E402
from kernelfix.agent.state import ChatMessage, Usage  # noqa: E402

REPLAY_PREFIX = "replay:"

DeltaSink = Callable[[Literal["content", "reasoning"], str], None]
ChoiceDeltaSink = Callable[[int, Literal["content", "reasoning"], str], None]  # choice (0-based), channel, text
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


class DrawCancelled(Exception):
    """Raised by a delta sink to stop a reply mid-stream: its round no longer needs it (the goal was met,
    a budget ran out, the user left). Passes through retries and is never a ModelError."""


class ModelReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str
    reasoning_content: str | None = None
    usage: Usage


class ChatModel(ABC):
    name: str
    supports_n: bool = False  # complete_n draws several replies in one call

    def complete_n(
        self,
        messages: Sequence[ChatMessage],
        *,
        call_indices: Sequence[int],
        on_delta: ChoiceDeltaSink | None = None,
        on_retry: RetrySink | None = None,
    ) -> list[ModelReply]:
        """Replies to one prompt, one per call index, from one call (``n=``). May return fewer than asked
        (a provider that ignores ``n``); the caller draws the rest one by one."""
        raise NotImplementedError(f"{type(self).__name__} draws one reply per call")

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
    """Answers model turn ``i`` with line ``i`` of a JSONL file; deterministic across resumes.

    With width > 1 a round's slots take consecutive lines (round one of width 3: lines 0, 1, 2)."""

    supports_n = True

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
                if isinstance(e, ValidationError):
                    from kernelfix.base.settings_errors import problems

                    first = problems(e, ReplayLine, lambda loc: f'"{loc[0]}"' if loc else "the line", assign=": ")[0]
                else:
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

    def complete_n(self, messages, *, call_indices, on_delta=None, on_retry=None) -> list[ModelReply]:
        out = []
        for choice, index in enumerate(call_indices):
            if index >= len(self.lines):
                break  # the caller asks for the rest one by one, and meets ReplayExhausted there
            sink = (lambda ch, text, c=choice: on_delta(c, ch, text)) if on_delta else None
            out.append(self.complete(messages, call_index=index, on_delta=sink))
        return out


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
        return ModelError(
            f"model {model}: the API key was refused ({_describe(exc)}); set the key (see --api-key-env)", "config"
        )
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
        hint = (
            " For an OpenAI-compatible server (vLLM, SGLang, Ollama, llama.cpp) use openai/NAME with --api-base."
            if api_base
            else ""
        )
        raise ModelError(
            f"litellm cannot route model {model!r}: {' '.join(str(e).split())[:300]}.{hint}", "config"
        ) from None


class LiteLLMModel(ChatModel):
    """Any litellm model; retries are tenacity's, litellm's own are off."""

    supports_n = True  # sent as n=; a provider that drops it returns one choice and the caller draws the rest

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

    def _once(
        self, payload: list[dict[str, str]], on_delta: ChoiceDeltaSink | None, n: int = 1
    ) -> tuple[Any, list[tuple[str, str | None]], float]:
        """One call: the response, each choice's (content, reasoning) in choice order, and the latency."""
        litellm = _litellm()
        t0 = time.monotonic()
        kw = self._kwargs()
        if n > 1:
            kw["n"] = n
        if not self.config.stream:
            response = litellm.completion(messages=payload, **kw)
            texts = [
                (c.message.content or "", getattr(c.message, "reasoning_content", None)) for c in response.choices or []
            ]
            return response, texts, time.monotonic() - t0
        chunks = []
        parts: dict[int, list[list[str]]] = {}  # choice -> [content pieces, reasoning pieces]
        stream = litellm.completion(messages=payload, stream=True, stream_options={"include_usage": True}, **kw)
        try:
            for chunk in stream:
                chunks.append(chunk)
                for choice in chunk.choices or []:
                    delta, c = choice.delta, choice.index or 0
                    if delta is None:
                        continue
                    got = parts.setdefault(c, [[], []])
                    if getattr(delta, "reasoning_content", None):
                        got[1].append(delta.reasoning_content)
                        if on_delta is not None:
                            on_delta(c, "reasoning", delta.reasoning_content)
                    if delta.content:
                        got[0].append(delta.content)
                        if on_delta is not None:
                            on_delta(c, "content", delta.content)
        except DrawCancelled:
            # Close the connection now, so the server stops generating what nobody will read.
            close = getattr(getattr(stream, "completion_stream", None), "close", None)
            if close is not None:
                try:
                    close()
                except Exception:
                    pass
            raise
        texts = [("".join(parts[c][0]), "".join(parts[c][1]) or None) for c in sorted(parts)]
        return litellm.stream_chunk_builder(chunks, messages=payload), texts, time.monotonic() - t0

    def _call(
        self, messages, n: int, on_delta: ChoiceDeltaSink | None, on_retry: RetrySink | None
    ) -> tuple[Any, list[tuple[str, str | None]], float, int]:
        """``_once`` under the retry policy: (response, texts, latency, attempts); raises ModelError or DrawCancelled."""
        payload = [{"role": m.role, "content": m.content} for m in messages]
        attempts = 0

        def attempt():
            nonlocal attempts
            attempts += 1
            return self._once(payload, on_delta, n)

        def before_sleep(rs: RetryCallState) -> None:
            if on_retry is not None and rs.outcome is not None:
                on_retry(
                    rs.attempt_number,
                    _describe(rs.outcome.exception()),
                    rs.next_action.sleep if rs.next_action else 0.0,
                )

        retrying = Retrying(
            stop=stop_after_attempt(self.config.retry_attempts),
            wait=self.wait,
            retry=retry_if_exception(is_retryable),
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            response, texts, latency = retrying(attempt)
        except DrawCancelled:
            raise
        except Exception as e:
            raise _give_up(e, self.name, attempts) from e
        if response is None or not texts:
            raise ModelError(f"model {self.name} returned no choices", "request")
        return response, texts, latency, attempts

    def complete(self, messages, *, call_index, on_delta=None, on_retry=None) -> ModelReply:
        sink = (lambda c, ch, text: on_delta(ch, text)) if on_delta else None
        response, texts, latency, attempts = self._call(messages, 1, sink, on_retry)
        return self._replies(response, texts[:1], latency, attempts)[0]

    def complete_n(self, messages, *, call_indices, on_delta=None, on_retry=None) -> list[ModelReply]:
        response, texts, latency, attempts = self._call(messages, len(call_indices), on_delta, on_retry)
        return self._replies(response, texts[: len(call_indices)], latency, attempts)

    def _replies(
        self, response: Any, texts: list[tuple[str, str | None]], latency: float, attempts: int
    ) -> list[ModelReply]:
        """One ModelReply per choice. One call's usage is shared out: its prompt tokens (billed once) go to
        the first reply, its completion tokens and cost in proportion to each reply's length."""
        litellm = _litellm()
        usage = getattr(response, "usage", None)
        try:
            cost = float(litellm.completion_cost(completion_response=response))
        except Exception:  # models litellm has no price for (local servers): unknown, not zero
            cost = None
        prompt, completion = getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)
        weights = [len(c) + len(r or "") for c, r in texts]
        shares = _shares(weights)
        out = []
        for i, ((content, reasoning), share) in enumerate(zip(texts, shares)):
            content, reasoning = split_reasoning(content, reasoning)
            out.append(
                ModelReply(
                    content=content,
                    reasoning_content=reasoning,
                    usage=Usage(
                        prompt_tokens=(prompt if i == 0 else 0) if prompt is not None else None,
                        completion_tokens=_part(completion, shares, i),
                        cost_usd=None if cost is None else cost * share,
                        latency_s=round(latency, 4),
                        attempts=attempts,
                    ),
                )
            )
        return out


def _shares(weights: list[int]) -> list[float]:
    total = sum(weights)
    return [w / total for w in weights] if total else [1 / len(weights)] * len(weights)


def _part(total: int | None, shares: list[float], i: int) -> int | None:
    """Choice ``i``'s whole-token part of ``total``, so that the parts add up to ``total`` exactly."""
    if total is None:
        return None
    bounds = [round(total * sum(shares[:k])) for k in range(len(shares) + 1)]
    return bounds[i + 1] - bounds[i]


def make_model(spec: str, config: AgentConfig, *, api_key: str | None = None, **kwargs: Any) -> ChatModel:
    """``replay:PATH`` or a litellm model string. Raises ValueError / ModelError (kind config) on bad input."""
    if spec.startswith(REPLAY_PREFIX):
        return ReplayModel(spec[len(REPLAY_PREFIX) :])
    check_model_name(spec, config.api_base)
    return LiteLLMModel(spec, config, api_key=api_key, **kwargs)
