"""The kernelfix terminal UI: watch, steer and resume repair sessions.

    KernelfixApp(session=..., relay=...)          a live session (kernelfix optimize / resume)
    KernelfixApp(sessions_root=..., resume=...)   earlier sessions (kernelfix sessions)

``app.run()`` returns the live session's Outcome (None when there was none);
an exception that stopped the session is kept in ``app.error``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from textual.app import App

from kernelfix.agent.session import Session
from kernelfix.agent.state import Outcome
from kernelfix.tui.relay import EventRelay
from kernelfix.tui.screens.session_screen import ResumeFactory, SessionScreen
from kernelfix.tui.screens.sessions_screen import SessionsScreen
from kernelfix.tui.view_model import SessionView


class KernelfixApp(App[Outcome | None]):
    CSS_PATH = "kernelfix.tcss"
    TITLE = "kernelfix"
    ENABLE_COMMAND_PALETTE = False

    def __init__(
        self,
        *,
        session: Session | None = None,
        relay: EventRelay | None = None,
        sessions_root: str | Path | None = None,
        resume: ResumeFactory | None = None,
    ) -> None:
        super().__init__()
        if (session is None) == (sessions_root is None):
            raise ValueError("give a session to run or a folder of sessions to list")
        if session is not None and relay is None:
            raise ValueError("a live session needs the EventRelay it was made with (its on_event)")
        self._session = session
        self._relay = relay
        self._root = Path(sessions_root) if sessions_root is not None else None
        self._resume_factory = resume
        self.outcome: Outcome | None = None
        self.error: BaseException | None = None
        self.running_session: Session | None = None
        self.session_thread: threading.Thread | None = None

    def start_session(self, session: Session, on_done: Callable[[Outcome | None, BaseException | None], None]) -> None:
        """Run ``session`` in a daemon thread, not a Textual worker: the app must be able to exit (q) while a
        turn is in flight, and Textual waits for its workers' threads on exit."""

        def run() -> None:
            outcome = error = None
            try:
                outcome = self.outcome = session.run()
            except BaseException as e:  # noqa: BLE001 - kept for the CLI, which re-raises it
                error = self.error = e
            try:
                on_done(outcome, error)
            except Exception:  # the app is gone (left mid-turn): nothing to tell
                pass

        self.running_session = session
        self.session_thread = threading.Thread(target=run, name="kernelfix-session", daemon=True)
        self.session_thread.start()

    def on_mount(self) -> None:
        if self._session is not None:
            self.push_screen(
                SessionScreen(
                    SessionView(session_dir=str(self._session.store.path)), session=self._session, relay=self._relay
                )
            )
        else:
            self.push_screen(SessionsScreen(self._root, resume=self._resume_factory))
