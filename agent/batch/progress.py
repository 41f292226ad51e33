"""Batch progress: a rich progress bar on a terminal (tasks done, correct so far, ETA), plain lines otherwise.

One line per finished task either way. The ETA is throughput so far (tasks run,
not skipped, per second of this run) applied to the tasks left.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from kernelfix.agent.batch.plan import Job
from kernelfix.agent.batch.report import TaskOutcome, task_outcome
from kernelfix.agent.batch.worker import TaskResult
from kernelfix.agent.session_dir import read_trajectory


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def outcome_line(row: TaskOutcome) -> Text:
    line = Text()
    line.append(f"{row.name}: ", style="bold")
    if row.run == "skipped":
        line.append("skipped (done earlier) ", style="dim")
    style = {"finished": "green", "unfinished": "yellow", "failed": "red"}[row.status]
    line.append(row.status, style=style)
    if row.correct:
        if row.timed and row.speedup_eager is not None:
            speed = f"{row.speedup_eager:.2f}x eager" + (
                f", {row.speedup_compile:.2f}x compile" if row.speedup_compile is not None else ""
            )
        else:
            speed = "not timed"
        line.append(f", correct at turn {row.best_turn} ({speed})", style="green")
    elif row.status != "failed":
        line.append(", no correct kernel" + (f" (last: {row.categories[-1]})" if row.categories else ""))
    line.append(f", {row.model_turns} model turns")
    if row.error:
        line.append(f": {row.error.splitlines()[0][:200]}", style="red")
    return line


class BatchProgress:
    def __init__(self, total: int, console: Console | None = None, *, verbose: bool = False):
        """``verbose``: under each finished task's line, its session folder and its time."""
        self.console = console or Console(stderr=True, highlight=False)
        self.verbose = verbose
        self.total = total
        self.done = self.correct = self.ran = 0
        self.running: list[str] = []
        self.t0 = time.monotonic()
        self._bar: Progress | None = None
        self._task = None
        if self.console.is_terminal:
            self._bar = Progress(
                TextColumn("[bold]batch"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("correct [green]{task.fields[correct]}"),
                TimeElapsedColumn(),
                TextColumn("ETA {task.fields[eta]}"),
                TextColumn("[dim]{task.fields[running]}"),
                console=self.console,
            )
            self._task = self._bar.add_task("batch", total=total, correct=0, eta=_clock(None), running="")

    def __enter__(self) -> "BatchProgress":
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()

    def eta(self) -> float | None:
        if not self.ran:
            return None
        return (time.monotonic() - self.t0) / self.ran * (self.total - self.done)

    def started(self, job: Job) -> None:
        self.running.append(job.name)
        self._refresh()

    def finished(self, job: Job, result: TaskResult) -> None:
        if job.name in self.running:
            self.running.remove(job.name)
        row = task_outcome(result, read_trajectory(job.session_dir, unreadable_as_none=True))
        self.done += 1
        self.correct += row.correct
        self.ran += result.run != "skipped"
        head = Text(f"[{self.done}/{self.total}] ", style="bold")
        self.console.print(head + outcome_line(row), soft_wrap=True)
        if self.verbose:
            gpu = f" on GPU {result.gpu}" if result.gpu is not None else ""
            self.console.print(
                f"  session {result.session_dir}; {result.wall_s:.0f} s{gpu} in this run", style="dim", soft_wrap=True
            )
        if self._bar is None:
            self.console.print(
                f"  {self.done}/{self.total} done, {self.correct} correct so far, elapsed {_clock(time.monotonic() - self.t0)}, ETA {_clock(self.eta())}",
                style="dim",
                soft_wrap=True,
            )
        self._refresh()

    def _refresh(self) -> None:
        if self._bar is None:
            return
        shown = ", ".join(self.running[:3]) + (f" +{len(self.running) - 3}" if len(self.running) > 3 else "")
        self._bar.update(self._task, completed=self.done, correct=self.correct, eta=_clock(self.eta()), running=shown)
