"""The keep rule: is the model's forward faster with a swap, beyond the timing's noise?

The original and the swapped model are timed in paired rounds (:mod:`kernelfix.tune.timing`): in each
round both run the same number of calls, back to back, in alternating order, and each gives the
median of its calls. A slow drift of the machine (clocks, other processes, a warming GPU) moves both
alike, so the round's ratio, original time / swapped time, is the swap's speedup in that round, and
how that ratio scatters over the rounds is the noise of the measurement itself.

Faster beyond the noise means both:

- the ratio's low quantile (``noise_quantile``, 0.1: its p10) is above 1: the swapped model was faster
  in at least 9 rounds of 10, so the gain is larger than the spread that timing the same two models
  again produces;
- the median ratio is at least ``1 + min_gain`` (1.01): a gain too small to matter is not worth a
  custom kernel in the user's model.

A swap is kept when it is faster beyond the noise eager and under torch.compile(fullgraph=True), and
the swapped model's output matches the original's within the judge's tolerance.

Gains add up where noise does not: two swaps each a few percent faster can both sit inside the noise
alone and clear it together (the example transformer's two attentions on the H100: 1.06x and 1.04x
eager alone, each with a p10 below 1; 1.42x eager and 1.39x compiled together, p10 1.38x and 1.32x).
So a swap that is *promising* (output intact, a median speedup of at least ``1 + min_gain`` in both
modes, not a clear loss in either) joins the swaps kept alone in the trial of them together, and the
keep test then applies to that whole group, measured as one.
"""

from __future__ import annotations

import statistics

from kernelfix.tune.tune_config import TuneConfig
from kernelfix.tune.tune_report import Comparison, Stats


def quantile(xs: list[float], q: float) -> float:
    """The nearest-rank quantile (the judge's timing stats take p10/p90 the same way)."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def stats(rounds_ms: list[float], calls_per_round: int) -> Stats:
    return Stats(
        median_ms=round(statistics.median(rounds_ms), 6),
        p10_ms=round(quantile(rounds_ms, 0.1), 6),
        p90_ms=round(quantile(rounds_ms, 0.9), 6),
        rounds=len(rounds_ms),
        calls_per_round=calls_per_round,
    )


def compare(
    mode: str, before_ms: list[float], after_ms: list[float], calls_per_round: int, cfg: TuneConfig
) -> Comparison:
    """Paired rounds of the original (before) and the swapped model (after) -> speedup and the keep test."""
    if len(before_ms) != len(after_ms) or not before_ms:
        raise ValueError("paired rounds: one time per round for each model")
    ratios = [b / a for b, a in zip(before_ms, after_ms)]
    speedup = statistics.median(ratios)
    low, high = quantile(ratios, cfg.noise_quantile), quantile(ratios, 1 - cfg.noise_quantile)
    return Comparison(
        mode=mode,
        before=stats(before_ms, calls_per_round),
        after=stats(after_ms, calls_per_round),
        speedup=round(speedup, 4),
        speedup_low=round(low, 4),
        speedup_high=round(high, 4),
        faster=low > 1.0 and speedup >= 1.0 + cfg.min_gain,
    )


def verdict(c: Comparison | None, cfg: TuneConfig) -> str:
    """The statistic the keep test reads, named: ``eager 1.12x (round-by-round speedup: median 1.12x, p10 1.08x)``,
    or why it was not measured. Not the ratio of the two medians, which can point the other way when rounds scatter."""
    if c is None:
        return "not measured"
    if c.error:
        return f"{c.mode}: {c.error}"
    if c.speedup is None or c.speedup_low is None:
        return f"{c.mode}: not measured"
    return f"{c.mode} round-by-round speedup: median {c.speedup:.4g}x, p{round(100 * cfg.noise_quantile)} {c.speedup_low:.4g}x"


def explain(eager: Comparison | None, compiled: Comparison | None, cfg: TuneConfig) -> tuple[bool, str]:
    """Whether to keep a swap, and why, from its two comparisons (outputs included): the rule's own statistic and
    threshold, so the reason agrees with the numbers it gives."""
    for c in (eager, compiled):
        if c is None:
            return False, "not measured"
        if c.error:
            return False, f"{c.mode}: {c.error}"
        if c.output is not None and not c.output.ok:
            return False, f"breaks the model's output ({c.mode}): {c.output.summary()}"
    both = f"{verdict(eager, cfg)}; {verdict(compiled, cfg)}"
    q = f"p{round(100 * cfg.noise_quantile)}"
    if eager.faster and compiled.faster:
        return True, f"faster beyond the noise ({q} above 1x, median at least {1 + cfg.min_gain:.3g}x): {both}"
    slow = [c for c in (eager, compiled) if not c.faster]
    slower = [c for c in slow if c.speedup is not None and c.speedup < 1.0]
    if slower:
        which = " and ".join(c.mode for c in slower)
        return False, f"slower {which} in most paired rounds (round-by-round speedup's median below 1x): {both}"
    return False, (
        f"not faster beyond the noise {' and '.join(c.mode for c in slow)} (needs the round-by-round speedup's {q} above 1x and "
        f"its median at least {1 + cfg.min_gain:.3g}x): {both}"
    )


def promising(eager: Comparison | None, compiled: Comparison | None, cfg: TuneConfig) -> bool:
    """Not faster beyond the noise alone, but worth trying with the others: its output intact in both
    modes and its median speedup at least ``1 + min_gain`` in both."""
    for c in (eager, compiled):
        if c is None or c.error or c.speedup is None or (c.output is not None and not c.output.ok):
            return False
        if c.speedup < 1.0 + cfg.min_gain:
            return False
    return True
