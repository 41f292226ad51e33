"""[judge] Why a reference worker ended: the task's own failure (``TaskError``) or the machine's
(``ReferenceUnavailable``: it does not fit, another process holds the GPU's memory, the worker died), never the candidate's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernelfix.sandbox import ChildOutcome
from kernelfix.tools.classify import GpuOom, is_oom
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.handles import sandboxing
from kernelfix.tools.task import TaskError
from kernelfix.tools.task_size import TaskSize, size_text
from kernelfix.tools.verdict import Category


class ReferenceUnavailable(Exception):
    """The reference could not be computed for a reason that is the machine's, not the task's or the candidate's."""

    def __init__(self, category: Category, message: str):
        super().__init__(message)
        self.category = category
        self.message = message


def sort(
    out: ChildOutcome, task_path: Path, config: JudgeConfig, trial_bytes: int, size: TaskSize | None
) -> TaskError | ReferenceUnavailable:
    """What a reference worker's end was: the task's own failure (``TaskError``), or the machine's
    (``ReferenceUnavailable``, an ``infra:`` verdict), never the candidate's."""
    err = out.last("error")
    problem = _task_problem(task_path, out, config.run_timeout_s)
    if err is not None and err.get("kind") == "task":
        return TaskError(problem)
    if err is not None and err.get("kind") == "too_large":  # counted on the meta device, refused before allocating
        return ReferenceUnavailable(Category.TOO_LARGE, err.get("message") or "the task does not fit this machine")
    trial = f" (one trial: {size.describe()})" if size is not None else ""
    if err is not None and is_oom(err):
        category, message = _memory_verdict(err, trial_bytes)
        return ReferenceUnavailable(category, message + trial)
    if out.memory_exceeded:
        limit = size_text(sandboxing.memory_limit(config))
        why = (
            "judge.memory_limit_gb"
            if config.memory_limit_gb
            else "3/4 of this machine's memory, at most 64 GiB; judge.memory_limit_gb sets it"
        )
        return ReferenceUnavailable(
            Category.TOO_LARGE,
            f"the task does not fit the host memory the judge allows: its reference reached {size_text(out.peak_rss_bytes)} "
            f"of the {limit} limit ({why})" + trial,
        )
    fault = machine_fault(out)
    if fault is not None:
        return ReferenceUnavailable(*fault)
    if (
        err is None
        and not out.timed_out
        and out.last("ready") is None
        and out.last("hello") is not None
        and out.signal is None
    ):
        return TaskError(problem)  # exited by itself while importing or building: the task's doing
    # A time-out, a signal, an exception in the worker's own code: not the task's, not the candidate's.
    return ReferenceUnavailable(Category.WORKER, problem)


# The reference worker's phases, as a too-large message names the step that ran out (docs/backward.md's sweep)
_DOING = {
    "reference_trial": "computing a trial",
    "reference_float64": "computing a trial in float64",
    "compile_reference": "compiling it with torch.compile",
    "time_eager": "timing eager",
    "time_torch_compile": "timing torch.compile",
    "timing": "timing",
}


def _memory_verdict(err: dict[str, Any], trial_bytes: int) -> tuple[Category, str]:
    """A GPU OOM in the reference: the task does not fit this GPU, or others hold its memory."""
    oom = GpuOom(err)
    gib = 2**30
    if oom.total and not oom.would_fit_alone:
        doing = _DOING.get(err.get("phase") or "")
        return Category.TOO_LARGE, (
            f"the task does not fit this GPU: its reference needed {(oom.asked + oom.held) / gib:.1f} GiB "
            f"(held {oom.held / gib:.1f}, asked {oom.asked / gib:.1f}) of the GPU's {oom.total / gib:.1f} GiB"
            + (f" while {doing}" if doing else "")
        )
    if oom.total and oom.free is not None:
        return Category.GPU_BUSY, oom.others_text("the reference")
    # No sizes in the error: CUDA's own allocation failed (a context, a library's workspace), not a
    # tensor of the task's, which torch's allocator reports with its sizes. The GPU is full, not the task too large.
    return (
        Category.GPU_BUSY,
        f"the GPU had no memory for the task's reference (CUDA: {((err.get('message') or '').strip().splitlines() or [''])[0][:200]})",
    )


def _task_problem(path: Path, outcome: ChildOutcome, timeout_s: float) -> str:
    err = outcome.last("error")
    where = f"task {path}"
    if outcome.timed_out:
        return f"{where}: {outcome.deadline or f'the reference did not finish within {timeout_s:g} s'}"
    if err is None:
        return f"{where}: the reference process died ({outcome.signal or f'exit code {outcome.returncode}'}): {outcome.stderr_tail.strip()[-500:]}"
    phase = {"load_task": "importing it", "build_reference": "building Model(*get_init_inputs())"}.get(
        err.get("phase"), "running Model.forward"
    )
    text = (err.get("message") or "").strip()
    if err.get("kind") == "task" and text:
        return f"{where}: {text[:800]}"
    return f"{where}: {err.get('exc_type')} while {phase}: {text[:800]}"


def machine_fault(outcome: ChildOutcome) -> tuple[Category, str] | None:
    """A failure that is the machine's, whoever's process it hit."""
    from kernelfix.tools.classify import machine_fault as classify_machine

    f = classify_machine(outcome)
    return (f.category, f.message) if f is not None else None
