"""Top line: task, model, device, tokens and cost so far, elapsed time, and the session's state."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from kernelfix.tui.view_model import SessionView


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def header_text(view: SessionView) -> str:
    prompt, completion = view.tokens()
    cost = view.cost()
    state = "⏸ paused" if view.paused else "▶ running" if view.running else "■ ended" if view.outcome else ""
    bits = [
        state,
        view.task or "?",
        view.model or "?",
        view.device or "?",
        f"tok {prompt}/{completion}",
        "$?" if cost is None else f"${cost:.4f}",
        _clock(view.elapsed()),
    ]
    return " · ".join(b for b in bits if b)


class SessionHeader(Static):
    def show(self, view: SessionView) -> None:
        self.update(Text(header_text(view)))
