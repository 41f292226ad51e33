"""Earlier sessions: pick one to see its history (enter) or to continue it (r)."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from kernelfix.agent.session_dir import SETTINGS, SessionSettings, read_trajectory
from kernelfix.tui.screens.session_screen import ResumeFactory, SessionScreen
from kernelfix.tui.session_list import SessionSummary, find_sessions
from kernelfix.tui.view_model import SessionView, short_model


class SessionsScreen(Screen):
    BINDINGS = [
        Binding("enter", "open", "open"),
        Binding("r", "resume", "resume"),
        Binding("g", "reload", "reload"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, root: Path, resume: ResumeFactory | None = None) -> None:
        super().__init__()
        self.root = root
        self._resume = resume
        self.sessions: list[SessionSummary] = []

    def compose(self) -> ComposeResult:
        yield Static(Text(f"kernelfix · sessions in {self.root}"), id="header")
        yield DataTable(id="sessions", cursor_type="row", zebra_stripes=True)
        yield Static("", id="stage")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("task", "turns", "result", "best", "updated", "model")
        self.action_reload()
        table.focus()

    def on_screen_resume(self) -> None:
        self.action_reload()  # a session resumed from here has new turns

    def action_reload(self) -> None:
        table = self.query_one(DataTable)
        row = table.cursor_row
        table.clear()
        self.sessions = find_sessions(self.root)
        for s in self.sessions:
            table.add_row(*(Text(c) for c in (s.task, str(s.turns), s.result, s.best, s.updated, s.model)), key=s.path)
        if self.sessions:
            table.move_cursor(row=min(row, len(self.sessions) - 1))
        self._describe()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._describe()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    def _describe(self) -> None:
        s = self._selected()
        if s is None:
            text = f"no sessions under {self.root}" if not self.sessions else ""
        else:
            text = f"{s.status}: {s.stop_reason or '-'}  ({s.path})"
        self.query_one("#stage", Static).update(Text(text))

    def _selected(self) -> SessionSummary | None:
        row = self.query_one(DataTable).cursor_row
        return self.sessions[row] if self.sessions and 0 <= row < len(self.sessions) else None

    def _screen_for(self, s: SessionSummary) -> SessionScreen:
        traj = read_trajectory(s.path)
        if traj is not None:
            view = SessionView.from_trajectory(traj, s.path)
        else:  # created, never run: what its settings say
            settings = SessionSettings.model_validate_json((Path(s.path) / SETTINGS).read_text(encoding="utf-8"))
            view = SessionView(
                task=s.task,
                model=short_model(settings.model),
                device=settings.judge.device or "?",
                session_dir=s.path,
                activity="not started",
            )
        return SessionScreen(view, resume=self._resume, can_go_back=True)

    def action_open(self) -> None:
        s = self._selected()
        if s is None or s.status.startswith("unreadable"):
            return
        self.app.push_screen(self._screen_for(s))

    def action_resume(self) -> None:
        s = self._selected()
        if s is None or s.status.startswith("unreadable") or self._resume is None:
            return
        screen = self._screen_for(s)
        self.app.push_screen(screen)
        screen.call_after_refresh(screen.action_resume)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self._resume is not None if action == "resume" else True

    def action_quit(self) -> None:
        self.app.exit(None)
