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
from kernelfix.agent.state import Outcome, Trajectory, Turn, TurnSource, Usage
from kernelfix.tools.judge import StageEvent

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
        return REPLAY_PREFIX + Path(name[len(REPLAY_PREFIX):]).name
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


@dataclass
class SessionView:
    task: str = ""
    model: str = ""
    device: str = ""
    session_dir: str = ""
    turns: list[Turn] = field(default_factory=list)
    best_turn: int | None = None
    live: LiveTurn | None = None
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
        v.turns = list(traj.turns)
        v.best_turn = traj.outcome.best_turn
        v.outcome = traj.outcome
        v.elapsed_before = traj.totals.wall_s
        v.activity = ended_text(traj.outcome)
        return v

    def apply(self, e: SessionEvent) -> None:
        if isinstance(e, SessionStarted):
            self.task, self.model, self.device, self.session_dir = e.task, short_model(e.model), e.device, e.session_dir
            self.running, self.outcome = True, None
            self.elapsed_before = sum(t.wall_s or 0.0 for t in self.turns)
            self.started_monotonic = time.monotonic()
            self.activity = f"resumed with {e.turns_done} judged turns" if e.resumed else "starting..."
        elif isinstance(e, Notice):
            self.notices.append(e.text)
        elif isinstance(e, TurnStarted):
            self.live = LiveTurn(index=e.turn, source=e.source)
            if e.source != "model":
                self.live.activity = f"judging the {e.source}'s candidate..."
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
            self.turns = [t for t in self.turns if t.index != e.turn.index] + [e.turn]
            self.best_turn = e.best_turn
            self.live = None
            self.activity = ""
        elif isinstance(e, SessionPaused):
            self.paused, self.paused_after = True, e.after_turn
        elif isinstance(e, SessionUnpaused):
            self.paused = False
        elif isinstance(e, SessionEnded):
            self.running, self.paused, self.live = False, False, None
            self.outcome = e.outcome
            if self.started_monotonic is not None:
                self.elapsed_before += time.monotonic() - self.started_monotonic
                self.started_monotonic = None
            self.activity = ended_text(e.outcome)

    def _live(self, index: int) -> LiveTurn:
        if self.live is None or self.live.index != index:
            self.live = LiveTurn(index=index, source="model")
        return self.live

    # ------------------------------------------------------------------ derived

    def turn(self, index: int) -> Turn | None:
        return next((t for t in self.turns if t.index == index), None)

    def previous_code(self, index: int) -> str | None:
        """The code of the last turn before ``index`` that had code: what a diff compares against."""
        earlier = [t for t in self.turns if t.index < index and t.code is not None]
        return earlier[-1].code if earlier else None

    @property
    def resumable(self) -> bool:
        """A run can continue it: never run, killed, or stopped on a limit that a resume may raise."""
        o = self.outcome
        return o is None or o.resumable or not o.finished or o.stop_kind in ("max_turns", "budget")

    def elapsed(self) -> float:
        running = time.monotonic() - self.started_monotonic if self.started_monotonic is not None else 0.0
        return self.elapsed_before + running

    def tokens(self) -> tuple[int, int]:
        usages = [t.usage for t in self.turns]
        if self.live is not None and self.live.usage is not None:
            usages.append(self.live.usage)
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


def ended_text(o: Outcome) -> str:
    status = "finished" if o.finished else "interrupted"
    found = "a correct kernel was found" if o.success else "no correct kernel"
    return f"{status}: {o.stop_reason or ''} ({found})"
