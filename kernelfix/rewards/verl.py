"""kernelfix as verl's custom reward function.

    reward.custom_reward_function.path=pkg://kernelfix.rewards.verl
    reward.custom_reward_function.name=compute_score            # compute_score_batch with reward_manager.name=batch
    +reward.custom_reward_function.reward_kwargs.url=http://127.0.0.1:8000   # a `kernelfix serve`; without it, in process

Each sample's ``reward_model.ground_truth`` is its task (source text or a path); ``extra_info``
may set ``backward`` (bool) and ``task_name``. The response is the model's reply, judged as
``kernelfix eval`` judges a saved reply. ``reward_kwargs`` may also set any RewardConfig field
(``correct``, ``speedup_weight``, ``cheating``, ``noise_scale``, ...), and for the in-process
judge ``device``, ``gpus``, ``per_gpu`` and ``config`` (JudgeConfig fields), and ``sanitize`` (false by
default: compute-sanitizer's cause of a wrong kernel, which no score reads); a key it does not
know is an error at the first call, not a silent default. verl wants a number: where the
verdict is no verdict (a machine fault, a task that does not run) the score is
``unjudged`` if set, else 0.0, and ``category`` says which.

The judges outlive the call (one backend per distinct settings, per process): each task's
reference stays warm across samples. Returns a dict with the same keys for every sample:
``score``, ``ok``, ``effective_speedup`` (1.0 untimed or within noise, 0.0 not ok) and
``category``; verl logs the extra keys beside the score.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kernelfix.library.judge_pool import JudgeRequest, Outcome
from kernelfix.library.sources import task_source
from kernelfix.rewards import RewardConfig
from kernelfix.rewards.backend import shared_backend

__all__ = ["compute_score", "compute_score_batch"]

_BACKEND_KEYS = ("url", "token", "token_file", "device", "gpus", "per_gpu", "config")
# Per request: compute-sanitizer's cause on a wrong kernel is off unless asked for (no score reads it).
_REQUEST_DEFAULTS = {"sanitize": False}
# What verl itself adds to the call (its reward loop, where a reward model router exists): not ours.
_VERL_KEYS = ("reward_router_address", "reward_model_tokenizer")


def compute_score(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    """One sample (verl's naive and dapo reward managers, and its reward loop, which runs it in a thread pool)."""
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info], **kwargs)[0]


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Any] | None = None,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """Every sample of a batch at once, judged concurrently (verl's ``batch`` reward manager)."""
    backend_settings, reward = _settings({k: v for k, v in kwargs.items() if k not in _REQUEST_DEFAULTS})
    sanitize = kwargs.get("sanitize", _REQUEST_DEFAULTS["sanitize"])
    extras = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    requests = []
    for response, truth, extra in zip(solution_strs, ground_truths, extras, strict=True):
        extra = extra if isinstance(extra, Mapping) else {}
        backward = extra.get("backward")
        requests.append(
            JudgeRequest(
                task=task_source(_truth(truth)),
                candidate=response,
                kind="reply",
                backward=bool(backward) if backward is not None else None,
                task_name=extra.get("task_name"),
                sanitize=sanitize,
            )
        )
    outcomes = shared_backend(backend_settings).judge(requests)
    return [_score(o, reward) for o in outcomes]


def _truth(truth: Any) -> str:
    if isinstance(truth, Mapping):  # a dataset that keeps the task under reward_model.ground_truth.task
        truth = truth.get("task")
    if not isinstance(truth, str) or not truth:
        raise ValueError("verl's ground_truth must be the task: its source text or a path")
    return truth


def _settings(kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], RewardConfig]:
    backend = {k: kwargs[k] for k in _BACKEND_KEYS if kwargs.get(k) is not None}
    if isinstance(backend.get("gpus"), list):
        backend["gpus"] = tuple(backend["gpus"])
    if isinstance(backend.get("config"), Mapping):
        backend["config"] = dict(backend["config"])
    reward_fields = {k: v for k, v in kwargs.items() if k not in _BACKEND_KEYS and k not in _VERL_KEYS}
    if isinstance(reward_fields.get("speedup_range"), list):
        reward_fields["speedup_range"] = tuple(reward_fields["speedup_range"])
    return backend, RewardConfig.model_validate(reward_fields)  # an unknown key: ValidationError, at once


def _score(o: Outcome, reward: RewardConfig) -> dict[str, Any]:
    explained = reward.explain(o.verdict)
    ok = explained.category == "ok"
    score = explained.reward if explained.reward is not None else 0.0
    speedup = (explained.speedup.effective if explained.speedup is not None else 1.0) if ok else 0.0
    return {
        "score": float(score),
        "ok": 1.0 if ok else 0.0,
        "effective_speedup": float(speedup),
        "category": explained.category,
    }
