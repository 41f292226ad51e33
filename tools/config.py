"""[any] Judge settings: defaults, per-task overrides, validation."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelfix.sandbox.isolation import Isolation
from kernelfix.tools.verdict import InputVariant, PrecisionPolicy, SanitizerTool


class TaskOverride(BaseModel):
    """Per-task changes, under ``[judge.tasks."<task file stem>"]`` in the config."""

    model_config = ConfigDict(extra="forbid")

    atol: float | None = None
    rtol: float | None = None
    rel_error_tol: float | None = None
    input_variants: list[InputVariant] | None = None
    float64_reference: bool | None = None
    precision: PrecisionPolicy | None = None
    backward: bool | None = None
    extra_allowed_ops: list[str] | None = None
    allow_libraries: bool | None = None
    allow_streams: bool | None = None


class BuildOptions(BaseModel):
    """How kernelfix builds a candidate's C++/CUDA extensions. All off is stock torch
    (still into the evaluation's own directory). None of these changes what the code means."""

    model_config = ConfigDict(extra="forbid")

    cache: bool = Field(
        True, description="reuse a finished extension built from identical sources, flags and toolchain"
    )
    object_cache: bool = Field(True, description="reuse a compiled translation unit (binding or kernel) seen before")
    host_pch: bool = Field(True, description="precompiled torch/extension.h for the host binding TU (gcc)")
    split_nvcc: bool = Field(True, description="run nvcc's host and device front ends in parallel")
    local_arch: bool = Field(
        False,
        description="build only for this machine's GPU arch, without PTX for newer GPUs (measured: saves well under a second)",
    )

    @classmethod
    def stock(cls) -> "BuildOptions":
        return cls(cache=False, object_cache=False, host_pch=False, split_nvcc=False, local_arch=False)

    @property
    def replaces_ninja(self) -> bool:
        return self.cache or self.object_cache or self.host_pch or self.split_nvcc


class JudgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device: Literal["cuda", "cpu"] | None = Field(None, description="None: cuda when available, else cpu")
    backward: bool | None = Field(
        None,
        description=(
            "judge and time the backward pass too (gradients of floating inputs and parameters, docs/backward.md); "
            "None: as the task says (BACKWARD = True)"
        ),
    )
    trials: int = Field(5, ge=1, description="correctness trials, each with fresh inputs under its own seed")
    seed: int | None = Field(
        None,
        description="base of the trial and weight seeds; None: drawn at random per judge, so no candidate can know its inputs in advance",
    )
    atol: float | None = Field(
        None, gt=0, description="None: by the output's dtype, as KernelBench (float32 1e-4, float16/bfloat16 1e-2)"
    )
    rtol: float | None = Field(None, ge=0, description="None: by the output's dtype, as atol")
    rel_error_tol: float = Field(
        1e-2,
        gt=0,
        description="cap on ||out - ref|| / ||ref - mean(ref)|| per output, beside the elementwise atol/rtol",
    )
    input_variants: list[InputVariant] = Field(
        default_factory=lambda: ["scaled", "shifted", "heavy_tailed"],
        description="extra correctness trials on the task's own inputs rescaled, shifted negative, redrawn heavy-tailed",
    )
    float64_reference: bool = Field(True, description="also run the reference in float64 for float32 tasks")
    inputs_on_device: bool = Field(
        True,
        description="draw get_inputs() on the GPU (same distributions; milliseconds where the CPU takes seconds per GiB)",
    )
    reference_cache_gb: float = Field(
        8.0,
        ge=0,
        description="GPU memory the reference worker keeps trials in for later candidates; above it, each is recomputed",
    )
    precision: PrecisionPolicy = Field(
        "warn", description="a candidate far less accurate than the float32 reference vs float64: warn, fail, or off"
    )
    truth_factor: float | None = Field(
        8.0,
        gt=1,
        description=(
            "a float32 trial outside atol/rtol still passes when, against the float64 reference, the candidate's worst error and "
            "error norm are within this multiple of the float32 reference's own (a kernel more exact than a TF32 reference); "
            "None: atol/rtol alone, as KernelBench"
        ),
    )
    precision_factor: float = Field(
        10.0, gt=1, description="flag error vs float64 above this multiple of the float32 reference's"
    )
    precision_floor: float = Field(
        3e-5,
        gt=0,
        description="and above this relative error norm (fp32 reorderings stay near 1e-6, fp16/TF32 inputs give ~3e-4)",
    )

    extra_allowed_ops: list[str] = Field(default_factory=list, description="aten ops allowed beyond the default list")
    removed_allowed_ops: list[str] = Field(default_factory=list)
    allow_libraries: bool = Field(False, description="allow cuBLAS/cuDNN calls in C++ sources")
    allow_streams: bool = Field(False, description="allow creating CUDA streams or threads in the candidate")
    runtime_legality: bool = True

    timing_runs: int = Field(
        100, ge=1, description="timed calls per callable, at most (fewer once the median settles: timing_settle_s)"
    )
    timing_settle_s: float = Field(
        0.1,
        ge=0,
        description="timed calls may stop early once they hold this much GPU time and the median is pinned (timing_precision); 0: always timing_runs",
    )
    timing_precision: float = Field(
        0.01,
        ge=0,
        description="...pinned: its 95% confidence interval within this fraction of it (tools/timing/clock.py, settled)",
    )
    warmup_ms: float = 25.0
    timing_budget_s: float = Field(60.0, description="cap on timed runs per callable for slow kernels")
    time_torch_compile: bool = True
    flush_l2: bool = True
    excessive_speedup_margin: float = Field(
        0.5, gt=0, le=1, description="flag a candidate faster than this fraction of the bytes-moved floor"
    )
    timing_wall_ratio: float = Field(
        0.5, gt=0, le=1, description="flag event time below this fraction of judge-observed wall time per call"
    )

    profile: bool = Field(
        False,
        description="profile a correct, legal candidate with Nsight Compute (GPU only); interactive sessions turn it on",
    )
    profile_timeout_s: float = Field(300.0, gt=0, description="ncu's whole run: start, warm-up, every replay pass")
    profile_max_kernels: int = Field(
        32, ge=1, description="kernel launches ncu profiles in one forward (--launch-count)"
    )
    profile_warmup_calls: int = Field(
        3, ge=1, description="forward calls before the profiled one (compilation, autotuning)"
    )
    ncu_path: str | None = Field(None, description="the ncu executable; None: PATH, then CUDA's usual places")

    sanitize: bool = Field(
        False,
        description="run compute-sanitizer on every CUDA/Triton candidate, correct ones too (--sanitize; docs/sanitizer.md)",
    )
    sanitize_failures: bool = Field(
        True,
        description="run compute-sanitizer on a CUDA/Triton candidate that is wrong, stale or dies with a CUDA error (GPU only)",
    )
    sanitizer_tools: list[SanitizerTool] = Field(
        default_factory=lambda: ["memcheck", "racecheck", "synccheck", "initcheck"],
        min_length=1,
        description="compute-sanitizer's tools to run, each in its own process",
    )
    sanitizer_timeout_s: float = Field(
        60.0, gt=0, description="the whole sanitizer stage: choosing the reduced input and every tool"
    )
    sanitizer_max_elements: int = Field(
        1 << 18,
        ge=1,
        description="the reduced input: the leading dimension cut until the largest input has about this many elements",
    )
    sanitizer_path: str | None = Field(
        None, description="the compute-sanitizer executable; None: PATH, then CUDA's usual places"
    )

    compile_timeout_s: float = Field(900.0, description="import and build, compilers included")
    import_timeout_s: float = Field(
        60.0, description="import and ModelNew(...) while no compiler runs: a hang at import"
    )
    forward_timeout_s: float = Field(
        10.0, gt=0, description="a forward that takes longer (and longer than the factor below) hangs"
    )
    forward_timeout_factor: float = Field(100.0, gt=0, description="... times the reference's forward time")
    cpu_forward_timeout_s: float = Field(
        120.0, gt=0, description="the floor on a machine without a GPU (Triton's interpreter is slow)"
    )
    warmup_max_gb: float = Field(
        1.0,
        ge=0,
        description="warm up (first-call compilation, autotuning) outside the GPU lease when inputs are this small",
    )
    run_timeout_s: float = Field(300.0, description="any one reference request, and a stage's trials, overall")
    bench_timeout_s: float = 900.0
    reference_compile_timeout_s: float = Field(
        600.0,
        gt=0,
        description="torch.compile's first call on the reference; past it the worker is ended and eager alone is timed, with a note",
    )
    reference_compile_threads: int = Field(
        1,
        ge=0,
        description="inductor's compile threads for the reference's torch.compile; 0: inductor's own choice (a process per core)",
    )
    memory_limit_gb: float | None = Field(None, description="host memory cap per child; None: 3/4 of RAM, at most 64")
    max_processes: int = Field(4096, ge=16, description="processes and threads alive at once per child (pids cgroup)")
    output_limit_mb: float = Field(64.0, gt=0, description="stdout + stderr per child; more and it is killed")
    sandbox: Isolation = Field(
        default_factory=Isolation,
        description="isolation layers for every child; `writable`/`hidden` add to the judge's own (work dir, caches; reference dir, credentials)",
    )
    hide_credentials: bool = Field(True, description="hide ~/.ssh, ~/.aws, .env files and the like from candidates")
    fork_server: bool = Field(
        True,
        description="start workers by fork from a process that has imported torch (kernelfix.sandbox.zygote), not by exec",
    )
    infra_retries: int = Field(
        3,
        ge=0,
        description="judge a candidate again this many times when the machine failed to (an infra:* verdict), never the model's turn",
    )
    infra_backoff_s: float = Field(
        5.0, ge=0, description="the pause before the first such retry; doubling after, at most a minute"
    )

    build: BuildOptions = Field(default_factory=BuildOptions)

    tasks: dict[str, TaskOverride] = Field(default_factory=dict)

    def for_task(self, task_name: str) -> "JudgeConfig":
        """This config with the task's overrides applied."""
        ov = self.tasks.get(task_name)
        if ov is None:
            return self
        changes = {k: v for k, v in ov.model_dump().items() if v is not None}
        if "extra_allowed_ops" in changes:
            changes["extra_allowed_ops"] = [*self.extra_allowed_ops, *changes["extra_allowed_ops"]]
        return self.model_copy(update=changes)
