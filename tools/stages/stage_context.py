"""[judge] What a stage of the judge (compile, correctness, legality, benchmark, profile) may use of it.

The judge builds one for each stage it runs and passes it in: the stages call nothing of the
judge's but this, and import nothing of it (tests/test_module_layout.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kernelfix.tools.evaluation import Evaluation, EventSink
from kernelfix.tools.handles.candidate_run import CandidateRun
from kernelfix.tools.handles.reference import Reference
from kernelfix.tools.handles.worker_context import WorkerContext


@dataclass(frozen=True, kw_only=True)
class StageContext(WorkerContext):
    allowed_ops: frozenset[str]  # the aten ops a candidate's forward may run
    ref: Reference  # the task's reference, as it stands (not waited for)
    reference: Callable[[EventSink | None], Reference]  # the reference started and ready (Judge.reference)
    run_for: Callable[[Evaluation, EventSink | None], CandidateRun]  # the evaluation's candidate worker (Judge.run_for)
    release: Callable[[Evaluation], None]  # end the evaluation's worker (Judge.release)
