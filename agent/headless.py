"""Headless reporting: one line per finished turn, then a summary (rich).

On a terminal a status line on stderr shows the turn and stage in progress, and lines wrap between
words at the terminal's width; piped output gets only the turn lines and the summary, each line whole
(kernelfix.base.terminal). ``verbosity`` -1 (-q): the summary alone; 1 (-v): under each turn line, the
verdict's message whole and the judge's stage times.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kernelfix.agent.events import (
    ModelReplied,
    ModelRetry,
    Notice,
    RoundJudged,
    RoundStarted,
    SessionEnded,
    SessionEvent,
    SessionStarted,
    StageUpdate,
    TurnJudged,
    TurnStarted,
)
from kernelfix.agent.state import RoundRecord, Turn
from kernelfix.base.terminal import clip
from kernelfix.base.terminal import console as _console

MESSAGE_CHARS = 100  # of a failed turn's message on its line (cut between words; -v prints it whole)


def _num(x: float | int | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def where(turn: Turn) -> str:
    """A search's turn in the tree: its branch, and the turn it continues (``b3<-2``)."""
    return (turn.branch or "?") + ("" if turn.parent is None else f"<-{turn.parent}")


def turn_line(turn: Turn, *, best_turn: int | None, tree: bool = False) -> Text:
    v = turn.verdict
    ok = turn.correct
    line = Text()
    line.append(f"turn {turn.index:>2} ", style="bold")
    line.append(f"{turn.source:<9} ", style="dim")
    if tree:
        line.append(f"{where(turn):<9} ", style="cyan")
    line.append(f"{v.category.value:<36}", style="bold green" if ok else "red")
    if v.speedup_eager is not None:
        line.append(f" {v.speedup_eager:.2f}x eager", style="green")
        if v.speedup_compile is not None:
            line.append(f" {v.speedup_compile:.2f}x compile", style="green")
    elif ok:
        line.append(" not timed", style="dim")
    elif v.message:
        line.append(" " + clip(v.message, MESSAGE_CHARS))
    u = turn.usage
    stats = f"  [judge {_num(turn.judge_s, '.1f')}s"
    if turn.source == "model":
        stats += (
            f", model {_num(u.latency_s, '.1f')}s, tokens {_num(u.prompt_tokens, 'd')}/{_num(u.completion_tokens, 'd')}"
        )
        if u.cost_usd:
            stats += f", ${u.cost_usd:.4f}"
    line.append(stats + "]", style="dim")
    if best_turn == turn.index:
        line.append("  best", style="bold green")
    return line


def turn_detail(turn: Turn) -> Text:
    """-v: under a turn's line, its verdict's message whole and where the judge's time went."""
    v = turn.verdict
    lines = [Text(f"    {v.message}")] if v.message else []
    if v.stage_seconds:
        lines.append(Text("    stages: " + ", ".join(f"{k} {s:.1f}s" for k, s in v.stage_seconds.items()), style="dim"))
    return Text("\n").join(lines)


def round_line(r: RoundRecord) -> Text:
    """A round of a search: how many were judged (and why others were not), its wall time beside its verdicts' summed time."""
    judged = sum(s.status == "judged" for s in r.slots)
    line = Text()
    line.append(f"round {r.round}: ", style="bold")
    line.append(f"{judged} of {len(r.slots)} candidates judged")
    left_out = [s for s in r.slots if s.status != "judged"]
    if left_out:
        line.append(f" ({len(left_out)} {left_out[0].reason})", style="dim")
    line.append(
        f"; {r.wall_s:.1f} s wall, {r.judge_s:.1f} s of judging; keeps turns {', '.join(map(str, r.kept)) or '-'}",
        style="dim",
    )
    return line


def summary(ended: SessionEnded, turns_seen: list[Turn]) -> Table:
    o = ended.outcome
    t = Table(title="session summary", show_header=False, title_justify="left", box=None, pad_edge=False)
    t.add_column(style="bold cyan", no_wrap=True)
    t.add_column()
    status = "finished" if o.finished else "interrupted"
    t.add_row("status", Text(f"{status}: {o.stop_reason or ''}", style="green" if o.success else "yellow"))
    t.add_row(
        "result",
        Text(
            "a correct, legal kernel was found" if o.success else "no correct, legal kernel",
            style="bold green" if o.success else "bold red",
        ),
    )
    if o.best_turn is not None:
        speed = (
            "not timed"
            if o.best_speedup_eager is None
            else f"{o.best_speedup_eager:.2f}x over eager"
            + (f", {o.best_speedup_compile:.2f}x over torch.compile" if o.best_speedup_compile is not None else "")
        )
        t.add_row("best", f"turn {o.best_turn} ({speed}): {ended.session_dir}/best.py")
    if turns_seen:
        t.add_row("turns", f"{len(turns_seen)} judged in this run")
    t.add_row("session", ended.session_dir)
    if o.resumable:
        t.add_row("continue", f"kernelfix resume {ended.session_dir}")
    return t


class HeadlessReporter:
    """An event sink that prints turn lines and the summary."""

    def __init__(self, console: Console | None = None, status_console: Console | None = None, *, verbosity: int = 0):
        self.verbosity = verbosity
        self.out = console or _console(highlight=False, quiet=verbosity < 0)
        self.err = status_console or _console(stderr=True, highlight=False, quiet=verbosity < 0)
        self.summary_out = console or _console(highlight=False)
        self.turns: list[Turn] = []
        self._status = None
        self._turn: int | None = None
        self._tree = False  # width > 1: turn lines say where each turn is in the tree

    def _set_status(self, text: str) -> None:
        if not self.err.is_terminal:
            return
        if self._status is None:
            self._status = self.err.status(text)
            self._status.start()
        else:
            self._status.update(text)

    def _clear_status(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def __call__(self, e: SessionEvent) -> None:
        if isinstance(e, SessionStarted):
            what = f"resumed with {e.turns_done} judged turns" if e.resumed else "new session"
            self._tree = e.width > 1
            width = f", width {e.width}" if self._tree else ""
            self.out.print(
                Text.assemble(
                    ("kernelfix ", "bold"), f"{e.task} with {e.model} on {e.device}{width}: {what} in {e.session_dir}"
                )
            )
        elif isinstance(e, RoundStarted):
            self._tree = True
            parents = sorted({s.parent for s in e.slots if s.parent is not None})
            start = f"from turns {', '.join(map(str, parents))}" if parents else "from the task"
            self._set_status(f"round {e.round}: drawing {len(e.slots)} candidates {start} ...")
        elif isinstance(e, RoundJudged):
            self._clear_status()
            self.out.print(round_line(e.record))
        elif isinstance(e, Notice):
            self._clear_status()
            self.out.print(Text.assemble(("note: ", "yellow"), e.text))
        elif isinstance(e, TurnStarted):
            self._turn = e.turn
            self._set_status(
                f"turn {e.turn}: {'waiting for the model' if e.source == 'model' else 'judging the ' + e.source + ' candidate'} ..."
            )
        elif isinstance(e, ModelReplied):
            self._set_status(f"turn {e.turn}: judging ...")
        elif isinstance(e, StageUpdate):
            where = "task" if e.turn is None else f"turn {e.turn}"
            self._set_status(f"{where}: {e.event.stage} {e.event.status} {e.event.detail}".rstrip() + " ...")
        elif isinstance(e, ModelRetry):
            self._clear_status()
            self.out.print(
                Text(
                    f"turn {e.turn}: model call failed ({e.error[:160]}); try {e.attempt + 1} in {e.wait_s:.1f} s",
                    style="yellow",
                )
            )
        elif isinstance(e, TurnJudged):
            self._clear_status()
            self.turns.append(e.turn)
            self.out.print(turn_line(e.turn, best_turn=e.best_turn, tree=self._tree))
            detail = turn_detail(e.turn) if self.verbosity > 0 else None
            if detail:
                self.out.print(detail)
        elif isinstance(e, SessionEnded):
            self._clear_status()
            self.summary_out.print(summary(e, self.turns))
