"""[judge] What a parent-side handle (the reference, a candidate's run) needs of its judge to start a worker.

The judge builds it and hands it over, so that no handle reaches into the judge (or imports it).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.task import Task


@dataclass(frozen=True, kw_only=True)
class WorkerContext:
    task: Task
    config: JudgeConfig
    device: str  # "cuda" or "cpu"
    gpu: str | None  # the CUDA device the workers see, as CUDA_VISIBLE_DEVICES names it; None: the first visible
    seed: int  # the trials' and ModelNew's init seed
    root: Path  # the judge's directory; evaluations' workdirs are under root/evals
    private: Path  # the reference's own directory, which no candidate sees
    task_copy: Path  # the reference's copy of the task (under private)
    credentials: list[str]  # files and directories hidden from candidates
    lease: Callable[
        ..., AbstractContextManager
    ]  # lease(what, shared=False): the GPU's lock, alone or shared (Judge.lease)
    room: Callable[
        ..., AbstractContextManager
    ]  # room(what, need_bytes=None): room for a stage's memory on the GPU (Judge.room)
    note_sandbox: Callable[[str | None], None]  # a sandbox layer this machine could not give, said once per judge
    trial_bytes: Callable[[], int | None] = lambda: (
        None
    )  # one trial's inputs and outputs, once the reference has counted them
