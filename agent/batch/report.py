"""The batch report: per-task outcomes and the metrics the field reports (summary.json, summary.md).

Definitions (docs/batch.md says the same):
- correct rate: tasks whose session found a correct, legal kernel / all tasks.
- fast_p (p in 0, 1.0, 1.5, 2.0), against eager and against torch.compile: tasks whose
  best kernel is correct, legal and timed with speedup > p / all tasks. The best kernel
  is the one the session kept (best.py: the fastest correct turn over eager); its
  speedup over torch.compile is that same kernel's. Where no task was timed (no GPU)
  the metric is "not timed", never 0.
- fast_p by KernelBench's own check (``*_kernelbench``): the same, counting a kernel only where
  every trial also passed allclose against the float32 reference (the judge also passes a kernel
  closer to the float64 truth than the reference: docs/feedback.md), so the numbers compare with
  published ones.
- first-turn pass rate: tasks whose first model turn was correct / all tasks;
  best-turn pass rate: tasks with any correct turn / all tasks (= correct rate).
- turns to first correct: model turns up to and including the first correct one
  (0 when the given candidate was already correct), averaged over tasks that got one.
- a search (width > 1) counts rounds where a chain counts model turns: its first "turn" is
  round one (first-turn correct: any of its candidates was), and its turns to first correct
  are the rounds up to the first correct candidate. fast_p still counts each task once, by
  the best kernel over every branch.
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelfix.agent.batch.worker import TaskResult
from kernelfix.agent.session_dir import read_trajectory
from kernelfix.agent.state import Trajectory
from kernelfix.base import atomic

FAST_P = (0.0, 1.0, 1.5, 2.0)
NOT_TIMED = "not timed"


def p_key(p: float) -> str:
    """fast_p's key as the field writes it: 0, 1.0, 1.5, 2.0."""
    return "0" if p == 0 else f"{p:.1f}"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TaskOutcome(_Model):
    """One row of the report."""

    name: str
    task: str  # the task file's stem
    session_dir: str
    run: Literal["new", "resumed", "skipped"]
    status: Literal["finished", "unfinished", "failed"]
    error: str | None = None
    stop_reason: str | None = None
    device: str | None = None
    timed: bool = False
    correct: bool = False
    first_turn_correct: bool = False
    turns_to_first_correct: int | None = None
    model_turns: int = 0
    judged_turns: int = 0
    best_turn: int | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    kernelbench_allclose: bool | None = None  # the best kernel also passed KernelBench's allclose on every trial
    categories: list[str] = Field(default_factory=list)  # per judged turn
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_known: bool = True  # False when some model turn reported no token counts (replay models)
    cost_usd: float = 0.0
    cost_known: bool = True
    wall_s: float = 0.0


def task_outcome(result: TaskResult, traj: Trajectory | None) -> TaskOutcome:
    row = TaskOutcome(
        name=result.name,
        task=Path(result.task).stem,
        session_dir=result.session_dir,
        run=result.run,
        status=result.status,
        error=result.error,
    )
    if traj is None:
        return row
    turns = traj.turns
    model_turns = [t for t in turns if t.source == "model"]
    first_correct = next((t for t in turns if t.correct), None)
    o = traj.outcome
    row.stop_reason = o.stop_reason
    row.device = traj.device
    row.timed = traj.device == "cuda"
    row.correct = o.success
    row.first_turn_correct = bool(model_turns) and model_turns[0].correct
    if first_correct is not None:
        row.turns_to_first_correct = sum(t.source == "model" and t.index <= first_correct.index for t in turns)
    if traj.rounds:  # a search: rounds, not model turns
        row.first_turn_correct = any(t.correct for t in model_turns if t.round == 1)
        if first_correct is not None:
            row.turns_to_first_correct = max(
                (t.round or 0 for t in model_turns if t.index <= first_correct.index), default=0
            )
    row.model_turns = len(model_turns)
    row.judged_turns = len(turns)
    row.best_turn = o.best_turn
    row.speedup_eager = o.best_speedup_eager
    row.speedup_compile = o.best_speedup_compile
    best = next((t for t in turns if t.index == o.best_turn), None)
    row.kernelbench_allclose = (
        best.verdict.kernelbench_allclose if best is not None and best.verdict is not None else None
    )
    row.categories = [t.verdict.category.value for t in turns if t.verdict is not None]
    tot = traj.totals
    row.prompt_tokens, row.completion_tokens = tot.prompt_tokens, tot.completion_tokens
    row.tokens_known = all(
        t.usage.prompt_tokens is not None and t.usage.completion_tokens is not None for t in model_turns
    )
    row.cost_usd, row.cost_known, row.wall_s = tot.cost_usd, tot.cost_known, tot.wall_s
    return row


def outcomes(results: list[TaskResult]) -> list[TaskOutcome]:
    return [task_outcome(r, read_trajectory(r.session_dir, unreadable_as_none=True)) for r in results]


class Summary(_Model):
    tasks: int
    finished: int
    unfinished: int
    failed: int
    correct: int
    correct_rate: float | None
    first_turn_pass_rate: float | None
    best_turn_pass_rate: float | None
    mean_turns_to_first_correct: float | None
    timed_tasks: int
    # p -> fraction, or "not timed" when no task was timed
    fast_p_eager: dict[str, float] | str
    fast_p_compile: dict[str, float] | str
    fast_p_eager_kernelbench: dict[str, float] | str = NOT_TIMED  # counting only kernels KernelBench's allclose passes
    fast_p_compile_kernelbench: dict[str, float] | str = NOT_TIMED
    median_speedup_eager: float | str | None
    median_speedup_compile: float | str | None
    model_turns: int
    prompt_tokens: int
    completion_tokens: int
    tokens_known: bool
    cost_usd: float
    cost_known: bool
    categories: dict[str, int]  # over every judged turn
    final_categories: dict[str, int]  # each task's last judged turn
    rows: list[TaskOutcome]


def _rate(n: int, d: int) -> float | None:
    return round(n / d, 4) if d else None


Baseline = Literal["speedup_eager", "speedup_compile"]


def fast_fraction(rows: list[TaskOutcome], key: Baseline, p: float, *, kernelbench: bool = False) -> float:
    """Tasks whose kernel is correct, legal, timed and more than ``p`` times faster than the baseline / all tasks
    (``kernelbench``: and passed KernelBench's allclose on every trial)."""
    return sum(
        r.correct and r.timed and (getattr(r, key) or 0.0) > p and not (kernelbench and r.kernelbench_allclose is False)
        for r in rows
    ) / len(rows)


def fast_p(rows: list[TaskOutcome], key: Baseline, *, kernelbench: bool = False) -> dict[str, float] | str:
    if not any(r.timed for r in rows):
        return NOT_TIMED
    return {p_key(p): round(fast_fraction(rows, key, p, kernelbench=kernelbench), 4) for p in FAST_P}


def _median(rows: list[TaskOutcome], key: str) -> float | str | None:
    if not any(r.timed for r in rows):
        return NOT_TIMED
    xs = [getattr(r, key) for r in rows if r.correct and getattr(r, key) is not None]
    return round(statistics.median(xs), 4) if xs else None


def summarize(rows: list[TaskOutcome]) -> Summary:
    n = len(rows)
    correct = [r for r in rows if r.correct]
    ttc = [r.turns_to_first_correct for r in rows if r.turns_to_first_correct is not None]
    return Summary(
        tasks=n,
        finished=sum(r.status == "finished" for r in rows),
        unfinished=sum(r.status == "unfinished" for r in rows),
        failed=sum(r.status == "failed" for r in rows),
        correct=len(correct),
        correct_rate=_rate(len(correct), n),
        first_turn_pass_rate=_rate(sum(r.first_turn_correct for r in rows), n),
        best_turn_pass_rate=_rate(len(correct), n),
        mean_turns_to_first_correct=round(statistics.mean(ttc), 3) if ttc else None,
        timed_tasks=sum(r.timed for r in rows),
        fast_p_eager=fast_p(rows, "speedup_eager"),
        fast_p_compile=fast_p(rows, "speedup_compile"),
        fast_p_eager_kernelbench=fast_p(rows, "speedup_eager", kernelbench=True),
        fast_p_compile_kernelbench=fast_p(rows, "speedup_compile", kernelbench=True),
        median_speedup_eager=_median(rows, "speedup_eager"),
        median_speedup_compile=_median(rows, "speedup_compile"),
        model_turns=sum(r.model_turns for r in rows),
        prompt_tokens=sum(r.prompt_tokens for r in rows),
        completion_tokens=sum(r.completion_tokens for r in rows),
        tokens_known=all(r.tokens_known for r in rows),
        cost_usd=round(sum(r.cost_usd for r in rows), 6),
        cost_known=all(r.cost_known for r in rows),
        categories=dict(Counter(c for r in rows for c in r.categories).most_common()),
        final_categories=dict(Counter(r.categories[-1] for r in rows if r.categories).most_common()),
        rows=rows,
    )


# --------------------------------------------------------------------------- rendering


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _speed(x: float | str | None) -> str:
    if isinstance(x, str):
        return x
    return "-" if x is None else f"{x:.2f}x"


def _fast_row(label: str, fp: dict[str, float] | str) -> str:
    if isinstance(fp, str):
        return f"| {label} | " + " | ".join([fp] * len(FAST_P)) + " |"
    return f"| {label} | " + " | ".join(_pct(fp[p_key(p)]) for p in FAST_P) + " |"


def _row_speed(r: TaskOutcome, key: str) -> str:
    if not r.correct:
        return "-"
    return _speed(getattr(r, key)) if r.timed else NOT_TIMED


def markdown(s: Summary, plots: list[str]) -> str:
    cost = f"${s.cost_usd:.4f}" + ("" if s.cost_known else " (some turns' cost unknown to litellm)")
    lines = [
        "# kernelfix batch summary",
        "",
        f"{s.tasks} tasks: {s.finished} finished, {s.unfinished} unfinished, {s.failed} failed; "
        f"{s.correct} correct ({_pct(s.correct_rate)}); {s.timed_tasks} timed.",
        "",
        "| metric | value |",
        "| --- | --- |",
        f"| correct rate | {_pct(s.correct_rate)} |",
        f"| first-turn pass rate | {_pct(s.first_turn_pass_rate)} |",
        f"| best-turn pass rate | {_pct(s.best_turn_pass_rate)} |",
        f"| mean turns to first correct | {'-' if s.mean_turns_to_first_correct is None else s.mean_turns_to_first_correct} |",
        f"| median speedup of correct kernels vs eager | {_speed(s.median_speedup_eager)} |",
        f"| median speedup of correct kernels vs torch.compile | {_speed(s.median_speedup_compile)} |",
        f"| model turns | {s.model_turns} |",
        f"| tokens (prompt / completion) | {s.prompt_tokens} / {s.completion_tokens}{'' if s.tokens_known else ' (some turns reported no counts)'} |",
        f"| cost | {cost} |",
        "",
        "fast_p: the fraction of all tasks whose kernel is correct, legal and more than p times faster than the baseline.",
        "",
        "| baseline | " + " | ".join(f"fast_{p_key(p)}" for p in FAST_P) + " |",
        "| --- | " + " | ".join("---" for _ in FAST_P) + " |",
        _fast_row("eager", s.fast_p_eager),
        _fast_row("torch.compile", s.fast_p_compile),
        _fast_row("eager, KernelBench allclose only", s.fast_p_eager_kernelbench),
        _fast_row("torch.compile, KernelBench allclose only", s.fast_p_compile_kernelbench),
        "",
        "The judge also passes a kernel closer to the float64 truth than the float32 reference (docs/feedback.md); the "
        '"KernelBench allclose only" rows count only kernels that KernelBench\'s own check passes, as published numbers do.',
        "",
        "## Tasks",
        "",
        "| task | status | run | correct | first turn | turns to correct | best turn | vs eager | vs compile | turns | tokens | last verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in s.rows:
        lines.append(
            f"| {r.name} | {r.status} | {r.run} | {'yes' if r.correct else 'no'} | {'yes' if r.first_turn_correct else 'no'} | "
            f"{'-' if r.turns_to_first_correct is None else r.turns_to_first_correct} | {'-' if r.best_turn is None else r.best_turn} | "
            f"{_row_speed(r, 'speedup_eager')} | {_row_speed(r, 'speedup_compile')} | {r.model_turns} | {r.prompt_tokens + r.completion_tokens if r.tokens_known else '-'} | "
            f"{r.categories[-1] if r.categories else '-'} |"
        )
    errors = [r for r in s.rows if r.error]
    if errors:
        lines += ["", "## Errors", ""]
        lines += [f"- {r.name}: {r.error.splitlines()[0][:300]}" for r in errors]
    if s.categories:
        lines += ["", "## Verdicts over all judged turns", "", "| category | turns |", "| --- | --- |"]
        lines += [f"| {c} | {k} |" for c, k in s.categories.items()]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def write(out: Path, s: Summary, plots: list[str]) -> None:
    atomic.write_json(out / "summary.json", {**s.model_dump(mode="json"), "plots": plots})
    atomic.write_text(out / "summary.md", markdown(s, plots))
