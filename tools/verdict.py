"""The judge's typed results: the result taxonomy and the verdict.

Every category is a ``family:detail`` string (``ok`` alone for success), after
MooreEval's taxonomy as adopted in DESIGN.md. The families are fixed; the
details listed here are the ones the judge emits. One place defines them so
that the agent loop, the UI, the batch report and the exporter agree.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Family(StrEnum):
    OK = "ok"
    FORMAT = "format_error"
    COMPILE = "compile_error"
    RUNTIME = "runtime_error"
    CORRECTNESS = "correctness_error"
    CHEATING = "cheating"
    INFRA = "infra"


class Category(StrEnum):
    """Every verdict category the judge can emit."""

    OK = "ok"

    NO_CODE = "format_error:no_code"
    NO_MODEL_NEW = "format_error:no_model_new"

    SYNTAX = "compile_error:syntax"
    NVCC = "compile_error:nvcc"
    HOST_CXX = "compile_error:host"
    LINK = "compile_error:link"
    TRITON_COMPILE = "compile_error:triton"
    IMPORT = "compile_error:import"
    COMPILE_TIMEOUT = "compile_error:timeout"

    ILLEGAL_MEMORY_ACCESS = "runtime_error:illegal_memory_access"
    LAUNCH_FAILURE = "runtime_error:launch_failure"
    DEVICE_ASSERT = "runtime_error:device_assert"
    CUDA_ERROR = "runtime_error:cuda_error"
    OOM = "runtime_error:oom"
    RUN_TIMEOUT = "runtime_error:timeout"
    CRASH = "runtime_error:crash"
    EXIT = "runtime_error:exit"
    EXCEPTION = "runtime_error:exception"

    OUTPUT_STRUCTURE = "correctness_error:output_structure"
    SHAPE = "correctness_error:shape"
    DTYPE = "correctness_error:dtype"
    NON_FINITE = "correctness_error:non_finite"
    NUMERICAL = "correctness_error:numerical"

    DISALLOWED_ATEN = "cheating:disallowed_aten"
    DISALLOWED_LIBRARY = "cheating:disallowed_library"
    FALLBACK = "cheating:fallback"
    SIDE_STREAM = "cheating:side_stream"
    THREADS = "cheating:threads"
    OUTPUT_CACHING = "cheating:output_caching"
    INPUT_MUTATION = "cheating:input_mutation"
    TAMPERING = "cheating:tampering"
    TIMING_MANIPULATION = "cheating:timing_manipulation"
    EXCESSIVE_SPEEDUP = "cheating:excessive_speedup"

    NO_GPU = "infra:no_gpu"
    SANDBOX = "infra:sandbox"
    WORKER = "infra:worker"

    @property
    def family(self) -> Family:
        return Family(self.value.split(":", 1)[0])


Stage = Literal["extract", "static", "compile", "correctness", "legality", "benchmark", "profile"]
Backend = Literal["cuda", "triton", "torch", "unknown"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StaticFinding(_Model):
    """One thing the AST/source scan found."""

    rule: str
    message: str
    line: int | None = None
    severity: Literal["error", "warning"] = "warning"
    category: Category | None = None  # set for errors: the verdict they force


class ExtensionBuild(_Model):
    """One C++/CUDA extension the candidate loaded while it was imported."""

    name: str
    cached: bool = False  # the finished extension came from the build cache
    seconds: float
    objects_built: int = 0
    objects_reused: int = 0  # translation units taken from the object cache
    notes: list[str] = Field(default_factory=list)  # levers used, fallbacks taken


class CompileReport(_Model):
    backend: Backend
    seconds: float
    ok: bool
    errors: list[str] = Field(default_factory=list)  # the failing compiler lines, trimmed
    log_path: str | None = None
    cached: bool = False  # every extension came from kernelfix's content-addressed cache
    extensions: list[ExtensionBuild] = Field(default_factory=list)
    note: str | None = None


class TrialReport(_Model):
    """Comparison of one trial's candidate output with the reference output."""

    trial: int
    seed: int
    ok: bool
    category: Category | None = None  # set when not ok
    problem: str | None = None  # human text when not ok
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatches: int | None = None
    numel: int | None = None
    worst_index: list[int] | None = None
    worst_output: int | None = None  # which output of a tuple
    expected: float | None = None
    actual: float | None = None


class CorrectnessReport(_Model):
    atol: float
    rtol: float
    trials: list[TrialReport] = Field(default_factory=list)
    input_mutated: bool = False
    mutated_inputs: list[int] = Field(default_factory=list)

    @property
    def passed(self) -> int:
        return sum(t.ok for t in self.trials)


class LegalityReport(_Model):
    aten_ops: dict[str, int] = Field(default_factory=dict)  # every op seen in ModelNew.forward
    forbidden_ops: dict[str, int] = Field(default_factory=dict)
    static_findings: list[StaticFinding] = Field(default_factory=list)
    runtime_checked: bool = False
    recorder_intact: bool = True  # False: the candidate switched the op recorder off
    note: str | None = None


class TimingStats(_Model):
    median_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    p10_ms: float
    p90_ms: float
    runs: int


class Timings(_Model):
    candidate: TimingStats | None = None
    eager: TimingStats | None = None
    compiled: TimingStats | None = None  # torch.compile of the reference
    compile_note: str | None = None  # why torch.compile has no timing, if it has none
    wall_per_call_ms: float | None = None  # judge-observed, back-to-back calls
    floor_ms: float | None = None  # bytes moved / measured bandwidth
    bytes_moved: int | None = None
    bandwidth_gbps: float | None = None
    l2_flushed: bool = True
    gpu: str | None = None


class Verdict(_Model):
    """What the judge says of one candidate. Same JSON as `kernelfix eval --json`."""

    category: Category
    compiled: bool = False
    correct: bool | None = None
    legal: bool | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    timings: Timings | None = None
    feedback: str = ""

    task: str
    device: str
    backend: Backend = "unknown"
    candidate_sha1: str | None = None
    failed_stage: Stage | None = None
    message: str | None = None  # one line: what went wrong
    compile: CompileReport | None = None
    correctness: CorrectnessReport | None = None
    legality: LegalityReport | None = None
    profile: dict[str, Any] | None = None
    warnings: list[str] = Field(default_factory=list)
    stage_seconds: dict[str, float] = Field(default_factory=dict)
    logs_dir: str | None = None

    @property
    def ok(self) -> bool:
        return self.category == Category.OK

    @property
    def family(self) -> Family:
        return self.category.family
