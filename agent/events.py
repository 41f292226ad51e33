"""What a running session tells a UI, and how a UI steers it.

Events are typed pydantic models delivered, in order and one at a time, to one
callback (a Textual app forwards them with ``call_from_thread``); with width > 1 they
come from the threads that draw and judge a round's candidates. ``Controls`` is
thread-safe: a UI calls its methods from any thread; the loop reads them between
turns (between rounds).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelfix.agent.state import Outcome, RoundRecord, Slot, Turn, TurnSource, Usage
from kernelfix.tools.evaluation import StageEvent


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SessionStarted(_Event):
    kind: Literal["session_started"] = "session_started"
    session_dir: str
    task: str
    model: str
    device: str
    resumed: bool
    turns_done: int  # judged turns already in the session (resume)
    width: int = 1  # candidates per round (1: the chain)


class Notice(_Event):
    """Something the user should know that is not a turn (judging on cpu, no shape block, ...)."""

    kind: Literal["notice"] = "notice"
    text: str


class TurnStarted(_Event):
    kind: Literal["turn_started"] = "turn_started"
    turn: int
    source: TurnSource
    parent: int | None = None  # width > 1: where in the tree it goes
    branch: str | None = None
    round: int | None = None


class RoundStarted(_Event):
    """Width > 1: a round's candidates, planned before any is drawn."""

    kind: Literal["round_started"] = "round_started"
    round: int
    slots: list[Slot]


class RoundJudged(_Event):
    """Width > 1: the round is recorded (each judged candidate committed on its branch) and the next one's branches chosen."""

    kind: Literal["round_judged"] = "round_judged"
    record: RoundRecord
    turns: list[Turn]  # the round's judged candidates, as committed
    best_turn: int | None


class ModelDelta(_Event):
    """A piece of the reply as it streams."""

    kind: Literal["model_delta"] = "model_delta"
    turn: int
    channel: Literal["content", "reasoning"]
    text: str


class ModelRetry(_Event):
    """A model call failed in a way worth retrying; the text streamed so far is void."""

    kind: Literal["model_retry"] = "model_retry"
    turn: int
    attempt: int
    error: str
    wait_s: float


class ModelReplied(_Event):
    kind: Literal["model_replied"] = "model_replied"
    turn: int
    usage: Usage


class StageUpdate(_Event):
    kind: Literal["stage"] = "stage"
    turn: int | None  # None: the session's reference run, before any turn
    event: StageEvent


class TurnJudged(_Event):
    kind: Literal["turn_judged"] = "turn_judged"
    turn: Turn
    best_turn: int | None


class SessionPaused(_Event):
    kind: Literal["paused"] = "paused"
    after_turn: int | None


class SessionUnpaused(_Event):
    kind: Literal["unpaused"] = "unpaused"


class SessionEnded(_Event):
    kind: Literal["session_ended"] = "session_ended"
    outcome: Outcome
    session_dir: str


SessionEvent = Annotated[
    SessionStarted
    | Notice
    | TurnStarted
    | RoundStarted
    | ModelDelta
    | ModelRetry
    | ModelReplied
    | StageUpdate
    | TurnJudged
    | RoundJudged
    | SessionPaused
    | SessionUnpaused
    | SessionEnded,
    Field(discriminator="kind"),
]
EventSink = Callable[[SessionEvent], None]


class SessionAborted(KeyboardInterrupt):
    """The user left mid-turn (``Controls.abort``): the run stops at once and the session stays resumable."""


class Controls:
    """Steering from a UI. Requests take effect between turns; none interrupts a turn in progress."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._stop = False
        self._accept = False
        self._abort = False
        self._paused = False
        self._hints: list[tuple[str, str | None]] = []  # (hint, branch it is for; None: every branch)
        self._candidates: deque[tuple[str, int | None]] = deque()  # (source, the turn it continues)

    # ---- the UI's side

    def stop(self) -> None:
        """End the session after the current turn."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    def accept(self) -> None:
        """Take the best candidate so far and end the session after the current turn."""
        with self._cond:
            self._accept = True
            self._cond.notify_all()

    def pause(self) -> None:
        """Wait after the current turn until ``resume`` (stop, accept and submitted candidates still act)."""
        with self._cond:
            self._paused = True
            self._cond.notify_all()

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    def abort(self) -> None:
        """Leave now: stop drawing and judging at the next check, record the session as interrupted (resumable)."""
        with self._cond:
            self._abort = self._stop = True
            self._cond.notify_all()

    def hint(self, text: str, branch: str | None = None) -> None:
        """Add a hint to the next prompt sent to the model (with width > 1: on ``branch`` only, or every branch)."""
        text = text.strip()
        if text:
            with self._cond:
                self._hints.append((text, branch))
                self._cond.notify_all()

    def submit_candidate(self, source: str, parent: int | None = None) -> None:
        """Judge this source (e.g. a candidate the user edited) as its own turn, before the model's next one;
        with width > 1, as a child of turn ``parent`` (default: the best branch's tip)."""
        with self._cond:
            self._candidates.append((source, parent))
            self._cond.notify_all()

    # ---- the loop's side

    def rearm(self) -> None:
        """Forget an earlier run's stop, accept or abort, so the same controls can steer a resumed run."""
        with self._cond:
            self._stop = self._accept = self._abort = False

    @property
    def aborted(self) -> bool:
        with self._cond:
            return self._abort

    @property
    def stop_requested(self) -> bool:
        with self._cond:
            return self._stop

    @property
    def accept_requested(self) -> bool:
        with self._cond:
            return self._accept

    @property
    def paused(self) -> bool:
        with self._cond:
            return self._paused

    @property
    def has_candidate(self) -> bool:
        with self._cond:
            return bool(self._candidates)

    def take_submission(self) -> tuple[str, int | None] | None:
        """The next submitted candidate and the turn it continues."""
        with self._cond:
            return self._candidates.popleft() if self._candidates else None

    def take_candidate(self) -> str | None:
        got = self.take_submission()
        return got[0] if got else None

    def take_hints(self) -> list[str]:
        """Every queued hint (the chain has one branch)."""
        with self._cond:
            hints, self._hints = self._hints, []
            return [h for h, _ in hints]

    def take_branch_hints(self, branches: set[str]) -> dict[str | None, list[str]]:
        """Hints for a round: those for every branch under None, those for one of ``branches`` under its
        name; hints for a branch the round does not continue stay queued."""
        with self._cond:
            taken: dict[str | None, list[str]] = {}
            keep = []
            for h, b in self._hints:
                if b is None or b in branches:
                    taken.setdefault(b, []).append(h)
                else:
                    keep.append((h, b))
            self._hints = keep
            return taken

    def wait_while_paused(self, timeout: float | None = None) -> bool:
        """Block while paused with nothing to do; True when the loop should look again."""
        with self._cond:
            return self._cond.wait_for(
                lambda: not self._paused or self._stop or self._accept or self._abort or bool(self._candidates),
                timeout=timeout,
            )
