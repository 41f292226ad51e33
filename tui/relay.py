"""Carries a session's events from its worker thread to the screen showing it.

A ``Session`` takes its event sink when it is made, before any screen exists;
the relay is that sink. Events that arrive before a screen is attached wait.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from textual.message import Message

from kernelfix.agent.events import SessionEvent


class SessionEventMessage(Message):
    """One session event, delivered on the app's thread."""

    def __init__(self, event: SessionEvent) -> None:
        super().__init__()
        self.event = event


class EventRelay:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._target: Callable[[SessionEvent], object] | None = None
        self._waiting: list[SessionEvent] = []

    def attach(self, target: Callable[[SessionEvent], object]) -> None:
        """``target`` must be safe to call from any thread (a widget's ``post_message`` is)."""
        with self._lock:
            self._target = target
            waiting, self._waiting = self._waiting, []
        for e in waiting:
            target(e)

    def __call__(self, event: SessionEvent) -> None:
        with self._lock:
            target = self._target
            if target is None:
                self._waiting.append(event)
                return
        target(event)
