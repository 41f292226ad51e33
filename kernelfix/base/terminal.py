"""How kernelfix writes for a person: rich consoles sized to the terminal, and never wrapped when piped.

On a terminal, rich wraps at the terminal's width (``COLUMNS`` when set), between words. Into a pipe or
a file, a line stays one line however long: rich's default of 80 columns would otherwise break paths and
table cells mid-token (``sessions/relu`` / ``-demo2``), which a script reading the output cannot undo.
Text cut short for a one-line summary is cut between words, with an ellipsis (``clip``).
"""

from __future__ import annotations

import sys
from typing import IO

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

PIPE_WIDTH = 100_000  # "no width": a table or a line piped is as wide as its contents
ELLIPSIS = "..."


def console(*, stderr: bool = False, file: IO[str] | None = None, **options) -> Console:
    """A Console for stdout (or stderr, or ``file``): the terminal's width on a terminal; unwrapped when not."""
    target = file if file is not None else (sys.stderr if stderr else sys.stdout)
    probe = Console(file=target, **options)
    if probe.is_terminal:
        return probe
    return Console(
        file=target,
        width=PIPE_WIDTH,
        soft_wrap=True,
        **{k: v for k, v in options.items() if k not in ("width", "soft_wrap")},
    )


def clip(text: str, limit: int) -> str:
    """The first line of ``text``, at most ``limit`` characters, cut between words (an ellipsis says so)."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    if len(line) <= limit:
        return line
    room = limit - len(ELLIPSIS)
    cut = line.rfind(" ", 0, room + 1)
    if cut <= 0:  # one long token (a path): whole, never cut inside it
        cut = line.find(" ")
        return line if cut < 0 else line[:cut] + ELLIPSIS
    return line[:cut].rstrip(" ,;:") + ELLIPSIS


def print_rows(out: Console, columns: list[str], rows: list[list[str]]) -> None:
    """Rows as a table where it fits the terminal with every word whole (piped, always: one line per row);
    on a terminal too narrow for that, one block per row, ``column: value`` lines wrapped between words."""
    cells = [[col, *(r[i] for r in rows)] for i, col in enumerate(columns)]
    least = [max(_longest_word(x) for x in c) for c in cells]  # a column narrower than a word would cut it
    most = [max(max(cell_len(line) for line in (x.splitlines() or [""])) for x in c) for c in cells]
    room = out.width - 2 * (len(columns) - 1)
    if sum(least) > room:
        _blocks(out, columns, rows)
        return
    widths = list(most)
    if (
        sum(most) > room
    ):  # each column its longest word, then what is left shared out, the least demanding served whole first
        widths, spare = list(least), room - sum(least)
        order = sorted(range(len(columns)), key=lambda i: most[i] - least[i])
        for k, i in enumerate(order):
            give = min(most[i] - least[i], spare // (len(order) - k))
            widths[i] += give
            spare -= give
    t = Table(box=None, pad_edge=False, header_style="bold")
    for col, w in zip(columns, widths):
        t.add_column(col, width=w, overflow="fold")
    for row in rows:
        t.add_row(*(Text(x) for x in row))
    out.print(t)


def _blocks(out: Console, columns: list[str], rows: list[list[str]]) -> None:
    """One block per row, ``column  value`` lines, values wrapped between words; a word longer than the line
    (a path) is printed whole and left to the terminal to carry over, never cut by us."""
    import textwrap

    width = max(len(c) for c in columns)
    room = max(20, out.width - width - 2)
    for n, row in enumerate(rows):
        if n:
            out.print()
        for col, value in zip(columns, row):
            lines = textwrap.wrap(value, room, break_long_words=False, break_on_hyphens=False) or [""]
            for k, line in enumerate(lines):
                head = Text(f"{col:<{width}}  " if k == 0 else " " * (width + 2), style="bold" if k == 0 else "")
                out.print(head + Text(line), no_wrap=True, overflow="ignore", crop=False)


def _longest_word(text: str) -> int:
    return max((cell_len(w) for w in text.split()), default=0)
