"""Rewards for RL on kernels, from the judge's verdicts: one documented, configurable function
(``RewardConfig.score``) and adapters for the trainers (``kernelfix.rewards.trl``,
``kernelfix.rewards.verl``). docs/service.md "Rewards" has the formula with examples.

    reward = failed              anything not ok (format, compile, runtime, correctness errors)
           = cheating            cheating:* (a penalty, if you set it below 0)
           = unjudged            infra:* or a broken task: the model's doing neither (None: no reward)
           = correct + speedup_weight * term(clip(s, *speedup_range))      ok

``s`` is the speedup the timings vouch for: the candidate's and the baseline's own spread
(p10 to p90 of their timed runs, times ``noise_scale``) give the range of speedups both
allow; a range that holds 1.0 gives s = 1 (within noise: no speedup, however the medians
fell), else s is the range's end nearest 1 (the gain, or the loss, that noise cannot explain).
An ok verdict with no timing (judged on the CPU) gets s = 1. With input sets, s is the
geometric mean of each set's. ``term`` is log2 (default: each doubling is worth the same),
``linear`` (s - 1), or ``none`` (correctness alone).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kernelfix.tools.verdict import Category, Family, Timings, TimingStats, Verdict

__all__ = ["RewardBreakdown", "RewardConfig", "SpeedupView", "speedup_view"]


class SpeedupView(BaseModel):
    """A timed verdict's speedup, and what its timings' noise leaves of it."""

    nominal: float  # baseline median / candidate median (the verdict's speedup_eager or speedup_compile)
    low: float  # the smallest and largest speedups the two timings' spreads allow
    high: float
    effective: float  # 1.0 when low <= 1 <= high, else the end of [low, high] nearest 1
    baseline: Literal[
        "eager", "compile"
    ]  # the one timed (compile falls back to eager where torch.compile has no timing)

    @property
    def within_noise(self) -> bool:
        return self.low <= 1.0 <= self.high


class RewardBreakdown(BaseModel):
    reward: float | None
    category: str
    speedup: SpeedupView | None = None  # ok and timed; per input set geometric means otherwise
    why: str


class RewardConfig(BaseModel):
    """How a verdict becomes a reward. Every field has a default; see the module's docstring."""

    model_config = ConfigDict(extra="forbid")

    correct: float = Field(1.0, description="an ok verdict's reward before its speedup term")
    speedup_weight: float = Field(0.5, ge=0, description="the speedup term's weight")
    speedup_term: Literal["log2", "linear", "none"] = Field("log2", description="log2(s), s - 1, or nothing")
    speedup_range: tuple[float, float] = Field(
        (0.5, 8.0), description="s is clipped to this before the term (defaults: rewards 0.5 to 2.5)"
    )
    baseline: Literal["eager", "compile"] = Field(
        "eager", description="speedup over eager PyTorch or over torch.compile"
    )
    noise_scale: float = Field(
        1.0, ge=0, description="widen (>1) or narrow (<1, 0: medians alone) each timing's p10-p90 spread"
    )
    failed: float = Field(0.0, description="any verdict that is not ok, cheating or a machine fault")
    cheating: float = Field(0.0, description="cheating:* (e.g. -1 to penalize)")
    unjudged: float | None = Field(
        None, description="infra:* (the machine's fault) or a task that does not run; None: no reward (TRL skips it)"
    )

    @model_validator(mode="after")
    def _range(self) -> "RewardConfig":
        lo, hi = self.speedup_range
        if not 0 < lo <= 1 <= hi:
            raise ValueError(f"speedup_range {self.speedup_range}: needs 0 < low <= 1 <= high")
        return self

    def score(self, verdict: Verdict | None) -> float | None:
        """The reward for a verdict (None: no verdict, the request failed)."""
        return self.explain(verdict).reward

    def explain(self, verdict: Verdict | None) -> RewardBreakdown:
        if verdict is None:
            return RewardBreakdown(
                reward=self.unjudged, category="unjudged", why="no verdict: the task does not run, or the judge failed"
            )
        cat = verdict.category
        if cat.family == Family.INFRA:
            return RewardBreakdown(
                reward=self.unjudged, category=cat.value, why="a machine fault: the verdict says nothing of the kernel"
            )
        if cat.family == Family.CHEATING:
            return RewardBreakdown(reward=self.cheating, category=cat.value, why="cheating")
        if cat != Category.OK:
            return RewardBreakdown(reward=self.failed, category=cat.value, why="not ok")
        view = speedup_view(verdict, self.baseline, self.noise_scale)
        s = view.effective if view is not None else 1.0
        lo, hi = self.speedup_range
        c = min(max(s, lo), hi)
        term = {"log2": math.log2(c), "linear": c - 1.0, "none": 0.0}[self.speedup_term]
        why = (
            "ok, not timed: speedup counted as 1"
            if view is None
            else (
                f"ok, {view.nominal:.3g}x over {view.baseline}, "
                + ("within the timings' noise: counted as 1" if view.within_noise else f"{s:.3g}x beyond noise")
            )
        )
        return RewardBreakdown(
            reward=self.correct + self.speedup_weight * term, category=cat.value, speedup=view, why=why
        )


def speedup_view(
    verdict: Verdict, baseline: Literal["eager", "compile"] = "eager", noise_scale: float = 1.0
) -> SpeedupView | None:
    """The verdict's speedup with its noise band; None when it was not timed. With input sets, each
    set's view, combined by geometric mean (a set without timings: the verdict's own)."""
    sets = [s.timings for s in verdict.input_sets if s.timings is not None]
    if not sets:
        return _view(verdict.timings, baseline, noise_scale) if verdict.timings is not None else None
    views = [v for v in (_view(t, baseline, noise_scale) for t in sets) if v is not None]
    if not views:
        return None
    geo = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))  # noqa: E731
    return SpeedupView(
        nominal=geo([v.nominal for v in views]),
        low=geo([v.low for v in views]),
        high=geo([v.high for v in views]),
        effective=geo([v.effective for v in views]),
        baseline=views[0].baseline,
    )


def _view(t: Timings, baseline: Literal["eager", "compile"], k: float) -> SpeedupView | None:
    base, used = (t.compiled, "compile") if baseline == "compile" and t.compiled is not None else (t.eager, "eager")
    cand = t.candidate
    if cand is None or base is None or cand.median_ms <= 0 or base.median_ms <= 0:
        return None
    b_lo, b_hi = _band(base, k)
    c_lo, c_hi = _band(cand, k)
    low, high = b_lo / c_hi, b_hi / c_lo
    effective = 1.0 if low <= 1.0 <= high else (low if low > 1.0 else high)
    return SpeedupView(nominal=base.median_ms / cand.median_ms, low=low, high=high, effective=effective, baseline=used)


def _band(s: TimingStats, k: float) -> tuple[float, float]:
    """The median's range under noise: p10 to p90 (their distances from the median scaled by ``k``)."""
    lo = s.median_ms - k * max(s.median_ms - s.p10_ms, 0.0)
    hi = s.median_ms + k * max(s.p90_ms - s.median_ms, 0.0)
    return max(lo, s.median_ms * 1e-3), hi
