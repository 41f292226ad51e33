"""[any] What the judge and its workers say to each other: typed, so every field crosses checked.

Requests travel as JSON frames on the worker's request socket (with file
descriptors for the arenas attached); replies as messages on its authenticated
pipe. Each request carries an ``id`` that its reply repeats.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelfix.tools.transport import ArenaSpec, TensorSpec
from kernelfix.tools.verdict import InputVariant, TrialReport

Purpose = Literal["correctness", "fresh", "varied"]


class _Msg(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TrialPlan(_Msg):
    """One trial: its seed and what it is for; a varied trial derives from another's inputs."""

    index: int
    seed: int
    purpose: Purpose
    variant: InputVariant | None = None
    variant_of: int | None = None
    float64: bool = False  # compare against a float64 reference too (float32 tasks)
    input_set: int | None = None  # 1-based set of get_input_sets() it draws from; None: get_inputs()


class ReferenceSpec(_Msg):
    """The reference worker's start-up settings (the spec file it reads)."""

    stage: Literal["reference"] = "reference"
    task_path: str
    device: str
    init_seed: int
    float64: bool = True
    inputs_on_device: bool = True
    cache_bytes: int = 8 << 30
    arena: Literal["auto", "host"] = "auto"
    atol: float | None = None  # None: by the output's dtype
    rtol: float | None = None
    rel_error_tol: float | None = 1e-2
    truth_factor: float | None = 8.0  # None: atol/rtol alone decide (no float64 rule)
    memory_limit_bytes: int | None = None  # the host memory the worker may use (a task larger is refused at once)
    backward: bool = False  # gradients judged and timed too (docs/backward.md)
    id_base: int = 0  # its arenas' ids count from here: a restarted worker's never name a predecessor's


class ReferenceReady(_Msg):
    """Sent once the task is imported and Model built."""

    float64_note: str | None = None  # why no float64 reference (None: there is one)
    arena_kind: Literal["cuda", "host"] = "host"
    arena_note: str | None = None  # why not cuda, on a GPU
    torch: str = ""
    gpu: str | None = None
    capability: str | None = None
    draw_note: str | None = None  # how get_inputs() draws (on the device, or on the CPU and why)
    # For the task's floor and the GPU block of the prompt (tools/gpu/floor.py, tools/gpu/specs.py):
    task_flops: float | None = None  # matmul/conv FLOPs of one forward (torch's flop counter, on the meta device)
    dtypes: list[str] = Field(default_factory=list)  # floating dtypes of the inputs, weights and outputs
    gpu_props: dict[str, Any] = Field(default_factory=dict)  # what the driver reports of the GPU
    input_sets: list[str] | None = None  # each get_input_sets() set's shapes in words; None: the task has none
    parameters: list[str] = Field(default_factory=list)  # --backward: Model's trainable parameters, by name, in order


class GradKey(_Msg):
    """One gradient the reference has: of a floating input (by its flat index) or of a parameter (by its index in parameters())."""

    kind: Literal["input", "parameter"]
    index: int
    name: str  # "grad of input 0", "grad of parameter linear.weight"


class Prepared(_Msg):
    """A trial's inputs, placed in an input slot, and where the candidate's outputs go."""

    index: int
    skipped: str | None = None  # why this (varied) trial does not run
    slot: int | None = None  # input slot id (a new arena, or the one named by ``into``)
    in_arena: ArenaSpec | None = None  # set when a new arena's fd came with this reply
    inputs: Any = None  # skeleton
    input_specs: list[TensorSpec] = Field(default_factory=list)
    out: int | None = None  # output slot id
    out_arena: ArenaSpec | None = None
    expected: Any = None  # the reference output's skeleton
    expected_specs: list[TensorSpec] = Field(default_factory=list)
    ref_ms: float = 0.0  # the reference forward's wall time (with a sync), for the hang deadline
    input_bytes: int = 0
    output_bytes: int = 0
    noise: float | None = None  # the float32 reference's own relative error vs float64
    has_float64: bool = False
    float64_note: str | None = None
    vacuous: str | None = None  # a trivial output passes atol/rtol on this trial
    cached: bool = False  # the reference came from the worker's cache, not a new forward
    # --backward: the input arena holds [inputs, cotangents] and the output arena [output, gradients]; which
    # gradients, in order ("input 0", "parameter 3": the index in parameters()), and what to call them
    grads: list[GradKey] = Field(default_factory=list)
    no_backward: str | None = None  # why this trial has nothing to differentiate (integer outputs, argmax)
    seconds: dict[str, float] = Field(
        default_factory=dict
    )  # where the worker spent this request ("draw", "float64", ...)


class CandidateSpec(_Msg):
    """The candidate worker's start-up settings."""

    stage: Literal["candidate"] = "candidate"
    task_path: str
    candidate_path: str
    build_dir: str
    build: dict[str, Any] = Field(default_factory=dict)
    device: str
    init_seed: int
    record_ops: bool = True
    warmup_max_bytes: int = 0  # warm up (first-call compilation) on own inputs when they are this small; 0: never
    standby: bool = False  # started ahead of its candidate: Python, torch, CUDA up, then wait for "go"
    backward: bool = False  # each trial: forward with grad, backward with the judge's cotangent, gradients returned


class CandidateOutput(_Msg):
    """What one forward returned: its structure and leaf layouts, and whether the values were copied out."""

    index: int
    out: int | None = None
    skeleton: Any = None
    specs: list[TensorSpec] = Field(default_factory=list)
    copied: bool = False  # leaves matched the expected layouts and their values are in the out arena
    unsupported: str | None = None  # the output could not be carried (not tensors, numbers or containers)
    forward_ms: float = 0.0
    open_ms: float = 0.0  # mapping the arenas and binding the inputs
    handoff_ms: float = 0.0  # copying the outputs into the output arena
    allocated: int | None = None  # the worker's live GPU allocations after the forward (diagnostics)
    no_gradient: str | None = None  # --backward: why no gradient could be taken or one is missing
    backward_ms: float = 0.0


class Checked(_Msg):
    report: TrialReport
    mutated: list[int] = Field(default_factory=list)
    seconds: dict[str, float] = Field(
        default_factory=dict
    )  # where the worker spent the check ("compare", "mutation", ...)
