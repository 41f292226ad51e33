"""Earlier sessions on disk: found under a folder, summarized from their settings and trajectory."""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel, ValidationError

from kernelfix.agent.session_dir import SETTINGS, SessionSettings, read_trajectory
from kernelfix.tui.view_model import is_open, short_model

MAX_DEPTH = 3  # sessions/X, or a batch's OUT/sessions/X


class SessionSummary(BaseModel):
    path: str
    task: str
    model: str
    turns: int
    status: str  # finished / open (stopped or accepted by the user) / interrupted / not started / unreadable
    stop_reason: str | None = None
    success: bool = False
    best: str = "-"  # the best turn and its speed, in words
    resumable: bool = False
    updated_at: float | None = None

    @property
    def updated(self) -> str:
        return "-" if self.updated_at is None else time.strftime("%Y-%m-%d %H:%M", time.gmtime(self.updated_at))

    @property
    def result(self) -> str:
        """What the session found, in words (the list's result column, on screen and in `--list`)."""
        if self.status.startswith("unreadable") or self.status == "not started":
            return self.status
        return ("✓ found" if self.success else "✗ none") + (", resumable" if self.resumable else "")


def _dirs(root: Path, depth: int):
    if (root / SETTINGS).is_file():
        yield root
        return
    if depth == 0:
        return
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return
    for child in children:
        yield from _dirs(child, depth - 1)


def summarize(path: Path) -> SessionSummary:
    try:
        settings = SessionSettings.model_validate_json((path / SETTINGS).read_text(encoding="utf-8"))
    except (OSError, ValueError, ValidationError) as e:
        return SessionSummary(
            path=str(path), task="?", model="?", turns=0, status=f"unreadable: {str(e).splitlines()[0]}"
        )
    base = dict(
        path=str(path),
        task=Path(settings.task_path).stem,
        model=short_model(settings.model),
        updated_at=settings.created_at,
    )
    try:
        traj = read_trajectory(path)
    except (OSError, ValueError, ValidationError) as e:
        return SessionSummary(**base, turns=0, status=f"unreadable: {str(e).splitlines()[0]}")
    if traj is None:
        return SessionSummary(**base, turns=0, status="not started", resumable=True)
    o = traj.outcome
    best = "-"
    if o.best_turn is not None:
        best = f"turn {o.best_turn}, " + ("untimed" if o.best_speedup_eager is None else f"{o.best_speedup_eager:.2f}x")
    # A limit that was reached can be raised on resume; a killed run continues where it stopped; a user's stop or accept reopens.
    resumable = is_open(o)
    return SessionSummary(
        **{**base, "updated_at": traj.updated_at},
        turns=len(traj.turns),
        status=("open" if o.stop_kind in ("user_stop", "user_accept") else "finished") if o.finished else "interrupted",
        stop_reason=o.stop_reason,
        success=o.success,
        best=best,
        resumable=resumable,
    )


def find_sessions(root: str | Path) -> list[SessionSummary]:
    """Every session under ``root`` (itself one, or up to three folders down), newest first."""
    found = [summarize(p) for p in _dirs(Path(root), MAX_DEPTH)]
    return sorted(found, key=lambda s: s.updated_at or 0.0, reverse=True)
