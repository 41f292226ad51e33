"""A reward function for TRL's ``GRPOTrainer(reward_funcs=...)``, judged by kernelfix.

    from kernelfix.rewards.trl import KernelReward

    reward = KernelReward()                                   # judges in this process, on this machine's GPUs
    reward = KernelReward(url="http://judge-host:8000")       # or a `kernelfix serve` (token: token= / token_file=)
    trainer = GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=dataset, args=GRPOConfig(...))

The dataset has a ``task`` column (``task_column``) with each prompt's task: its source text
or a path. TRL passes it, repeated per completion, with the completions; each completion (a
string, or chat messages: the last assistant message) is the model's reply, judged as
``kernelfix eval`` judges a saved reply (its last complete ```python block defines ModelNew).
An optional ``backward`` column judges the backward pass too. The whole batch is judged at
once; the reward is ``RewardConfig.score`` of each verdict (None, which TRL skips, where the
machine failed or the task does not run). Each call also logs the verdicts' categories and
effective speedups to TRL's completions table, and the ok rate as a metric.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from kernelfix.library.judge_pool import JudgeRequest
from kernelfix.library.sources import CandidateKind, task_source
from kernelfix.rewards import RewardConfig
from kernelfix.rewards.backend import Backend, make_backend

log = logging.getLogger("kernelfix.rewards")

__all__ = ["KernelReward", "completion_text"]


def completion_text(completion: Any) -> str:
    """A TRL completion as text: a string as it is; chat messages: the last assistant message's
    content (its text parts joined, for content given as parts)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        completion = [completion]
    if isinstance(completion, Sequence):
        for message in reversed(list(completion)):
            if isinstance(message, Mapping) and message.get("role", "assistant") == "assistant":
                content = message.get("content") or ""
                if isinstance(content, str):
                    return content
                return "".join(
                    p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type", "text") == "text"
                )
    raise TypeError(f"a completion is a string or chat messages, not {type(completion).__name__}")


class KernelReward:
    """Call with TRL's reward-function arguments: ``(prompts=, completions=, **columns)`` -> one reward per completion.

    ``url``: a ``kernelfix serve`` (with ``token`` / ``token_file``); without it, judges in this process
    (``config``: a JudgeConfig or its fields, ``device``, ``gpus``, ``per_gpu``). ``reward``: a
    RewardConfig or its fields. ``kind``: what a completion is ("reply", the default, or "code"). ``sanitize``:
    compute-sanitizer on wrong kernels (False by default: the reward never reads the cause it finds, and
    it costs 10-20 s of GPU per wrong kernel; None: the judge's config)."""

    def __init__(
        self,
        *,
        url: str | None = None,
        token: str | None = None,
        token_file: str | os.PathLike[str] | None = None,
        reward: RewardConfig | Mapping[str, Any] | None = None,
        config: Any = None,
        device: str | None = None,
        gpus: Sequence[str] | None = None,
        per_gpu: int = 2,
        task_column: str = "task",
        kind: CandidateKind = "reply",
        sanitize: bool | None = False,
        name: str = "kernelfix",
        backend: Backend | None = None,
    ):
        self.reward = reward if isinstance(reward, RewardConfig) else RewardConfig.model_validate(dict(reward or {}))
        self.task_column = task_column
        self.kind = kind
        self.sanitize = sanitize
        self.__name__ = name  # TRL names the reward's column and its timing after this
        if backend is None:
            options = (
                {"token": token, "token_file": token_file}
                if url
                else {"config": config, "device": device, "gpus": gpus, "per_gpu": per_gpu}
            )
            self._settings: dict[str, Any] | None = {"url": url, **options}
            self._backend: Backend | None = None
        else:
            self._settings, self._backend = None, backend
        self._tasks: dict[str, str] = {}  # a column's path -> its source, read once

    @property
    def backend(self) -> Backend:
        if self._backend is None:  # made at the first call: constructing the reward stays cheap (and picklable)
            assert self._settings is not None
            self._backend = make_backend(**self._settings)
        return self._backend

    def _task(self, value: str) -> str:
        if value not in self._tasks:
            self._tasks[value] = task_source(value)
        return self._tasks[value]

    def __call__(
        self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None, **kwargs: Any
    ) -> list[float | None]:
        if completions is None:
            raise TypeError("KernelReward is called with completions= (TRL's reward-function arguments)")
        tasks = kwargs.get(self.task_column)
        if tasks is None:
            raise KeyError(
                f"the dataset has no {self.task_column!r} column: each prompt's task (source text or path) goes there"
            )
        backward = kwargs.get("backward") or [None] * len(completions)
        requests = [
            JudgeRequest(
                task=self._task(t), candidate=completion_text(c), kind=self.kind, backward=b, sanitize=self.sanitize
            )
            for t, c, b in zip(tasks, completions, backward, strict=True)
        ]
        outcomes = self.backend.judge(requests)
        rewards, categories, speedups = [], [], []
        for o in outcomes:
            if o.error is not None:
                log.warning("kernelfix reward: no verdict (%s): %s", o.error.code, o.error.message[:300])
            explained = self.reward.explain(o.verdict)
            rewards.append(explained.reward)
            categories.append(explained.category)
            speedups.append(explained.speedup.effective if explained.speedup is not None else None)
        if callable(kwargs.get("log_extra")):  # TRL >= 1.1: columns of its completions table
            kwargs["log_extra"]("kernelfix_category", categories)
            kwargs["log_extra"]("kernelfix_speedup", speedups)
        if callable(kwargs.get("log_metric")) and outcomes:
            kwargs["log_metric"]("kernelfix/ok_rate", sum(c == "ok" for c in categories) / len(categories))
        return rewards

    def close(self) -> None:
        if self._backend is not None and self._settings is not None:
            self._backend.close()
            self._backend = None
