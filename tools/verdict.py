"""[any] The judge's typed results: the result taxonomy and the verdict.

Every category is a ``family:detail`` string (``ok`` alone for success), after
MooreEval's taxonomy as adopted in DESIGN.md. The families are fixed; the
details listed here are the ones the judge emits. One place defines them so
that the agent loop, the UI, the batch report and the exporter agree.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

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
    RESOURCE_LIMIT = "runtime_error:resource_limit"  # output, process-count or file-size limit
    RUN_TIMEOUT = "runtime_error:timeout"
    CRASH = "runtime_error:crash"
    EXIT = "runtime_error:exit"
    EXCEPTION = "runtime_error:exception"

    OUTPUT_STRUCTURE = "correctness_error:output_structure"
    SHAPE = "correctness_error:shape"
    DTYPE = "correctness_error:dtype"
    NON_FINITE = "correctness_error:non_finite"
    NUMERICAL = "correctness_error:numerical"
    INPUT_DEPENDENT = "correctness_error:input_dependent"  # right on get_inputs()'s distribution only
    PRECISION = "correctness_error:precision"  # far less accurate than the float32 reference (when configured to fail)
    NO_GRADIENT = "correctness_error:no_gradient"  # --backward: the output carries no gradient, or one the reference has is missing

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
    TOO_LARGE = "infra:too_large"  # the task itself cannot fit this machine (its size and the limit named)
    GPU_BUSY = "infra:gpu_busy"  # GPU memory held by other processes ran out, not the candidate's
    GPU_LOST = "infra:gpu_lost"  # the GPU stopped answering the judge's own worker too
    HOST_MEMORY = "infra:host_memory"  # the machine ran out of memory (the kernel's OOM killer), not the child's limit
    DISK_FULL = "infra:disk_full"  # a write failed for lack of space on the judge's disk

    @property
    def family(self) -> Family:
        return Family(self.value.split(":", 1)[0])

    @property
    def machine_fault(self) -> bool:
        """The machine failed to judge the candidate: a verdict on nothing of the model's. Not
        ``no_gpu``: there the candidate was built for real and that build is the feedback."""
        return self.family == Family.INFRA and self != Category.NO_GPU

    @property
    def transient(self) -> bool:
        """A machine fault that judging again later may not meet (memory others held, a worker that
        died, the GPU or host under load). ``too_large`` and ``no_gpu`` stay what they are."""
        return self.machine_fault and self != Category.TOO_LARGE


# Prefix of warnings about the judge's sandbox (a layer this machine could not set up).
SANDBOX_NOTE = "sandbox: "

Stage = Literal["extract", "static", "compile", "correctness", "legality", "benchmark", "profile", "sanitize"]
Backend = Literal["cuda", "triton", "torch", "unknown"]
InputVariant = Literal["scaled", "shifted", "heavy_tailed"]  # see kernelfix.tools.correctness.input_variants
PrecisionPolicy = Literal["warn", "fail", "off"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StaticFinding(_Model):
    """One thing the AST/source scan found."""

    rule: str
    message: str
    line: int | None = None
    severity: Literal["error", "warning"] = "warning"
    category: Category | None = None  # set for errors: the verdict they force


class UnitBuild(_Model):
    """One translation unit of an extension build (kernelfix's build path records these)."""

    source: str  # file name: main.cpp, cuda.cu
    compiler: Literal["nvcc", "c++"]
    seconds: float  # wall time of its compile (0 when reused), a one-time PCH build excluded
    ok: bool = True
    reused: bool = False  # taken from the object cache
    torch_headers: list[str] = Field(default_factory=list)  # torch/ATen/c10 headers the source itself includes
    pch: bool = False  # compiled with the precompiled torch/extension.h
    pch_made_seconds: float | None = None  # this compile first built that PCH (once per machine and flags)
    no_pch: str | None = None  # why a TU with torch/extension.h went without the PCH that the build offered


class BuildTimeRef(_Model):
    """A measured build time to compare with: the median of real builds, and where they ran."""

    seconds: float
    basis: str  # e.g. "median of 7 builds on this machine"


class ExtensionBuild(_Model):
    """One C++/CUDA extension the candidate loaded while it was imported."""

    name: str
    kind: Literal["load_inline", "nvrtc"] = "load_inline"  # nvrtc: torch.cuda._compile_kernel
    cached: bool = False  # the finished extension came from the build cache
    seconds: float
    objects_built: int = 0
    objects_reused: int = 0  # translation units taken from the object cache
    units: list[UnitBuild] = Field(default_factory=list)
    link_seconds: float | None = None
    # What a .cu without torch headers takes on this machine (or where kernelfix measured it),
    # so the feedback can say what the layout costs; set when a unit included torch headers.
    torch_free_cu: BuildTimeRef | None = None
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


class TruthCheck(_Model):
    """The candidate against the float64 reference ("the truth"), beside the float32 reference's own
    error against it: a candidate no further from the truth than ``factor`` times the float32
    reference is correct, however far the reference's rounding puts it outside atol/rtol."""

    passed: bool
    factor: float
    error_max: float  # max |candidate - truth|, worst output
    reference_error_max: float  # max |float32 reference - truth|
    error_norm: float  # ||candidate - truth|| / ||truth - mean(truth)||
    reference_error_norm: float
    why: str = ""  # what failed, when it did


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
    # ||out - ref|| / ||ref - mean(ref)||, worst output; None where undefined (an all-zero reference)
    rel_error_norm: float | None = None
    rel_error_tol: float | None = None  # the threshold it was held to
    variant: InputVariant | None = None  # set on varied-input trials
    variant_of: int | None = None  # the trial whose inputs it varies
    error_vs_float64: float | None = None  # the candidate's relative error norm against the float64 reference
    reference_error_vs_float64: float | None = None  # the float32 reference's own
    # KernelBench's own check on this trial: every element within atol/rtol of the float32 reference.
    kernelbench_allclose: bool | None = None
    passed_by: Literal["tolerance", "float64"] | None = None  # which rule passed it (ok trials)
    truth: TruthCheck | None = None  # set where atol/rtol failed and the float64 reference decided
    input_set: int | None = None  # 1-based set of get_input_sets() (tools/input_sets.py); None: get_inputs()


class CorrectnessReport(_Model):
    atol: float | None = None  # as configured; None: by each output's dtype (``tolerance``)
    rtol: float | None = None
    tolerance: str = ""  # what applied, in words
    init_seed: int | None = None  # the seed both models' weights were built under
    rel_error_tol: float | None = None
    trials: list[TrialReport] = Field(default_factory=list)
    input_mutated: bool = False
    mutated_inputs: list[int] = Field(default_factory=list)
    # Set when a trivial output (zeros, the reference's mean) passes atol/rtol on a trial:
    # then only the relative error norm tells a computed output from a guessed one.
    vacuous_tolerance: str | None = None
    skipped_variants: dict[str, str] = Field(default_factory=dict)  # variant -> why it did not run
    float64_note: str | None = None  # why there is no float64 comparison, when there is none
    precision_warning: str | None = None  # error far above the float32 reference's own (fp16/bf16/TF32 arithmetic?)
    truth_factor: float | None = None  # the float64 rule's multiple (JudgeConfig.truth_factor)

    @property
    def passed(self) -> int:
        return sum(t.ok for t in self.trials)

    @property
    def kernelbench_allclose(self) -> bool | None:
        """Whether every trial also passed KernelBench's own check (allclose against the float32
        reference): published fast_p numbers count only those. None without trials."""
        if not self.trials:
            return None
        return all(t.kernelbench_allclose is not False for t in self.trials)


class LegalityReport(_Model):
    aten_ops: dict[str, int] = Field(default_factory=dict)  # every op seen in ModelNew.forward
    forbidden_ops: dict[str, int] = Field(default_factory=dict)
    static_findings: list[StaticFinding] = Field(default_factory=list)
    runtime_checked: bool = False
    recorder_intact: bool = True  # False: the candidate switched the op recorder off
    note: str | None = None
    # --backward: the ops the candidate's backward ran (its autograd.Function's backward, torch's derivatives of its forward's ops)
    backward_ops: dict[str, int] | None = None
    forbidden_backward_ops: dict[str, int] = Field(default_factory=dict)


class TimingStats(_Model):
    median_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    p10_ms: float
    p90_ms: float
    runs: int


class PassTimings(_Model):
    """--backward: one callable's forward (grad enabled), backward and forward+backward (docs/backward.md)."""

    forward: TimingStats | None = None
    backward_ms: float | None = (
        None  # forward+backward's median less forward's: the backward alone, without a graph kept across calls
    )
    forward_backward: TimingStats | None = None


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
    # --backward: per callable; ``candidate``/``eager``/``compiled`` above are then forward+backward (what ranks)
    backward: dict[str, PassTimings] | None = None  # "candidate", "eager", "compiled"


class InputSetReport(_Model):
    """One set of a task's get_input_sets() (tools/input_sets.py): its shapes, its trials, its speedup."""

    index: int  # 1-based
    shapes: str  # "x float32[7, 4096]"
    trials: int = 0  # trials of this set that ran (own and varied)
    ok: bool | None = None  # every trial of the set right; None: not reached
    timings: Timings | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None


Bottleneck = Literal["memory-bound", "compute-bound", "latency-bound", "launch-bound"]


class StallReason(_Model):
    """Why warps were not issuing: one reason, as ncu's warp state statistics count it."""

    reason: str  # ncu's name: long_scoreboard, barrier, math_pipe_throttle, ...
    share_pct: float  # of the cycles between two issued instructions
    cycles: float | None = None  # warp cycles per issued instruction spent stalled this way


class KernelProfile(_Model):
    """One kernel (ncu: one launch; torch.profiler: one name, all its launches)."""

    name: str
    calls: int = 1
    part: Literal["forward", "backward"] | None = None  # which pass launched it (--backward profiles both)
    grid: str | None = None
    block: str | None = None
    duration_ms: float | None = None  # per call; under ncu at the clocks ncu locks
    dram_pct: float | None = None  # DRAM throughput, % of peak
    dram_gbps: float | None = None
    dram_bytes: float | None = None
    memory_pct: float | None = None  # busiest memory unit (DRAM, L2, L1), % of peak
    memory_unit: str | None = None  # which one that is
    compute_pct: float | None = None  # busiest SM unit, % of peak
    achieved_occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    registers_per_thread: int | None = None
    shared_mem_per_block: int | None = None  # bytes, static + dynamic
    waves_per_sm: float | None = None
    flops: float | None = None  # non-tensor FP operations ncu counted (FADD, FMUL, 2 x FFMA; half and double too)
    stalls: list[StallReason] = Field(default_factory=list)  # the top few
    bottleneck: Bottleneck | None = None
    why: str = ""  # the numbers behind ``bottleneck``
    ncu_advice: list[str] = Field(default_factory=list)  # ncu's own rules with the largest estimated speedup


FindingKind = Literal[
    "uncoalesced",
    "bank_conflicts",
    "occupancy",
    "small_grid",
    "tail_wave",
    "launch_bound",
    "no_reuse",
    "tensor_cores_unused",
    "local_memory",
    "divergence",
    "memory_bound",
    "latency_bound",
    "contended_atomics",
    "compute_pipe",
    "mma_sync_on_hopper",
    "host_sync",
]


class CodeLine(_Model):
    """Where Nsight Compute's source counters place a finding."""

    file: str  # as ncu names it: the build's .cu, or the candidate's .py for Triton
    line: int  # in that file
    code: str  # the line's text
    candidate_line: int | None = None  # the same text's line in the candidate's source, where it occurs once


class Finding(_Model):
    """One defect the profile shows, with its numbers, where it is, and what fixes it."""

    kind: FindingKind
    kernel: str
    part: Literal["forward", "backward"] | None = None  # the kernel's pass, under --backward
    share_pct: float  # of the profiled kernels' time
    what: str  # the finding with its numbers
    fix: str  # what to do about it (never advice another finding contradicts)
    where: CodeLine | None = None
    gain_pct: float | None = None  # ncu's estimated time saved by fixing it, where one of its rules matched
    ncu_rule: str | None = None  # that rule's own words, shortened
    # What the source shows the defect's code is for, where that changes the fix: contended atomics' "counter",
    # "data" (a histogram) or "one_address" (tools/kernel_source/atomics.py); the notes follow it
    use: str | None = None


class ProfileReport(_Model):
    """What profiling found: per kernel numbers, the bottleneck, and a few lines for the model."""

    source: Literal["ncu", "torch_profiler", "none"] = "none"
    bottleneck: Bottleneck | None = None
    summary: str = ""  # one line: the bottleneck and the numbers behind it
    highlights: list[str] = Field(default_factory=list)  # the lines that go into the feedback
    kernels: list[KernelProfile] = Field(default_factory=list)  # longest first
    launches: int = 0  # kernel launches profiled in one forward (and its backward, under --backward)
    launches_capped: bool = False  # ncu stopped at its launch limit: forward launched more
    kernel_ms: float | None = None  # sum of kernel durations in one forward
    candidate_ms: float | None = None  # the benchmark's median for one forward, for comparison
    dram_bytes: float | None = None  # moved to and from DRAM by all kernels
    min_bytes: int | None = None  # inputs + outputs: what any implementation moves at least
    memory_floor_ms: float | None = None  # the kernels' DRAM traffic at peak bandwidth
    compute_floor_ms: float | None = None  # each kernel's busiest SM unit at peak
    task_flops: float | None = None  # matmul/conv FLOPs of the reference forward (torch's flop counter)
    achieved_tflops: float | None = None  # task FLOPs over the candidate's median time
    note: str | None = None  # why there is no (full) profile
    log_path: str | None = None  # ncu's CSV on disk
    findings: list[Finding] = Field(default_factory=list)  # most costly first (tools/profile/findings.py)


SanitizerTool = Literal["memcheck", "racecheck", "synccheck", "initcheck"]
# What compute-sanitizer found, by kind (tools/sanitizer/hazards.py gives each its fix).
HazardKind = Literal[
    "shared_race",  # racecheck: two threads of a block touch one shared-memory word, one writing, with no barrier between
    "out_of_bounds",  # memcheck: an access outside any allocation (global) or past the block's shared/local memory
    "misaligned",  # memcheck: an access whose address is not a multiple of its size (float4 on a 4-byte boundary)
    "divergent_barrier",  # synccheck: a barrier that some threads of the block (or warp) reach and others skip
    "invalid_sync",  # synccheck: a __syncwarp / barrier given a mask or arguments that do not match the threads executing it
    "uninitialized_read",  # initcheck: a read of global memory nothing wrote (torch.empty never zeroed)
    "device_exception",  # memcheck: a hardware exception the tool could not tie to one access (illegal address, instruction)
    "device_assert",  # memcheck: a device-side assert fired
    "api_error",  # a CUDA API call the candidate made returned an error (an invalid launch configuration)
]


class SourceAt(_Model):
    """Where a hazard is, as compute-sanitizer's line table says (CUDA built with -lineinfo; Triton emits its own)."""

    file: str  # as the tool names it: the build's .cu, or the candidate's .py for Triton
    line: int  # in that file
    code: str | None = None  # the line's text, read from that file where the judge could
    candidate_line: int | None = (
        None  # the same line in the candidate's own source (a .cu string in it, or the .py itself)
    )


class Hazard(_Model):
    """One defect compute-sanitizer saw, with where it is and what fixes it."""

    tool: SanitizerTool
    kind: HazardKind
    kernel: str  # the kernel's name, without its parameter list
    what: str  # the tool's own words, shortened: "Invalid __global__ read of size 4 bytes", "Race reported between ..."
    where: SourceAt | None = None  # the access (for a race: the first access of the pair)
    other: SourceAt | None = None  # a race's second access
    memory: Literal["global", "shared", "local", "generic"] | None = None
    access: str | None = None  # "read", "write", "RAW", "WAR", "WAW", ...
    size_bytes: int | None = None  # the access's size
    detail: str | None = None  # the address's relation to the nearest allocation, the thread and block
    count: int = 1  # reports of this kind at this place (racecheck's hazard count, repeated memcheck errors)
    in_candidate: bool = True  # False: a kernel that is not the candidate's (torch's own), listed but never blamed
    fix: str = ""


class GlobalRace(_Model):
    """A read-modify-write of global memory without an atomic that several threads (or Triton programs) can reach,
    read from the candidate's source (tools/kernel_source/races.py): the race compute-sanitizer cannot see."""

    kernel: str
    line: int  # in the candidate's source
    code: str  # that line
    target: str  # the element written: "y[row]", "y_ptr + row"
    reason: Literal[
        "threads", "blocks", "programs", "data"
    ]  # who shares the element: a block's threads, blocks, programs, equal data
    why: str
    fix: str


class ToolRun(_Model):
    """One compute-sanitizer tool's run on the reduced input."""

    tool: SanitizerTool
    seconds: float
    errors: int | None = None  # its ERROR SUMMARY (racecheck: hazards), None when it printed none
    finished: bool = True  # False: killed at its time limit (what it printed so far still counts)
    problem: str | None = None  # why it gave no report (could not start, target failed before any kernel)
    log_path: str | None = None


class SanitizerReport(_Model):
    """The sanitizer stage's result (docs/sanitizer.md): the cause of a wrong or crashing kernel, named by
    compute-sanitizer on a reduced input. Never changes the verdict's category."""

    why: str = ""  # what triggered it: "correctness_error:numerical", "--sanitize"
    hazards: list[Hazard] = Field(default_factory=list)  # the candidate's first, most telling first
    tools: list[ToolRun] = Field(default_factory=list)
    inputs: str | None = None  # the reduced input it ran on, in words ("x float32[32, 8192] (rows 32 of 16384)")
    reduced: bool = False  # the input is smaller than the failing trial's
    reproduced: bool | None = None  # the reduced input also gave a wrong output or a fault (None: not known)
    nondeterministic: str | None = None  # two forwards on the same reduced input differed: how much
    # Where no tool named a cause: the candidate's global read-modify-writes that several threads can reach (None: not read)
    global_races: list[GlobalRace] | None = None
    seconds: float | None = None
    version: str | None = None  # compute-sanitizer's version line
    note: str | None = None  # one line when it could not run (no GPU, no compute-sanitizer) or ran only in part

    @property
    def causes(self) -> list[Hazard]:
        return [h for h in self.hazards if h.in_candidate]


class Verdict(_Model):
    """What the judge says of one candidate. Same JSON as `kernelfix eval --json`."""

    category: Category
    compiled: bool = False
    correct: bool | None = None
    legal: bool | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    # A correct candidate that also passed KernelBench's own check (allclose against the float32
    # reference) on every trial; False where the float64 rule passed it (docs/feedback.md). Published
    # fast_p numbers count only True.
    kernelbench_allclose: bool | None = None
    timings: Timings | None = None  # with input sets: the first set's (each set's in input_sets)
    # A task with get_input_sets(): each set's shapes, trials and speedup; speedup_eager and
    # speedup_compile are then their geometric mean. Empty for a task with get_inputs() alone.
    input_sets: list[InputSetReport] = Field(default_factory=list)
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
    profile: ProfileReport | None = None
    # The sanitizer stage (docs/sanitizer.md): the cause of a failure, beside the category it keeps.
    sanitizer: SanitizerReport | None = None
    warnings: list[str] = Field(default_factory=list)
    # Machine faults met before this verdict, each judged again after a pause ("infra:gpu_busy: ...").
    infra_retries: list[str] = Field(default_factory=list)
    stage_seconds: dict[str, float] = Field(default_factory=dict)
    breakdown: dict[str, float] = Field(
        default_factory=dict
    )  # seconds inside the stages (reference wait, warm-up, trials, baseline, timing)
    logs_dir: str | None = None

    @property
    def ok(self) -> bool:
        return self.category == Category.OK

    @property
    def family(self) -> Family:
        return self.category.family
