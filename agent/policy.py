"""The loop's rules, as pure functions: which candidate is best, when the goal is met, when to stop."""

from __future__ import annotations

from kernelfix.agent.config import AgentConfig
from kernelfix.agent.state import SessionState, Turn, totals


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


def budget_spent(state: SessionState, config: AgentConfig) -> str | None:
    """The stop reason when a token, cost or wall-clock budget is spent, else None."""
    t = totals(state.turns)
    used_tokens = t.prompt_tokens + t.completion_tokens
    if config.max_tokens is not None and used_tokens >= config.max_tokens:
        return f"token budget spent: {used_tokens} of {config.max_tokens} tokens"
    if config.max_cost_usd is not None and t.cost_usd >= config.max_cost_usd:
        return f"cost budget spent: ${t.cost_usd:.4f} of ${config.max_cost_usd:g}"
    if config.max_wall_s is not None and t.wall_s >= config.max_wall_s:
        return f"time budget spent: {t.wall_s:.0f} s of {config.max_wall_s:g} s"
    return None


def max_turns_reached(state: SessionState, config: AgentConfig) -> str | None:
    n = state.model_turns
    return f"max turns reached: {n} of {config.max_turns} model turns" if n >= config.max_turns else None
