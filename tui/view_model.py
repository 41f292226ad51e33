"""What the UI shows, folded from the session's events (or read from trajectory.json).

The screen applies each event here and redraws from this state, so a live
session and a finished one read from disk render through the same code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from kernelfix.agent.events import (
    ModelDelta,
    ModelReplied,
    ModelRetry,
    Notice,
    RoundJudged,
    RoundStarted,
    SessionEnded,
    SessionEvent,
    SessionPaused,
    SessionStarted,
    SessionUnpaused,
    StageUpdate,
    TurnJudged,
    TurnStarted,
)
from kernelfix.agent.models import REPLAY_PREFIX
from kernelfix.agent.state import REOPENABLE, Outcome, Trajectory, Turn, TurnSource, Usage, path_to
from kernelfix.tools.evaluation import StageEvent

# What each judge stage is doing, in words (the stage bar and the turn list say these).
_STAGE_WORDS = {
    "reference": "computing the reference",
    "extract": "extracting the code",
    "static": "checking the source",
    "compile": "compiling",
    "correctness": "checking",
    "legality": "checking the ops it runs",
    "benchmark": "timing",
    "profile": "profiling",
    "sanitize": "sanitizing",
}


def stage_text(e: StageEvent) -> str:
    """``compiling...``, ``checking 3/5...``, ``timing...``: the judge's stage as the user reads it."""
    words = _STAGE_WORDS.get(e.stage, e.stage)
    if e.status == "progress" and e.total:
        return f"{words} {(e.done or 0) + 1}/{e.total}..."
    if e.status in ("started", "progress"):
        return f"{words}..."
    if e.status == "skipped":
        return f"{e.stage} skipped"
    return f"{e.stage} done" + (f" ({e.detail})" if e.detail and e.detail != "ok" else "")


def short_model(name: str) -> str:
    """A replay model's name without its absolute path; other names as they are."""
    if name.startswith(REPLAY_PREFIX):
        return REPLAY_PREFIX + Path(name[len(REPLAY_PREFIX) :]).name
    return name


@dataclass
class LiveTurn:
    """The turn on its way: the reply as it streams, then the judge's stages."""

    index: int
    source: TurnSource
    content: str = ""
    reasoning: str = ""
    activity: str = "waiting for the model..."
    usage: Usage | None = None
    parent: int | None = None  # a search's candidate: where it goes in the tree
    branch: str | None = None


@dataclass
class SessionView:
    task: str = ""
    model: str = ""
    device: str = ""
    session_dir: str = ""
    turns: list[Turn] = field(default_factory=list)
    best_turn: int | None = None
    lives: dict[int, LiveTurn] = field(default_factory=dict)  # turns on their way (a search's round: several)
    width: int = 1
    round: int | None = None  # the search's round in flight
    activity: str = ""  # what the session is doing outside a turn (reference, paused, ended)
    paused: bool = False
    paused_after: int | None = None
    outcome: Outcome | None = None
    notices: list[str] = field(default_factory=list)
    running: bool = False
    started_monotonic: float | None = None  # this run's start, for the elapsed clock
    elapsed_before: float = 0.0  # wall time of turns judged before this run (a history or a resume)

    # ------------------------------------------------------------------ sources

    @classmethod
    def from_trajectory(cls, traj: Trajectory, session_dir: str | Path) -> "SessionView":
        v = cls(task=traj.task.name, model=short_model(traj.model), device=traj.device, session_dir=str(session_dir))
        v.width = traj.settings.agent.width
        v.turns = list(traj.turns)
        v.best_turn = traj.outcome.best_turn
        v.outcome = traj.outcome
        v.elapsed_before = traj.totals.wall_s
        v.activity = ended_text(traj.outcome)
        return v

    def apply(self, e: SessionEvent) -> None:
        if isinstance(e, SessionStarted):
            self.task, self.model, self.device, self.session_dir = e.task, short_model(e.model), e.device, e.session_dir
            self.width = e.width
            self.running, self.outcome = True, None
            self.elapsed_before = sum(t.wall_s or 0.0 for t in self.turns)
            self.started_monotonic = time.monotonic()
            self.activity = f"resumed with {e.turns_done} judged turns" if e.resumed else "starting..."
        elif isinstance(e, Notice):
            self.notices.append(e.text)
        elif isinstance(e, RoundStarted):
            self.round = e.round
            self.activity = f"round {e.round}: {len(e.slots)} candidates"
        elif isinstance(e, TurnStarted):
            live = self.lives[e.turn] = LiveTurn(index=e.turn, source=e.source, parent=e.parent, branch=e.branch)
            if e.source != "model":
                live.activity = f"judging the {e.source}'s candidate..."
        elif isinstance(e, ModelDelta):
            live = self._live(e.turn)
            if e.channel == "reasoning":
                live.reasoning += e.text
                live.activity = "the model is reasoning..."
            else:
                live.content += e.text
                live.activity = f"the model is replying ({len(live.content)} chars)..."
        elif isinstance(e, ModelRetry):
            live = self._live(e.turn)
            live.content = live.reasoning = ""  # what streamed before the failure is void
            live.activity = f"model call failed ({e.error[:80]}); try {e.attempt + 1} in {e.wait_s:.0f}s..."
        elif isinstance(e, ModelReplied):
            live = self._live(e.turn)
            live.usage = e.usage
            live.activity = "judging..."
        elif isinstance(e, StageUpdate):
            if e.turn is None:
                done = e.event.stage == "reference" and e.event.status == "finished"
                # after the reference, the shape pass for the first prompt runs without events of its own
                self.activity = "reference done; preparing the first prompt..." if done else stage_text(e.event)
            else:
                self._live(e.turn).activity = stage_text(e.event)
        elif isinstance(e, TurnJudged):
            # A search's candidate comes again, committed, with its round (RoundJudged).
            self._record(e.turn)
            self.lives.pop(e.turn.index, None)
            if not self.lives:
                self.activity = ""
            if e.best_turn is not None:  # None: no correct turn yet (a best is never taken back)
                self.best_turn = e.best_turn
        elif isinstance(e, RoundJudged):
            for t in e.turns:
                self._record(t)
            self.lives.clear()
            self.best_turn = e.best_turn
            self.round = None
            self.activity = ""
        elif isinstance(e, SessionPaused):
            self.paused, self.paused_after = True, e.after_turn
        elif isinstance(e, SessionUnpaused):
            self.paused = False
        elif isinstance(e, SessionEnded):
            self.running, self.paused = False, False
            self.lives.clear()
            self.outcome = e.outcome
            if self.started_monotonic is not None:
                self.elapsed_before += time.monotonic() - self.started_monotonic
                self.started_monotonic = None
            self.activity = ended_text(e.outcome)

    def _live(self, index: int) -> LiveTurn:
        if index not in self.lives:
            self.lives[index] = LiveTurn(index=index, source="model")
        return self.lives[index]

    def _record(self, turn: Turn) -> None:
        self.turns = sorted([t for t in self.turns if t.index != turn.index] + [turn], key=lambda t: t.index)

    @property
    def live(self) -> LiveTurn | None:
        """The turn in progress that started last (the chain has at most one)."""
        return self.lives[max(self.lives)] if self.lives else None

    # ------------------------------------------------------------------ the tree (a search)

    @property
    def branched(self) -> bool:
        """Whether the turns form a tree, not one chain: shown with branches and parents."""
        return self.width > 1 or any(
            t.round is not None and t.parent is not None and t.branch and t.branch.startswith("b") for t in self.turns
        )

    def best_path(self) -> set[int]:
        """The turns from the root to the best one."""
        return {t.index for t in path_to(self.turns, self.best_turn)} if self.best_turn is not None else set()

    def tree_rows(self) -> list[tuple[int, int]]:
        """(turn index, depth) in the order the list shows them: a branch's turns one under the other, a
        branch that forks off a turn right below it and one step in; turns in progress in their place."""
        parent: dict[int, int | None] = {t.index: t.parent for t in self.turns}
        branch: dict[int, str | None] = {t.index: t.branch for t in self.turns}
        for live in self.lives.values():
            parent.setdefault(live.index, live.parent)
            branch.setdefault(live.index, live.branch)
        children: dict[int | None, list[int]] = {}
        for i in sorted(parent):
            p = parent[i] if parent[i] in parent else None
            children.setdefault(p, []).append(i)
        rows: list[tuple[int, int]] = []
        stack = [(i, 0) for i in reversed(children.get(None, []))]
        while stack:
            i, depth = stack.pop()
            rows.append((i, depth))
            kids = children.get(i, [])
            cont = next((k for k in kids if branch[k] == branch[i]), None)
            if cont is not None:
                stack.append((cont, depth))  # the branch goes on below its forks
            stack += [(k, depth + 1) for k in reversed(kids) if k != cont]
        return rows

    # ------------------------------------------------------------------ derived

    def turn(self, index: int) -> Turn | None:
        return next((t for t in self.turns if t.index == index), None)

    def previous_turn(self, index: int) -> Turn | None:
        """What a diff compares against: the nearest turn with code up the branch (a search), else before it."""
        turn = self.turn(index)
        if self.branched and turn is not None:
            earlier = [t for t in path_to(self.turns, turn.parent) if t.code is not None]
        else:
            earlier = [t for t in self.turns if t.index < index and t.code is not None]
        return earlier[-1] if earlier else None

    def previous_code(self, index: int) -> str | None:
        previous = self.previous_turn(index)
        return previous.code if previous is not None else None

    @property
    def resumable(self) -> bool:
        """A run can continue it: never run, killed, or stopped on a limit a resume may raise or by the user."""
        return is_open(self.outcome)

    def elapsed(self) -> float:
        running = time.monotonic() - self.started_monotonic if self.started_monotonic is not None else 0.0
        return self.elapsed_before + running

    def tokens(self) -> tuple[int, int]:
        usages = [t.usage for t in self.turns]
        usages += [live.usage for live in self.lives.values() if live.usage is not None]
        return sum(u.prompt_tokens or 0 for u in usages), sum(u.completion_tokens or 0 for u in usages)

    def cost(self) -> float | None:
        """Model cost so far; None when some model turn's price is unknown to litellm."""
        total = 0.0
        for t in self.turns:
            if t.usage.cost_usd is not None:
                total += t.usage.cost_usd
            elif t.source == "model" and t.usage.attempts:
                return None
        return total


def is_open(o: Outcome | None) -> bool:
    """A session a resume continues: never run, killed, stopped on a limit, or stopped or accepted by the user."""
    return o is None or o.resumable or not o.finished or o.stop_kind in REOPENABLE


def ended_text(o: Outcome) -> str:
    status = "finished" if o.finished else "interrupted"
    found = "a correct kernel was found" if o.success else "no correct kernel"
    return f"{status}: {o.stop_reason or ''} ({found})"
