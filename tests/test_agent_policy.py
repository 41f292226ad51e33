"""The loop's rules: best candidate, goal, budgets, max turns."""

from __future__ import annotations

import pytest

from kernelfix.agent import policy
from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.state import SessionState, Turn, Usage
from kernelfix.tools.verdict import Category, Verdict


def t(index: int, category: Category = Category.OK, speedup: float | None = None, **kw) -> Turn:
    v = Verdict(category=category, task="relu", device="cuda" if speedup is not None else "cpu", speedup_eager=speedup)
    return Turn(index=index, source=kw.pop("source", "model"), verdict=v, started_at=0.0, **kw)


def test_best_is_kept_unless_strictly_faster_and_correct():
    first = t(1, speedup=1.2)
    assert policy.is_better(first, None)
    assert not policy.is_better(t(2, Category.NUMERICAL), first)
    assert not policy.is_better(t(3, speedup=1.1), first)  # slower
    assert not policy.is_better(t(4, speedup=1.2), first)  # a tie keeps the earlier
    assert policy.is_better(t(5, speedup=1.3), first)
    assert not policy.is_better(t(6, Category.DISALLOWED_ATEN), None)  # illegal is never best
    untimed = t(7)
    assert policy.is_better(untimed, None)
    assert not policy.is_better(t(8), untimed)
    assert policy.is_better(t(9, speedup=0.5), untimed)  # a timed kernel beats an untimed one


def test_goal_needs_the_target_speedup_where_timing_exists():
    cfg = AgentConfig(target_speedup=1.5)
    assert not policy.goal_met(t(1, speedup=1.4), cfg, timed=True)
    assert policy.goal_met(t(1, speedup=1.5), cfg, timed=True)
    assert not policy.goal_met(t(1, Category.NUMERICAL), cfg, timed=True)
    assert policy.goal_met(t(1), cfg, timed=False)
    assert not policy.goal_met(t(1), cfg.model_copy(update={"untimed_goal": False}), timed=False)


def test_budgets_and_max_turns():
    turns = [
        t(0, Category.SYNTAX, source="candidate", wall_s=5.0),
        t(
            1,
            Category.NUMERICAL,
            usage=Usage(prompt_tokens=900, completion_tokens=200, cost_usd=0.01, attempts=1),
            wall_s=30.0,
        ),
        t(
            2,
            Category.NUMERICAL,
            usage=Usage(prompt_tokens=1500, completion_tokens=300, cost_usd=0.02, attempts=1),
            wall_s=40.0,
        ),
    ]
    state = SessionState(turns=turns)
    assert state.model_turns == 2
    assert policy.max_turns_reached(state, AgentConfig(max_turns=2)) == "max turns reached: 2 of 2 model turns"
    assert policy.max_turns_reached(state, AgentConfig(max_turns=3)) is None
    assert policy.budget_spent(state, AgentConfig()) is None
    assert "token budget spent: 2900 of 2900" in policy.budget_spent(state, AgentConfig(max_tokens=2900))
    assert "cost budget" in policy.budget_spent(state, AgentConfig(max_cost_usd=0.03))
    assert policy.budget_spent(state, AgentConfig(max_cost_usd=0.031)) is None
    assert "time budget" in policy.budget_spent(state, AgentConfig(max_wall_s=75))


def test_a_search_ranks_counts_rounds_and_budgets_over_every_branch():
    from kernelfix.agent.state import RoundRecord

    # rank: correct and faster first, then how far a failure got (wrong > crashed > did not build > no code)
    ranked = [
        t(1, Category.NO_CODE),
        t(2, Category.NUMERICAL),
        t(3, Category.NVCC),
        t(4, speedup=1.1),
        t(5, speedup=2.0),
        t(6, Category.NO_GPU),
    ]
    ranked[5].verdict.compiled = True  # built on a machine without a GPU: past the build error of turn 3
    assert [x.index for x in sorted(ranked, key=policy.rank)] == [5, 4, 2, 6, 3, 1]
    # a round's candidates overlap: wall time counts the round once, tokens and cost count every branch
    u = Usage(prompt_tokens=100, completion_tokens=100, cost_usd=0.01, attempts=1)
    turns = [
        t(i, Category.NUMERICAL, usage=u, wall_s=60.0, round=r, parent=None)
        for i, r in ((1, 1), (2, 1), (3, 2), (4, 2))
    ]
    rounds = [RoundRecord(round=r, started_at=0.0, wall_s=70.0, judge_s=120.0, slots=[], kept=[]) for r in (1, 2)]
    state = SessionState(turns=turns, rounds=rounds)
    assert state.rounds_done == 2
    from kernelfix.agent.state import SlotRecord

    cut = state.model_copy(
        update={
            "rounds": [
                *rounds,
                rounds[1].model_copy(
                    update={"round": 3, "slots": [SlotRecord(turn=5, parent=3, branch="b1", status="cancelled")]}
                ),
            ]
        }
    )
    assert (state.next_index, cut.next_index) == (5, 6)  # a slot cut off keeps its number
    assert policy.max_turns_reached(state, AgentConfig(max_turns=2, width=2)) == "max turns reached: 2 of 2 rounds"
    assert "token budget spent: 800" in policy.budget_spent(state, AgentConfig(max_tokens=800))
    assert "time budget spent: 140 s" in policy.budget_spent(state, AgentConfig(max_wall_s=140))  # 2 x 70, not 4 x 60
    assert policy.budget_spent(state, AgentConfig(max_wall_s=141)) is None


def test_stop_at_speed_of_light_reads_the_profile():
    from kernelfix.tools.verdict import KernelProfile, ProfileReport

    fast = t(1, speedup=1.3)
    fast.verdict.profile = ProfileReport(
        source="ncu",
        kernels=[
            KernelProfile(name="main", duration_ms=0.9, dram_pct=96.0, compute_pct=20.0),
            KernelProfile(name="tail", duration_ms=0.1, dram_pct=40.0),
        ],
    )
    assert policy.speed_of_light(fast) == ("DRAM", pytest.approx(0.904))  # weighted by each kernel's time
    assert policy.sol_reached(fast, AgentConfig(stop_at_sol=0.95)) is None
    assert "90% of peak DRAM" in policy.sol_reached(fast, AgentConfig(stop_at_sol=0.9))
    assert policy.sol_reached(fast, AgentConfig()) is None  # off unless asked for
    assert policy.sol_reached(t(2, Category.NUMERICAL), AgentConfig(stop_at_sol=0.1)) is None  # only correct kernels
