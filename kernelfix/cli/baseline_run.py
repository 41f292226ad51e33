"""``kernelfix baseline``: what the judge makes of each task before any candidate.

For every task: build the reference (the task's import, Model, its first
trials, at the task's own size), check that two runs under one seed agree
(inputs and outputs, byte for byte), say where atol/rtol are vacuous (zeros or
the reference's mean pass them: KernelBench issue #165), and time eager and
torch.compile the judge's way (``timing.clock``: CUDA events, warm-up, L2
flushed, median of at least 100 calls). A task that does not run says why (a
``TaskError``), a task the machine cannot hold says its size and the limit
(``infra:``). Several tasks run at once: torch.compile's compilation on the CPU
cores, every GPU step under the GPU lease, and compilations admitted while
their tensors fit the GPU memory left. Each finished task is saved at once to
the report file, so a rerun resumes where the last stopped. A task spoiled by a
transient fault of the machine (``infra:gpu_busy``, a lost worker) is tried again
alone at the end of the run, and again by a resume; only its last row stands.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelfix.base import atomic
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.handles.reference_failures import ReferenceUnavailable
from kernelfix.tools.task import Task, TaskError
from kernelfix.tools.timing.baselines import timing_settings
from kernelfix.tools.verdict import Category, TimingStats

Status = Literal[
    "ok", "task_error", "infra", "no_backward"
]  # no_backward: --backward on a task with nothing to differentiate


class BaselineRow(BaseModel):
    model_config = ConfigDict(extra="ignore")

    task: str
    path: str
    sha1: str
    status: Status
    category: str | None = None  # the infra category, when status is infra
    error: str | None = None
    input_bytes: int = 0
    output_bytes: int = 0
    deterministic: bool | None = None  # two runs under one seed: same inputs and same outputs, byte for byte
    inputs_equal: bool | None = None
    rel_error_between_runs: float | None = None  # ||run2 - run1|| / spread, where the outputs differ
    vacuous: str | None = None
    ref_ms: float | None = None  # one reference forward, wall clock with a sync
    eager: TimingStats | None = None
    compiled: TimingStats | None = None
    compile_note: str | None = None
    # --backward: ``eager``/``compiled`` above are forward+backward; these are the forward alone (grad enabled)
    eager_forward: TimingStats | None = None
    compiled_forward: TimingStats | None = None
    # GPU memory (the allocator's peaks): one trial's forward (and backward) alone, the floor any judge
    # pays; and the reference process's through the determinism check and timing (docs/judge.md's bound)
    trial_peak_bytes: int | None = None
    peak_bytes: int | None = None
    baseline_cached: bool = False
    draw: str | None = None
    seconds: float = 0.0

    @property
    def settled(self) -> bool:
        """A row a resume keeps: the task's own answer, or a size this machine cannot hold. A transient
        fault of the machine (GPU memory held by a neighbour, a worker lost, a full disk) is measured again."""
        return self.status != "infra" or self.category == Category.TOO_LARGE.value


class BaselineReport(BaseModel):
    model_config = ConfigDict(extra="ignore")

    device: str
    settings: dict = Field(default_factory=dict)
    gpu: str | None = None
    torch: str | None = None
    rows: list[BaselineRow] = Field(default_factory=list)

    def row(self, task: Task) -> BaselineRow | None:
        return next((r for r in self.rows if r.path == str(task.path) and r.sha1 == task.sha1), None)


def find_tasks(paths: list[str]) -> list[Path]:
    """Task files named, and the .py files in directories named (sorted by KernelBench's number, then name)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(p.glob("*.py"), key=_order)
        else:
            out.append(p)
    return out


def _order(p: Path) -> tuple[int, str]:
    head = p.stem.split("_", 1)[0]
    return (int(head) if head.isdigit() else 10**9, p.stem)


def settings(config: JudgeConfig) -> dict:
    """What a report's rows were measured under: the judge's timing settings (as its baselines' cache key has them)
    and how the inputs are drawn."""
    return timing_settings(config) | {"inputs_on_device": config.inputs_on_device, "seed": config.seed}


class _MemoryGate:
    """Compilations outside the GPU lease hold their tensors on the GPU: admit them while they fit."""

    def __init__(self, budget: int):
        self.budget, self.used = budget, 0
        self._cond = threading.Condition()

    @contextmanager
    def hold(self, nbytes: int) -> Iterator[None]:
        need = min(nbytes, self.budget)  # one larger than the budget runs alone
        with self._cond:
            while self.used and self.used + need > self.budget:
                self._cond.wait()
            self.used += need
        try:
            yield
        finally:
            with self._cond:
                self.used -= need
                self._cond.notify_all()


def _gpu_budget() -> int:
    try:
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.get_device_properties(0).total_memory * 0.6)
    except Exception:
        pass
    return 32 << 30


def measure(path: Path, config: JudgeConfig, *, gate: _MemoryGate | None = None, fresh: bool = False) -> BaselineRow:
    """One task's row. Never raises for the task's or the machine's faults: the row says them."""
    from kernelfix.tools.judge import Judge

    t0 = time.monotonic()
    task = Task.load(path)
    row = BaselineRow(task=task.name, path=str(task.path), sha1=task.sha1, status="ok")
    judge = None
    try:
        with Judge(task, config) as judge:  # its own temporary root: nothing of it is kept but the row
            judge.reference()
            ref = judge.ref
            det = ref.determinism(ref.trials[0], judge.lease)
            row.inputs_equal, row.deterministic = det.inputs_equal, det.inputs_equal and det.outputs_equal
            row.rel_error_between_runs = det.rel_error
            row.vacuous, row.ref_ms, row.draw = ref.vacuous, det.ref_ms, det.draw_note
            row.input_bytes, row.output_bytes = det.input_bytes, det.output_bytes
            row.trial_peak_bytes = det.trial_peak_bytes
            if judge.device == "cuda":
                # Compiling holds a trial's tensors; under --backward their gradients too (inputs' and outputs' size again).
                size = (5 if judge.config.backward else 3) * (row.input_bytes + row.output_bytes)
                base = ref.baseline(judge.lease, warm_gate=(lambda: gate.hold(size)) if gate else None, fresh=fresh)
                row.eager, row.compiled, row.compile_note, row.baseline_cached = (
                    base.eager,
                    base.compiled,
                    base.compile_note,
                    base.cached,
                )
                row.eager_forward, row.compiled_forward = base.eager_forward, base.compiled_forward
                row.peak_bytes = None if base.cached else base.peak_bytes
    except TaskError as e:
        from kernelfix.tools.correctness.gradients import NO_BACKWARD

        row.status, row.error = (
            ("no_backward" if NO_BACKWARD in str(e) and config.backward is not False else "task_error"),
            str(e),
        )
    except ReferenceUnavailable as e:
        row.status, row.category, row.error = "infra", e.category.value, e.message
        counted = judge.ref.size if judge is not None else None
        if counted is not None and not row.input_bytes:  # the meta device's count: the real run never finished a trial
            row.input_bytes, row.output_bytes = counted.input_bytes, counted.output_bytes
    row.seconds = round(time.monotonic() - t0, 2)
    return row


def _torch_version() -> str:
    """``torch.__version__``, without importing torch into this process where it is not loaded yet (seconds of CPU: the
    judge's workers import it, and a resumed run measures nothing): the string torch's ``torch/version.py`` sets, which
    is what ``torch.__version__`` holds, read as text."""
    import importlib.util
    import re
    import sys

    if "torch" not in sys.modules:
        spec = importlib.util.find_spec("torch")
        for root in (spec.submodule_search_locations or []) if spec else []:
            try:
                text = (Path(root) / "version.py").read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            found = re.search(r"""^__version__(?:\s*:\s*str)?\s*=\s*['"]([^'"\\]+)['"]\s*$""", text, re.M)
            if found:
                return found.group(1)
    import torch  # already loaded, or no version.py to read: torch itself

    return str(torch.__version__)


def run(
    paths: list[Path],
    config: JudgeConfig,
    *,
    out: Path | None,
    workers: int = 1,
    fresh: bool = False,
    on_row: Callable[[BaselineRow, bool], None] | None = None,
) -> BaselineReport:
    """Every task's row, ``workers`` at a time; rows already in ``out`` (same task file, same
    settings) are kept, not measured again. ``on_row(row, resumed)`` as each one lands."""
    from kernelfix.tools.judge import resolve_device

    device, _ = resolve_device(config.device)
    report = BaselineReport(device=device, settings=settings(config), torch=_torch_version())
    if out is not None and out.exists():
        try:
            old = BaselineReport.model_validate_json(out.read_text())
            if old.settings == report.settings and old.device == device:
                report.rows, report.gpu = old.rows, old.gpu
        except (OSError, ValueError):
            pass  # unreadable: start over (the file is rewritten whole)
    lock = threading.Lock()
    todo: list[Path] = []
    for p in paths:
        try:
            done = report.row(Task.load(p))
        except TaskError as e:
            row = BaselineRow(task=p.stem, path=str(p), sha1="", status="task_error", error=str(e))
            with lock:
                report.rows = [r for r in report.rows if r.path != str(p)] + [row]
            if on_row:
                on_row(row, False)
            continue
        if done is not None and done.settled and not fresh:
            if on_row:
                on_row(done, True)
        else:
            todo.append(p)
    gate = _MemoryGate(_gpu_budget()) if device == "cuda" else None
    retry: list[Path] = []

    def work(alone: bool = False) -> None:
        while True:
            with lock:
                if not todo:
                    return
                p = todo.pop(0)
            row = measure(p, config, gate=gate, fresh=fresh)
            if not row.settled and not alone:  # perhaps its neighbours' doing: again at the end, alone
                with lock:
                    retry.append(p)
                continue
            with lock:
                report.rows = [r for r in report.rows if r.path != row.path] + [row]
                if device == "cuda" and report.gpu is None and row.eager is not None:
                    import torch

                    report.gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
                if out is not None:
                    atomic.write_json(out, report)
            if on_row:
                on_row(row, False)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(max(1, workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    todo.extend(retry)
    work(alone=True)  # what failed for the machine's reasons, one task at a time: its row stands
    order = {str(Path(p).resolve()): i for i, p in enumerate(paths)} | {str(p): i for i, p in enumerate(paths)}
    report.rows = sorted((r for r in report.rows if r.path in order), key=lambda r: order[r.path])  # this run's tasks
    if out is not None:
        atomic.write_json(out, report)
    return report


def kernelbench_times(path: Path) -> dict[str, float]:
    """KernelBench's published reference times (results/timing/*/baseline_time_torch.json): file name -> mean ms."""
    data = json.loads(path.read_text())
    return {
        name: float(v["mean"])
        for level in data.values()
        if isinstance(level, dict)
        for name, v in level.items()
        if isinstance(v, dict) and "mean" in v
    }
