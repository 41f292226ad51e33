"""What a running session tells a UI, and how a UI steers it.

Events are typed pydantic models delivered, in order, to one callback on the
session's thread (a Textual app forwards them with ``call_from_thread``).
``Controls`` is thread-safe: a UI calls its methods from any thread; the loop
reads them between turns.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelfix.agent.state import Outcome, Turn, TurnSource, Usage
from kernelfix.tools.judge import StageEvent


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


class Notice(_Event):
    """Something the user should know that is not a turn (judging on cpu, no shape block, ...)."""

    kind: Literal["notice"] = "notice"
    text: str


class TurnStarted(_Event):
    kind: Literal["turn_started"] = "turn_started"
    turn: int
    source: TurnSource


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
    SessionStarted | Notice | TurnStarted | ModelDelta | ModelRetry | ModelReplied | StageUpdate | TurnJudged | SessionPaused | SessionUnpaused | SessionEnded,
    Field(discriminator="kind"),
]
EventSink = Callable[[SessionEvent], None]


class Controls:
    """Steering from a UI. Requests take effect between turns; none interrupts a turn in progress."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._stop = False
        self._accept = False
        self._paused = False
        self._hints: list[str] = []
        self._candidates: deque[str] = deque()

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

    def hint(self, text: str) -> None:
        """Add a hint to the next prompt sent to the model."""
        text = text.strip()
        if text:
            with self._cond:
                self._hints.append(text)
                self._cond.notify_all()

    def submit_candidate(self, source: str) -> None:
        """Judge this source (e.g. a candidate the user edited) as its own turn, before the model's next one."""
        with self._cond:
            self._candidates.append(source)
            self._cond.notify_all()

    # ---- the loop's side

    def rearm(self) -> None:
        """Forget an earlier run's stop or accept, so the same controls can steer a resumed run."""
        with self._cond:
            self._stop = self._accept = False

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

    def take_candidate(self) -> str | None:
        with self._cond:
            return self._candidates.popleft() if self._candidates else None

    def take_hints(self) -> list[str]:
        with self._cond:
            hints, self._hints = self._hints, []
            return hints

    def wait_while_paused(self, timeout: float | None = None) -> bool:
        """Block while paused with nothing to do; True when the loop should look again."""
        with self._cond:
            return self._cond.wait_for(
                lambda: not self._paused or self._stop or self._accept or bool(self._candidates), timeout=timeout
            )
