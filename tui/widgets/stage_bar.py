"""The line above the footer: what the session is doing right now, and what a key press asked for."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from kernelfix.tui.view_model import SessionView


def activity_text(view: SessionView, request: str | None) -> str:
    if len(view.lives) > 1:  # a search's round: every candidate in flight, in short
        now = f"round {view.round}: " + " · ".join(f"{i}: {view.lives[i].activity}" for i in sorted(view.lives))
    elif view.live is not None:
        now = f"turn {view.live.index}: {view.live.activity}"
    elif view.paused:
        where = "before the first turn" if view.paused_after is None else f"after turn {view.paused_after}"
        now = f"⏸ paused {where}: p resumes, e edits, h adds a hint"
    else:
        now = view.activity or ("waiting..." if view.running else "")
    return f"{now}  [{request}]" if request and view.running else now


class StageBar(Static):
    def show(self, view: SessionView, request: str | None) -> None:
        self.update(Text(activity_text(view, request)))  # Text: brackets are not markup
