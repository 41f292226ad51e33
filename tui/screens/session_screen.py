"""One session: the turns on the left, the selected turn in tabs, live stages, steering keys.

A live session runs in its own thread (the app's ``start_session``); its events come back as messages,
so the UI stays responsive while the model or the judge works. The same screen shows a finished session
from its trajectory and can resume it. With width > 1 the hint and edit keys act on the selected turn's
branch; pause, stop and accept on the session.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, OptionList

from kernelfix.agent.events import EventSink, SessionEnded
from kernelfix.agent.session import Session
from kernelfix.tui.relay import EventRelay, SessionEventMessage
from kernelfix.tui.screens.dialogs import EditCandidateScreen, HintScreen
from kernelfix.tui.view_model import SessionView
from kernelfix.tui.widgets.session_header import SessionHeader
from kernelfix.tui.widgets.stage_bar import StageBar
from kernelfix.tui.widgets.turn_detail import TABS, TurnDetail
from kernelfix.tui.widgets.turn_list import TurnList

ResumeFactory = Callable[[Path, EventSink], Session]  # (session dir, event sink) -> a Session ready to run
_LIVE_ONLY = {"pause", "edit", "hint", "accept", "stop"}


class SessionDone(Message):
    """The session's thread ended: with its outcome, or the error that stopped it."""

    def __init__(self, outcome, error: BaseException | None) -> None:
        super().__init__()
        self.outcome, self.error = outcome, error


class SessionScreen(Screen):
    BINDINGS = [
        Binding("p", "pause", "pause"),
        Binding("e", "edit", "edit"),
        Binding("h", "hint", "hint"),
        Binding("a", "accept", "accept"),
        Binding("s", "stop", "stop"),
        Binding("r", "resume", "resume"),
        Binding("escape", "back", "back"),
        Binding("q", "quit", "quit"),
        *[Binding(str(n), f"tab('{pane}')", label, show=False) for n, (pane, label) in enumerate(TABS, 1)],
    ]

    def __init__(
        self,
        view: SessionView,
        *,
        session: Session | None = None,
        relay: EventRelay | None = None,
        resume: ResumeFactory | None = None,
        can_go_back: bool = False,
    ) -> None:
        super().__init__()
        self.view = view
        self.session = session
        self.relay = relay or EventRelay()
        self._resume = resume
        self._can_go_back = can_go_back
        self._request: str | None = None  # the steering asked for and not yet done, shown in the stage bar
        self._leave_when_done = False
        self._dirty = True

    def compose(self) -> ComposeResult:
        yield SessionHeader(id="header")
        with Horizontal(id="body"):
            yield TurnList(id="turns")
            yield TurnDetail(id="detail")
        yield StageBar(id="stage")
        yield Footer()

    def on_mount(self) -> None:
        self.relay.attach(lambda e: self.post_message(SessionEventMessage(e)))
        self.set_interval(0.1, self._redraw_if_dirty)  # batches streamed tokens into ~10 redraws a second
        self.set_interval(1.0, lambda: self.query_one(SessionHeader).show(self.view))
        self.query_one(TurnList).focus()
        if self.session is not None:
            self._start(self.session)
        self._redraw()

    # ------------------------------------------------------------------ the session

    def _start(self, session: Session) -> None:
        self.session = session
        self.view.running = True
        self.app.start_session(session, lambda outcome, error: self.post_message(SessionDone(outcome, error)))
        self.refresh_bindings()

    def on_session_done(self, message: SessionDone) -> None:
        app = self.app
        if message.error is not None:
            self.view.running = False
            self.view.activity = f"stopped by an error: {type(message.error).__name__}: {message.error}"
            self.notify(self.view.activity, severity="error", timeout=30, markup=False)
        self._request = None
        self._dirty = True
        self.refresh_bindings()
        if self._leave_when_done:
            app.exit(app.outcome)

    def on_session_event_message(self, message: SessionEventMessage) -> None:
        self.view.apply(message.event)
        if isinstance(message.event, SessionEnded):
            self._request = None
            self.refresh_bindings()
        if self._request == "pausing after this turn" and self.view.paused:
            self._request = None
        self._dirty = True

    # ------------------------------------------------------------------ drawing

    def _redraw_if_dirty(self) -> None:
        if self._dirty:
            self._redraw()

    def _redraw(self) -> None:
        self._dirty = False
        self.query_one(SessionHeader).show(self.view)
        turns = self.query_one(TurnList)
        turns.show(self.view)
        self.query_one(TurnDetail).show(self.view, turns.selected_turn())
        self.query_one(StageBar).show(self.view, self._request)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self.query_one(TurnDetail).show(self.view, self.query_one(TurnList).selected_turn())

    # ------------------------------------------------------------------ keys

    @property
    def live(self) -> bool:
        return self.session is not None and self.view.running

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in _LIVE_ONLY:
            return self.live
        if action == "resume":
            if self._resume is None or not (self.live or self.view.resumable):
                return False
            return None if self.live else True  # shown, dimmed, while running
        if action == "back":
            return self._can_go_back and not self.live
        return True

    def _ask(self, what: str) -> None:
        self._request = what
        self._dirty = True

    def action_pause(self) -> None:
        controls = self.session.controls
        if controls.paused:
            controls.resume()
            self._ask("resuming")
        else:
            controls.pause()
            self._ask("pausing after this turn")

    def _selected_branch(self) -> tuple[int | None, str | None]:
        """A search's selected turn and its branch (what hint and edit act on); (None, None) for a chain."""
        index = self.query_one(TurnList).selected_turn()
        turn = self.view.turn(index) if index is not None else None
        live = self.view.lives.get(index) if index is not None else None
        if not self.view.branched or (turn is None and live is None):
            return None, None
        return (index if turn is not None else None), (turn.branch if turn is not None else live.branch)

    def action_edit(self) -> None:
        index = self.query_one(TurnList).selected_turn()
        turn = self.view.turn(index) if index is not None else None
        source = turn.code if turn is not None and turn.code is not None else None
        if source is None and index is not None:
            source = self.view.previous_code(index + 1)
        title = f"edit turn {turn.index}'s candidate" if turn is not None and turn.code else "write a candidate"
        if source is None:
            source = _template(self.view.session_dir)

        parent, branch = self._selected_branch()

        def judge_it(text: str | None) -> None:
            if text is not None and text.strip():
                self.session.controls.submit_candidate(text, parent=parent)
                where = f" on {branch}, after turn {parent}" if parent is not None else ""
                self._ask(f"your candidate is judged next{where}")
                self.notify(
                    f"your candidate will be judged as its own turn{where}, after the current one", markup=False
                )

        self.app.push_screen(EditCandidateScreen(source, title), judge_it)

    def action_hint(self) -> None:
        _, branch = self._selected_branch()

        def add(text: str | None) -> None:
            if text:
                self.session.controls.hint(text, branch=branch)
                self._ask(f"hint queued{' for ' + branch if branch else ''}: {text[:40]}")
                self.notify(f"hint added to the next prompt{' on ' + branch if branch else ''}: {text}", markup=False)

        self.app.push_screen(HintScreen(), add)

    def action_accept(self) -> None:
        self.session.controls.accept()
        self._leave_when_done = True
        self._ask("accepting the best after this turn, then leaving")

    def action_stop(self) -> None:
        self.session.controls.stop()
        self._ask("stopping after this turn")

    def action_resume(self) -> None:
        try:
            session = self._resume(Path(self.view.session_dir), self.relay)
        except Exception as e:  # a locked session, a model that cannot be made: say why, stay here
            self.notify(f"cannot resume: {e}", severity="error", timeout=15, markup=False)
            return
        self._start(session)

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_quit(self) -> None:
        if self.live:
            # Leave now: the session stops at its next check (the CLI does not wait for a judge stage in
            # flight) and stays resumable, as after a kill: every judged turn is already on disk.
            self.session.controls.abort()
        self.app.exit(self.app.outcome)

    def action_tab(self, pane: str) -> None:
        self.query_one(TurnDetail).select_tab(pane)


def _template(session_dir: str) -> str:
    """A starting point where no turn has code yet: the task itself, to turn into ModelNew."""
    try:
        task = (Path(session_dir) / "task.py").read_text(encoding="utf-8")
    except OSError:
        task = ""
    return (
        "# No candidate yet. Write class ModelNew (same constructor and forward as Model) with your kernels.\n" + task
    )
