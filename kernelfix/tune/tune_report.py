"""``DIR/report.json`` of `kernelfix tune` (:class:`TuneReport`): the ranking, each optimized module's
capture, session and swap trial, the model's forward before and after, and the swaps kept.

Written atomically after every step, so an interrupted tune resumes where it stopped and
``kernelfix.load_tuned`` reads what was decided.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelfix.capture.schema import OutputCheck

REPORT_FORMAT = "kernelfix-tune/1"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Stats(_Model):
    """One model's forward time over the rounds: each round's median call."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    rounds: int
    calls_per_round: int


class Comparison(_Model):
    """The model's forward, original against swapped, in one mode, timed in paired rounds."""

    mode: Literal["eager", "compiled"]
    before: Stats | None = None
    after: Stats | None = None
    speedup: float | None = Field(None, description="median over the rounds of original time / swapped time")
    speedup_low: float | None = Field(
        None, description="that ratio's noise_quantile over the rounds (its p10 by default)"
    )
    speedup_high: float | None = Field(None, description="its 1 - noise_quantile quantile (p90)")
    faster: bool = Field(False, description="faster beyond the noise: speedup_low > 1 and speedup >= 1 + min_gain")
    output: OutputCheck | None = Field(
        None, description="the swapped model's output against the original's, in this mode"
    )
    error: str | None = Field(
        None, description="why it was not measured (it does not compile with fullgraph=True, it raised)"
    )
    note: str | None = None


class SwapTrial(_Model):
    """One or more modules swapped into the model together: checked and timed end to end."""

    modules: list[str]
    targets: list[str] = Field(
        default_factory=list, description="what was swapped, as the table names it (LlamaAttention x16)"
    )
    sessions: list[str]
    best_turns: list[int | None] = Field(
        default_factory=list, description="each session's best turn when tried (a new best: tried again)"
    )
    eager: Comparison | None = None
    compiled: Comparison | None = None
    grads: OutputCheck | None = Field(
        None, description="--backward: the gradients of the model's other parameters against the original's"
    )
    fallbacks: int = Field(
        0, description="calls the swapped modules handed to the original module (unlike every captured call)"
    )
    compile_paths: dict[str, str] = Field(
        default_factory=dict,
        description="per module, how its kernel runs under torch.compile "
        "(traced by Dynamo, or the custom operator and why): capture/summary.py's line",
    )
    kept: bool = False
    reason: str = ""


class Instance(_Model):
    """One module of a target of several (one layer's attention among the model's 16)."""

    module: str
    share: float


class ModuleRow(_Model):
    """One target: a module, or every module of one kind (the copies of one layer), its share of the step and what
    tune did with it."""

    module: str = Field(
        description="the path as `kernelfix capture --module` takes it (model.blocks.0.attn): the first instance"
    )
    module_class: str
    kind: str | None = Field(None, description="class and signature: the modules of one kind are one target")
    instances: list[Instance] = Field(
        default_factory=list,
        description="every module of the target, with its own share "
        "(empty for a target of one module); the kernel is swapped into each, with its own weights",
    )
    chosen_because: str | None = Field(None, description="why it was chosen over what it holds")
    capture: str | None = Field(None, description="capture's verdict on it: 'ok', or why it cannot be captured")
    calls: float = Field(description="calls per forward")
    shapes: list[str] = Field(default_factory=list, description="its distinct input signatures")
    share: float = Field(description="of the forward's time, its children's included")
    self_share: float = Field(0.0, description="of the forward's time, in its own code (not in its submodules)")
    ms: float = Field(0.0, description="its time per forward (kernel time on a GPU, CPU time on a CPU)")
    amdahl: float | None = Field(None, description="1 / (1 - share): the model's speedup if this module took no time")
    kernel_share: float | None = Field(None, description="GPU: its share of the CUDA kernel time")
    cpu_share: float | None = Field(None, description="GPU: its share of the CPU time (the ops' dispatch and launches)")
    ops: dict[str, int] = Field(
        default_factory=dict, description="compute ops per forward its own code and its submodules call (not views)"
    )
    candidate: bool = False
    rank: int | None = Field(None, description="its place among the modules worth a kernel, by share")
    reason: str | None = Field(None, description="why it is not worth a kernel")
    # What tune did with it (the selected: the top K that capture could trace)
    selected: bool = False
    skipped: str | None = Field(
        None, description="why it was passed over: capture cannot trace it, no replay file, ..."
    )
    task: str | None = None
    session: str | None = None
    session_status: str | None = None
    correct: bool | None = None
    best_turn: int | None = None
    task_speedup_eager: float | None = Field(
        None, description="the judge's speedup of the best kernel on the captured task"
    )
    swap: SwapTrial | None = None


class Ranking(_Model):
    """How the ranking was measured."""

    device: str = Field(description="where the model ran")
    measure: Literal["cuda_kernels", "cpu_time"] = Field(description="what the shares are of")
    why: str | None = Field(None, description="why a GPU's modules were ranked by CPU time")
    backward: bool = False
    steps: int = Field(description="forwards (or forward+backward steps) profiled")
    step_ms: float = Field(description="one forward (step) end to end, median, without the profiler")
    attributed_ms: float = Field(description="per step: the time the shares divide (of the measure)")
    kernel_ms: float | None = Field(None, description="GPU: CUDA kernel time per step")
    busy: float | None = Field(
        None, description="GPU: kernel time / the step's time; under 0.5 the step is launch-bound"
    )
    outside_modules: float = Field(
        0.0, description="share of the time no submodule holds (the model's own code, gradient accumulation)"
    )


class KeptSwap(_Model):
    module: str
    session: str
    instances: list[str] = Field(
        default_factory=list, description="every module the kernel replaces (the target's instances)"
    )


class TuneReport(_Model):
    format: str = REPORT_FORMAT
    kernelfix_version: str
    created_at: float
    updated_at: float
    script: str
    script_args: list[str] = Field(default_factory=list)
    script_sha256: str
    model_name: str = Field(
        description="the script's variable that holds the model: the first part of every module path"
    )
    model_class: str
    inputs: list[str] = Field(default_factory=list, description="the model's call, as profiled and timed")
    device: str = Field(description="where the model runs (swaps are loaded and timed there)")
    judge_device: str
    backward: bool
    why: str = Field("", description="whether the run is a training step or inference, and how that was seen")
    llm: str = Field(description="the language model (--model)")
    top: int
    ranking: Ranking | None = None
    modules: list[ModuleRow] = Field(default_factory=list, description="largest share first")
    combined: SwapTrial | None = Field(None, description="every kept swap together")
    kept: list[KeptSwap] = Field(default_factory=list, description="what kernelfix.load_tuned applies")
    done: bool = False
    notes: list[str] = Field(default_factory=list)
    uncapturable: dict[str, str] = Field(default_factory=dict, description="kind -> why capture cannot take it")

    def row(self, module: str) -> ModuleRow:
        return next(r for r in self.modules if r.module == module)

    @property
    def selected(self) -> list[ModuleRow]:
        return sorted((r for r in self.modules if r.selected), key=lambda r: r.rank or 0)


def label(m: ModuleRow) -> str:
    """``LlamaAttention x16`` for a target of several modules, its path for one."""
    return f"{m.module_class} x{len(m.instances)}" if m.instances else m.module


def instances(m: ModuleRow) -> list[str]:
    return [i.module for i in m.instances] or [m.module]
