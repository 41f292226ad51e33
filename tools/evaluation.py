"""[judge] One candidate on its way through the judge's stages, and the progress events a UI shows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelfix.tools.verdict import (
    Backend,
    Category,
    CompileReport,
    CorrectnessReport,
    InputSetReport,
    LegalityReport,
    ProfileReport,
    SanitizerReport,
    Stage,
    Timings,
    Verdict,
)

# sanitize runs after a failure too (its own rule: tools/stages/sanitize.py), so it comes last.
STAGES: tuple[Stage, ...] = ("compile", "correctness", "legality", "benchmark", "profile", "sanitize")


class StageEvent(BaseModel):
    """Progress for a UI: a stage started, moved, finished or was skipped."""

    stage: Stage | Literal["reference"]
    status: Literal["started", "progress", "finished", "skipped"]
    detail: str = ""
    done: int | None = None
    total: int | None = None


EventSink = Callable[[StageEvent], None]


class Evaluation(BaseModel):
    """One candidate on its way through the stages. Serializable, so the agent can checkpoint it.

    ``workdir`` belongs to the judge (candidate source, logs); candidate code may
    write only its ``build``, ``tmp``, ``out`` and ``handoff`` subdirectories (and
    the candidates' compiler caches), and sees the rest read-only. The candidate's
    worker process lives with the judge, not here: a checkpointed evaluation that
    resumes in a new process starts a new worker (its build comes from the cache).
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    task: str
    device: str
    workdir: str
    code: str | None = None
    backend: Backend = "unknown"
    sha1: str | None = None
    category: Category | None = None  # the first failure; None while all is well
    failed_stage: Stage | None = None
    message: str | None = None
    compiled: bool = False
    compile: CompileReport | None = None
    correctness: CorrectnessReport | None = None
    legality: LegalityReport | None = None
    timings: Timings | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    input_sets: list[InputSetReport] = Field(default_factory=list)  # get_input_sets() tasks: per set
    profile: ProfileReport | None = None
    sanitizer: SanitizerReport | None = None
    warnings: list[str] = Field(default_factory=list)
    stage_seconds: dict[str, float] = Field(default_factory=dict)
    breakdown: dict[str, float] = Field(default_factory=dict)  # inside the stages: "correctness.trials" etc.
    stages_done: list[str] = Field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.category is not None

    @property
    def candidate_path(self) -> Path:
        return Path(self.workdir) / "candidate.py"

    def fail(self, stage: Stage, category: Category, message: str) -> "Evaluation":
        if self.category is None:
            self.category, self.failed_stage, self.message = category, stage, message
        return self

    def verdict(self, notes: Sequence[str] = ()) -> Verdict:
        """The verdict this evaluation earned: every report it shares with the verdict, as it is (``CARRIED``), and
        what they add up to: the category (ok when nothing failed), whether it is correct and legal, the
        speedups of an ok candidate alone. ``notes``: warnings of the judge's own to add (the sandbox's)."""
        category = self.category or Category.OK
        ok = category == Category.OK
        carried = {name: getattr(self, name) for name in CARRIED}
        return Verdict(
            **carried,
            category=category,
            correct=self._correct(category),
            legal=self._legal(category),
            speedup_eager=self.speedup_eager if ok else None,
            speedup_compile=self.speedup_compile if ok else None,
            kernelbench_allclose=self.correctness.kernelbench_allclose if ok and self.correctness is not None else None,
            candidate_sha1=self.sha1,
            warnings=[*self.warnings, *notes],
            logs_dir=str(Path(self.workdir) / "logs"),
        )

    def _correct(self, category: Category) -> bool | None:
        if category.family.value == "correctness_error" or category == Category.OUTPUT_CACHING:
            return False
        if self.correctness is not None and self.correctness.trials:
            return all(t.ok for t in self.correctness.trials)
        return None

    def _legal(self, category: Category) -> bool | None:
        if category.family.value == "cheating":
            return False
        if self.legality is not None and self.legality.runtime_checked:
            return not self.legality.forbidden_ops
        return None


# What a verdict takes from its evaluation as it is: every field of the same name and meaning. The rest it works
# out (Evaluation.verdict): the category, correct, legal, the speedups (an ok candidate's only), the warnings.
CARRIED: tuple[str, ...] = tuple(
    name
    for name in Evaluation.model_fields
    if name in Verdict.model_fields and name not in {"category", "speedup_eager", "speedup_compile", "warnings"}
)
