"""A turn in a few words: its mark, verdict and speedup. Marks and words, never colour alone."""

from __future__ import annotations

from rich.text import Text

from kernelfix.agent.state import Turn
from kernelfix.tools.verdict import Family

OK_MARK, FAIL_MARK, WARN_MARK, LIVE_MARK, BEST_MARK, PATH_MARK = "✓", "✗", "⚠", "…", "★", "☆"
# Cheating and infrastructure verdicts are warnings, not plain failures: the kernel may work.
_WARN_FAMILIES = {Family.CHEATING, Family.INFRA}


def mark(turn: Turn) -> str:
    v = turn.verdict
    if v is None:
        return LIVE_MARK
    if turn.correct:
        return OK_MARK
    return WARN_MARK if v.category.family in _WARN_FAMILIES else FAIL_MARK


def mark_style(m: str) -> str:
    return {OK_MARK: "bold green", FAIL_MARK: "bold red", WARN_MARK: "bold yellow"}.get(m, "bold")


def speedup_text(turn: Turn) -> str:
    """``1.25x``, ``untimed`` (correct where nothing is timed) or ``-`` (no speed for a failed kernel)."""
    v = turn.verdict
    if v is None or not turn.correct:
        return "-"
    if v.speedup_eager is None:
        return "untimed"
    return f"{v.speedup_eager:.2f}x"


def turn_label(turn: Turn, *, best: bool) -> Text:
    """Two lines for the turn list: mark, index, source, speedup, best; then the verdict category."""
    m = mark(turn)
    t = Text()
    t.append(f"{m} ", style=mark_style(m))
    t.append(f"{turn.index:>2} ", style="bold")
    t.append(f"{turn.source:<5} ")
    t.append(speedup_text(turn))
    if best:
        t.append(f" {BEST_MARK}best", style="bold")
    t.append("\n   ")
    t.append(short_category(turn))
    return t


def short_category(turn: Turn) -> str:
    """The category without the family's ``_error`` suffix (``correctness:numerical``): fits the 30-column list."""
    if turn.verdict is None:
        return ""
    family, _, detail = turn.verdict.category.value.partition(":")
    return f"{family.removesuffix('_error')}:{detail}" if detail else family


def live_label(index: int, source: str, activity: str) -> Text:
    t = Text()
    t.append(f"{LIVE_MARK} ", style="bold")
    t.append(f"{index:>2} ", style="bold")
    t.append(f"{source:<5} running")
    t.append(f"\n   {activity}", style="italic")
    return t


def _where(branch: str | None, parent: int | None) -> str:
    return (branch or "?") + ("" if parent is None else f"<{parent}")


def tree_label(turn: Turn, *, depth: int, best: bool, on_path: bool) -> Text:
    """A search's turn: as turn_label, with its branch and parent (``b3<2``) for the source, indented by how
    many times its path forked, and the best path marked (★best, and ☆path on the turns leading to it)."""
    m = mark(turn)
    pad = "  " * min(depth, 3)
    t = Text(pad)
    t.append(f"{m} ", style=mark_style(m))
    t.append(f"{turn.index:>2} ", style="bold" if on_path else "")
    where = _where(turn.branch, turn.parent) if turn.source == "model" else turn.source
    t.append(f"{where:<6} ")
    t.append(speedup_text(turn))
    if best:
        t.append(f" {BEST_MARK}best", style="bold")
    elif on_path:
        t.append(f" {PATH_MARK}path", style="bold")
    t.append(f"\n{pad}   ")
    t.append(short_category(turn))
    return t


def live_tree_label(index: int, branch: str | None, parent: int | None, activity: str, *, depth: int) -> Text:
    pad = "  " * min(depth, 3)
    t = Text(pad)
    t.append(f"{LIVE_MARK} ", style="bold")
    t.append(f"{index:>2} ", style="bold")
    t.append(f"{_where(branch, parent):<6} running")
    t.append(f"\n{pad}   {activity}", style="italic")
    return t
