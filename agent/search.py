"""The search's rules as pure functions: which turns a round continues, where its candidates go in the
tree, and which of them the next round keeps.

    round 1:   width candidates, each a fresh start from the task (or children of the --candidate, turn 0)
    round r:   width candidates spread over the kept branches (the best `keep` of round r-1, best first;
               a user's candidate first of all), each continuing its branch's conversation
    keep:      the best `keep` candidates of the round just judged (policy.rank), or, when it judged
               none, the branches it continued

Width 1 and keep 1 is the chain; keep = width is that many independent chains; keep 1 resamples from
the best candidate of each round. Each branch is a git branch ``bN``: a candidate's first child continues
its branch, every other child starts a new one.
"""

from __future__ import annotations

import re

from kernelfix.agent import policy
from kernelfix.agent.state import SessionState, Slot, Turn

_BRANCH = re.compile(r"^b(\d+)$")


def frontier(state: SessionState) -> list[int]:
    """The turns the next round continues: the kept ones, else (a chain resumed as a search) its last turn."""
    if state.frontier:
        return list(state.frontier)
    return [state.turns[-1].index] if state.turns else []


def _branch_numbers(state: SessionState) -> list[int]:
    names = [t.branch for t in state.turns] + [s.branch for s in state.round_slots]
    return [int(m.group(1)) for n in names if n and (m := _BRANCH.match(n))]


def continues_branch(state: SessionState, parent: int | None) -> str | None:
    """The branch a child of ``parent`` may continue: the parent's own, when it is a search branch whose
    tip the parent is; None when the child must start a new branch (a fresh start, turn 0 on the trunk)."""
    if parent is None:
        return None
    p = state.turn(parent)
    if p is None or not p.branch or not _BRANCH.match(p.branch):
        return None
    later = [t for t in state.turns if t.branch == p.branch and t.index > p.index]
    return None if later else p.branch


def new_branch(state: SessionState) -> str:
    return f"b{max(_branch_numbers(state), default=0) + 1}"


def plan(state: SessionState, *, width: int, round_no: int, first_turn: int, first_call: int) -> list[Slot]:
    """The round's slots: ``width`` candidates spread round-robin over the frontier, best first."""
    parents: list[int | None] = frontier(state) or [None]
    next_branch = max(_branch_numbers(state), default=0) + 1
    taken: set[str] = set()
    slots = []
    for i in range(width):
        parent = parents[i % len(parents)]
        branch = continues_branch(state, parent)
        if branch is None or branch in taken:
            branch = f"b{next_branch}"
            next_branch += 1
        taken.add(branch)
        group = parents.index(parent)  # children of one parent share a prompt
        slots.append(
            Slot(
                round=round_no,
                turn=first_turn + i,
                parent=parent,
                branch=branch,
                call_index=first_call + i,
                group=group,
            )
        )
    return slots


def keep(judged: list[Turn], continued: list[int], *, kept: int) -> list[int]:
    """The turns the next round continues: the best ``kept`` of this round, or the old frontier if it judged none."""
    if not judged:
        return list(continued)
    return [t.index for t in sorted(judged, key=policy.rank)[:kept]]


def path_best(path: list[Turn]) -> Turn | None:
    """The best correct turn on one branch's path (what its feedback names: the model has seen it)."""
    best = None
    for t in path:
        if policy.is_better(t, best):
            best = t
    return best
