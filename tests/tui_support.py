"""Helpers for the terminal UI tests: a replay model the test lets through one reply at a time,
a live app over a real session on the shared CPU judge, and the screen as text."""

from __future__ import annotations

import html
import re
import threading
import time
from pathlib import Path

from agent_support import TASK, write_replay

from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.models import ChatModel, ReplayModel
from kernelfix.agent.session import Session
from kernelfix.tui.app import KernelfixApp
from kernelfix.tui.relay import EventRelay

SIZE = (80, 24)  # the smallest terminal the UI promises to work in
_RUNNING: list[tuple["GatedModel", Session]] = []  # stopped and let through when a test's loop ends


class GatedModel(ChatModel):
    """A ReplayModel whose every reply waits for the test's ``release()``: the test decides when a turn
    ends, so "after the current turn" is a point the test controls rather than a race."""

    def __init__(self, replay: ReplayModel):
        self.replay = replay
        self.name = replay.name
        self._gate = threading.Semaphore(0)
        self._open = threading.Event()
        self.waiting = threading.Event()  # set while a call waits at the gate

    def release(self, n: int = 1) -> None:
        for _ in range(n):
            self._gate.release()

    def open(self) -> None:
        """Let every call through (teardown: the session thread must be able to finish)."""
        self._open.set()
        self._gate.release()

    def complete(self, messages, *, call_index, on_delta=None, on_retry=None):
        self.waiting.set()
        while not self._open.is_set() and not self._gate.acquire(timeout=0.1):
            pass
        self.waiting.clear()
        return self.replay.complete(messages, call_index=call_index, on_delta=on_delta, on_retry=on_retry)


def live_app(
    tmp_path: Path, judge, lines: list, name: str = "session", **agent
) -> tuple[KernelfixApp, GatedModel, Session]:
    model = GatedModel(ReplayModel(write_replay(tmp_path / f"{name}.jsonl", lines)))
    relay = EventRelay()
    session = Session.create(
        tmp_path / name,
        task_path=TASK,
        model=model,
        agent=AgentConfig(**{"shape_block": False, **agent}),
        judge_config=judge.config,
        judge=judge,
        on_event=relay,
    )
    _RUNNING.append((model, session))
    return KernelfixApp(session=session, relay=relay), model, session


async def until(pilot, condition, what: str, limit_s: float = 90.0) -> None:
    """Let the app run until ``condition()`` holds; the limit only keeps a broken test from hanging."""
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        await pilot.pause(0.05)


_TEXT = re.compile(r'<text class="[^"]*-r\d+"[^>]*\bx="([\d.]+)" y="([\d.]+)"[^>]*>([^<]*)</text>')


def screen_text(app: KernelfixApp) -> str:
    """What the terminal shows, as lines of plain text (from the app's SVG screenshot)."""
    rows: dict[float, list[tuple[float, str]]] = {}
    for x, y, text in _TEXT.findall(app.export_screenshot()):
        rows.setdefault(float(y), []).append((float(x), html.unescape(text).replace("\xa0", " ")))
    lines = []
    for y in sorted(rows):
        line = ""
        for x, text in sorted(rows[y]):
            col = round(x / 12.2) - 1  # 12.2 px per cell, after one cell of margin
            line = line.ljust(col) + text
        lines.append(line.rstrip())
    return "\n".join(lines)


def sync(test):
    """Run an async test body in its own event loop (no asyncio plugin needed); fixtures pass through."""
    import asyncio
    import functools

    async def body(*args, **kwargs):
        try:
            return await test(*args, **kwargs)
        finally:
            # The session's thread must not be left at the gate, nor outlive the test (it shares the judge).
            while _RUNNING:
                model, session = _RUNNING.pop()
                session.controls.stop()
                model.open()
            for thread in threading.enumerate():
                if thread.name == "kernelfix-session":
                    thread.join(timeout=120)

    @functools.wraps(test)
    def run(*args, **kwargs):
        return asyncio.run(body(*args, **kwargs))

    return run


async def shown(pilot, app: KernelfixApp, *texts: str) -> str:
    """Wait until the screen shows every one of ``texts`` (the UI redraws ~10 times a second); returns the screen."""
    # Compared with runs of whitespace (line breaks too) as one space: a long status line wraps.
    flat = lambda s: " ".join(s.split())  # noqa: E731
    await until(pilot, lambda: all(flat(t) in flat(screen_text(app)) for t in texts), f"the screen shows {texts}")
    return screen_text(app)
