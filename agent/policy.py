"""The loop's rules, as pure functions: which candidate is best, when the goal is met, when to stop."""

from __future__ import annotations

from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.state import SessionState, Turn, totals
from kernelfix.tools.verdict import Family

# How far a failed candidate got, for choosing which branches a round continues: a wrong answer is
# closer to a fix than a crash, a crash closer than a build error.
_PROGRESS = {
    Family.CORRECTNESS: 3,
    Family.CHEATING: 2,
    Family.RUNTIME: 2,
    Family.COMPILE: 1,
    Family.FORMAT: 0,
    Family.INFRA: 0,
}


def is_better(new: Turn, best: Turn | None) -> bool:
    """Whether ``new`` replaces ``best``: only a correct, legal turn, and only a strictly faster one.

    Untimed turns (no GPU) never displace an earlier correct turn; a timed one displaces an untimed one.
    """
    if not new.correct:
        return False
    if best is None:
        return True
    s_new, s_best = new.verdict.speedup_eager, best.verdict.speedup_eager
    if s_new is None:
        return False
    return s_best is None or s_new > s_best


def goal_met(turn: Turn, config: AgentConfig, *, timed: bool) -> bool:
    """Correct, legal, and at least the target speedup over eager (or untimed, where timing is impossible)."""
    if not turn.correct:
        return False
    speedup = turn.verdict.speedup_eager
    if speedup is None:
        return not timed and config.untimed_goal
    return speedup >= config.target_speedup


def describe_goal(turn: Turn, config: AgentConfig) -> str:
    s = turn.verdict.speedup_eager
    if s is None:
        return f"goal met: turn {turn.index} is correct and legal (not timed on {turn.verdict.device}, so the speedup target was not checked)"
    return f"goal met: turn {turn.index} is correct, legal and {s:.2f}x over eager (target {config.target_speedup:g}x)"


def rank(turn: Turn) -> tuple:
    """Sort key, best first: correct before failed, then faster, then further through the judge (a kernel
    that built before one that did not), then earlier."""
    v = turn.verdict
    if turn.correct:
        return (0, -(v.speedup_eager or 0.0), False, turn.index)
    progress = _PROGRESS.get(v.category.family, 0) if v is not None else 0
    built = v is not None and v.compiled
    if built and v.category.family == Family.INFRA:  # infra:no_gpu on a CPU machine: built, so past any build error
        progress = _PROGRESS[Family.COMPILE]
    return (1, -progress, not built, turn.index)


def speed_of_light(turn: Turn) -> tuple[str, float] | None:
    """A profiled kernel's higher throughput as a fraction of peak, ("DRAM" or "SM", fraction), weighted
    by each kernel's time in one forward; None without a profile that measured it."""
    prof = turn.verdict.profile if turn.verdict is not None else None
    if prof is None:
        return None
    best: tuple[str, float] | None = None
    for name, attr in (("DRAM", "dram_pct"), ("SM", "compute_pct")):
        weighted = [
            ((k.duration_ms or 0.0) * k.calls, getattr(k, attr)) for k in prof.kernels if getattr(k, attr) is not None
        ]
        total = sum(w for w, _ in weighted)
        if total > 0:
            frac = sum(w * pct for w, pct in weighted) / total / 100.0
            if best is None or frac > best[1]:
                best = (name, frac)
    return best


def sol_reached(turn: Turn, config: AgentConfig) -> str | None:
    """The stop reason when a correct kernel runs at --stop-at-sol of peak DRAM or SM throughput, else None."""
    if config.stop_at_sol is None or not turn.correct:
        return None
    found = speed_of_light(turn)
    if found is None or found[1] < config.stop_at_sol:
        return None
    return f"speed of light: turn {turn.index} runs at {found[1]:.0%} of peak {found[0]} throughput (stop at {config.stop_at_sol:.0%})"


def budget_spent(state: SessionState, config: AgentConfig, pending: list[Turn] = ()) -> str | None:
    """The stop reason when a token, cost or wall-clock budget is spent (over every branch, and the
    ``pending`` candidates of a round in flight), else None."""
    t = totals([*state.turns, *pending], state.rounds)
    used_tokens = t.prompt_tokens + t.completion_tokens
    if config.max_tokens is not None and used_tokens >= config.max_tokens:
        return f"token budget spent: {used_tokens} of {config.max_tokens} tokens"
    if config.max_cost_usd is not None and t.cost_usd >= config.max_cost_usd:
        return f"cost budget spent: ${t.cost_usd:.4f} of ${config.max_cost_usd:g}"
    if config.max_wall_s is not None and t.wall_s >= config.max_wall_s:
        return f"time budget spent: {t.wall_s:.0f} s of {config.max_wall_s:g} s"
    return None


def max_turns_reached(state: SessionState, config: AgentConfig) -> str | None:
    n = state.rounds_done
    if n < config.max_turns:
        return None
    what = "model turns" if config.width == 1 else "rounds"
    return f"max turns reached: {n} of {config.max_turns} {what}"
