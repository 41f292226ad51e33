"""The candidate, its diff against the previous turn, and the compile/runtime log."""

from __future__ import annotations

import difflib
from pathlib import Path

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.text import Text

from kernelfix.agent.state import Turn

LOG_TAIL_LINES = 200  # a log can be megabytes; the end says what failed


def candidate_view(turn: Turn) -> RenderableType:
    if turn.code is None:
        why = turn.verdict.message if turn.verdict and turn.verdict.message else "no code was extracted from the reply"
        return Text(f"no candidate: {why}", style="italic")
    return Syntax(
        turn.code, "python", line_numbers=True, word_wrap=True, theme="ansi_dark"
    )  # wrapped: no sideways scrolling at 80 columns


def diff_text(before: str, after: str, before_name: str, after_name: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), before_name, after_name
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def diff_view(turn: Turn, previous: Turn | None) -> RenderableType:
    if turn.code is None:
        return Text("no candidate in this turn: nothing to compare", style="italic")
    if previous is None or previous.code is None:
        return Text("the first candidate: no earlier turn to compare with", style="italic")
    d = diff_text(previous.code, turn.code, f"turn {previous.index}", f"turn {turn.index}")
    if not d:
        return Text(f"same code as turn {previous.index}", style="italic")
    # '+' and '-' line prefixes carry the meaning; the colours only repeat it.
    return Syntax(d, "diff", theme="ansi_dark", word_wrap=True)


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    rows = text.splitlines()
    if len(rows) > lines:
        rows = [f"[... {len(rows) - lines} earlier lines in {path}]", *rows[-lines:]]
    return "\n".join(rows)


def log_view(turn: Turn) -> RenderableType:
    v = turn.verdict
    if v is None:
        return Text("not judged yet", style="italic")
    parts: list[RenderableType] = []
    head = Text()
    head.append(f"{v.category.value}", style="bold")
    if v.failed_stage:
        head.append(f"  (failed in {v.failed_stage})")
    parts.append(head)
    if v.message:
        parts.append(Text(v.message))
    if v.stage_seconds:
        parts.append(Text("stages: " + ", ".join(f"{k} {s:.1f}s" for k, s in v.stage_seconds.items()), style="dim"))
    c = v.compile
    if c is not None:
        built = "built" if c.ok else "FAILED"
        parts.append(
            Text(
                f"\ncompile ({c.backend}): {built} in {c.seconds:.1f}s" + (", cached" if c.cached else ""), style="bold"
            )
        )
        if c.note:
            parts.append(Text(c.note))
        if c.errors:
            parts.append(Text("\n".join(c.errors)))
        for ext in c.extensions:
            parts.append(
                Text(
                    f"extension {ext.name}: {ext.seconds:.1f}s, {ext.objects_built} built, {ext.objects_reused} reused"
                    + (" (cached)" if ext.cached else "")
                )
            )
    if v.warnings:
        parts.append(Text("\nwarnings:", style="bold"))
        parts.extend(Text(f"⚠ {w}") for w in v.warnings)
    logs = sorted(Path(v.logs_dir).glob("*.log")) if v.logs_dir and Path(v.logs_dir).is_dir() else []
    for log in logs:
        body = _tail(log)
        if body and body.strip():
            parts.append(Text(f"\n── {log.name} ──", style="bold"))
            parts.append(Text(body))
    if v.logs_dir and not logs:
        parts.append(
            Text(
                f"\nlogs: {v.logs_dir} (not on this machine)"
                if not Path(v.logs_dir).is_dir()
                else f"\nlogs: {v.logs_dir} (empty)",
                style="dim",
            )
        )
    return Group(*parts)
