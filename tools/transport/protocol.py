"""[any] What the judge and its workers say to each other: every message typed here, once, by its name.

Requests (``Request``) travel as JSON frames on the worker's request socket (with
file descriptors for the arenas attached); replies and reports (``Reply``) as JSON
lines on its authenticated pipe. On the wire a message is ``{"type": KIND, **fields}``;
the envelope adds ``id`` (a reply repeats its request's) and, on arrival at the judge,
``_t`` (when it came, ``MessageReader``). ``REQUESTS`` and ``REPLIES`` name every
message; a misspelt name or field fails where it is built or parsed, never silently.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from kernelfix.tools.task_size import TaskSize
from kernelfix.tools.transport import ArenaSpec, TensorSpec
from kernelfix.tools.verdict import InputVariant, TimingStats, TrialReport

Purpose = Literal["correctness", "fresh", "varied"]
ENVELOPE = ("type", "id", "_t")  # the wire's own keys, outside any message's fields


class ProtocolError(ValueError):
    """A message that is not one of the protocol's, or whose fields are not its message's."""


class _Msg(BaseModel):
    """A part of a message (not sent alone)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Message(_Msg):
    """One message, named on the wire by ``KIND`` (declared once per subclass)."""

    KIND: ClassVar[str] = ""
    _at: float | None = PrivateAttr(None)

    @property
    def at(self) -> float | None:
        """When it reached the judge (seconds since the worker's start), for a parsed reply."""
        return self._at

    def wire(self) -> dict[str, Any]:
        """The frame or line to send (the channel's JSON encoder takes what is left to it)."""
        return {"type": self.KIND, **self.model_dump(by_alias=True)}


class Request(Message):
    """The judge to a worker, on its request socket."""

    id: int | None = None  # set by WorkerHandle.ask; the reply repeats it

    @classmethod
    def __pydantic_init_subclass__(cls, **kw: Any) -> None:
        super().__pydantic_init_subclass__(**kw)
        _register(REQUESTS, cls)


class Reply(Message):
    """A worker to the judge, on its authenticated pipe: a request's answer (with its ``id``) or a report."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kw: Any) -> None:
        super().__pydantic_init_subclass__(**kw)
        _register(REPLIES, cls)


REQUESTS: dict[str, type[Request]] = {}
REPLIES: dict[str, type[Reply]] = {}
M = TypeVar("M", bound=Message)


def _register(table: dict[str, Any], cls: type) -> None:
    kind = cls.__dict__.get("KIND")
    if kind:  # a subclass that names no message of its own (Baseline, a cache's record) is not one
        if table.get(kind, cls) is not cls:
            raise TypeError(f"two messages named {kind!r}: {table[kind].__name__} and {cls.__name__}")
        table[kind] = cls


def parse(raw: dict[str, Any], as_: type[M]) -> M:
    """``raw`` (a frame or a line, envelope included) as the message ``as_``; ProtocolError if it is not one."""
    if raw.get("type") != as_.KIND:
        raise ProtocolError(f"expected a {as_.KIND!r} message, got {str(raw.get('type'))[:80]!r}")
    try:
        msg = as_.model_validate(
            {k: v for k, v in raw.items() if k not in ENVELOPE or (k == "id" and issubclass(as_, Request))}
        )
    except ValidationError as e:
        what = "; ".join(f"{'.'.join(map(str, x['loc'])) or 'fields'}: {x['msg']}" for x in e.errors()[:3])
        raise ProtocolError(f"a malformed {as_.KIND!r} message ({what})"[:400]) from None
    msg._at = raw.get("_t")
    return msg


def of_kind(messages: list[dict[str, Any]], as_: type[M]) -> list[M]:
    """Every message of ``as_``'s kind among raw ones, parsed (ProtocolError on a malformed one)."""
    return [parse(m, as_) for m in messages if m.get("type") == as_.KIND]


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


class ReferenceReady(Reply):
    """Sent once the task is imported and Model built."""

    KIND = "ready"
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


class Prepared(Reply):
    """A trial's inputs, placed in an input slot, and where the candidate's outputs go."""

    KIND = "prepared"
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


class CandidateOutput(Reply):
    """What one forward returned: its structure and leaf layouts, and whether the values were copied out."""

    KIND = "output"
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


class Checked(Reply):
    """A candidate's output compared with the reference's."""

    KIND = "checked"

    report: TrialReport
    mutated: list[int] = Field(default_factory=list)
    seconds: dict[str, float] = Field(
        default_factory=dict
    )  # where the worker spent the check ("compare", "mutation", ...)


# ---------------------------------------------------------------- a worker's reports, any stage


class Hello(Reply):
    """A worker's first word: its sandbox and imports are done."""

    KIND = "hello"
    pid: int
    stage: str | None = None


class Phase(Reply):
    """Where the worker is (a failure report names it); the UI shows it."""

    KIND = "phase"
    phase: str
    trial: int | None = None
    done: int | None = None  # timed calls so far
    rows: int | None = None  # the sanitizer's rows of a cut trial


class Compiler(Reply):
    """A compiler (nvcc, Triton) started or ended: the hang deadline pauses meanwhile."""

    KIND = "compiler"
    running: bool


class WorkerError(Reply):
    """The worker's last word when it fails: what was raised, where."""

    KIND = "error"
    kind: str  # "exception", "task", "too_large", "gpu_required", "no_model_new", "exit"
    phase: str
    exc_type: str
    classes: list[str] = Field(default_factory=list, alias="mro")  # the exception's classes, its own first
    message: str = ""
    traceback: str = ""
    memory: dict[str, int] | None = None  # an out-of-memory error: whose memory ran out (child.gpu_memory)


class BadRequest(Reply):
    KIND = "bad_request"
    got: str


class TargetResult(Reply):
    """A one-shot target's result (profile, sanitizer): each tool's own report, read by that tool's stage."""

    model_config = ConfigDict(extra="allow")
    KIND = "result"


# ---------------------------------------------------------------- the candidate's worker


class Standby(Reply):
    """Started ahead: torch and CUDA are up; it waits for ``go``."""

    KIND = "standby"


class Builds(Reply):
    """What each extension build did (tools.compile's ExtensionBuild, read by the compile report)."""

    KIND = "builds"
    builds: list[dict[str, Any]] = Field(default_factory=list)


class Built(Reply):
    KIND = "built"
    import_seconds: float


class Warmed(Reply):
    KIND = "warmed"
    done: bool
    why: str | None = None  # why no warm-up ran
    ms: float | None = None


class Ops(Reply):
    """The op recorder's counts (ATen op -> calls), for the legality stage."""

    KIND = "ops"
    ops: dict[str, int] | None = None
    recorder_intact: bool = True
    backward_ops: dict[str, int] | None = None


class CandidateTiming(Reply):
    """CUDA events around each call: what ranks (forward+backward under --backward) and, then, forward alone."""

    KIND = "candidate_timing"
    candidate: TimingStats
    forward: TimingStats | None = None


class WallStart(Reply):
    """The judge's wall clock starts at this message's arrival: ``calls`` back-to-back calls follow."""

    KIND = "wall_start"
    calls: int


class WallIssued(Reply):
    """The host is done issuing the calls: what the sync waits for next is the GPU's."""

    KIND = "wall_issued"


class WallEnd(Reply):
    """The calls have finished on the device (after a device-wide sync); ``calls``: how many ran."""

    KIND = "wall_end"
    calls: int


class Timed(Reply):
    KIND = "timed"


class Released(Reply):
    KIND = "released"


# ---------------------------------------------------------------- the reference's worker


class Sized(Reply, TaskSize):
    """One trial's tensors counted on the meta device, before Model is built."""

    KIND = "sized"
    gpu_total_bytes: int | None = None


class Surveyed(Reply):
    KIND = "surveyed"
    trials: list[Prepared] = Field(default_factory=list)  # in plan order; stops at the first its cache cannot hold
    cache_used: int = 0


class Trimmed(Reply):
    KIND = "trimmed"
    freed: int = 0
    reserved: int = 0
    slots: int = 0
    outs: int = 0


class BaselineTimes(Reply):
    """Model's times on one trial (eager, torch.compile) and the device's copy bandwidth."""

    KIND = "baseline"
    eager: TimingStats
    compiled: TimingStats | None = None
    compile_note: str | None = None
    bytes_moved: int
    bandwidth_gbps: float
    gpu: str | None = None
    # --backward: ``eager``/``compiled`` above are forward+backward; these are forward alone (grad enabled)
    eager_forward: TimingStats | None = None
    compiled_forward: TimingStats | None = None
    peak_bytes: int | None = None  # the reference process's peak GPU allocation so far, timing included


class BaselineWarm(Reply):
    """torch.compile of Model compiled (a ``baseline`` request with ``warm_only``)."""

    KIND = "baseline_warm"


class Determinism(Reply):
    """The same trial twice from scratch (``kernelfix baseline``)."""

    KIND = "determinism"
    inputs_equal: bool
    outputs_equal: bool
    rel_error: float | None = None
    vacuous: str | None = None
    ref_ms: float | None = None
    input_bytes: int = 0
    output_bytes: int = 0
    float64_note: str | None = None
    trial_peak_bytes: int | None = None
    draw_note: str | None = None


class Fds(Reply):
    """On the reference's request socket, not its pipe: the new arenas' descriptors ride with it."""

    KIND = "fds"


# ---------------------------------------------------------------- requests


class Exit(Request):
    KIND = "exit"


class Go(Request):
    """To a standby candidate worker: its candidate exists now."""

    KIND = "go"


class Warmup(Request):
    KIND = "warmup"
    input_bytes: int | None = None  # the inputs' size as the judge counted it; None: the worker counts


class RunTrial(Request):
    """One forward on a prepared trial (``Prepared``'s slots and layouts; the arenas' fds ride along)."""

    KIND = "trial"
    index: int
    slot: int
    in_arena: ArenaSpec | None = None  # a new input arena (its fd first), else the slot's contents were rewritten
    inputs: Any = None
    input_specs: list[TensorSpec] = Field(default_factory=list)
    out: int
    out_arena: ArenaSpec
    expected_specs: list[TensorSpec] = Field(default_factory=list)
    grads: list[GradKey] = Field(default_factory=list)


class OpsRequest(Request):
    KIND = "ops"


class Time(Request):
    KIND = "time"
    slot: int
    timing: dict[str, Any]  # timing.baselines.timing_settings


class Release(Request):
    """Arenas given back. Candidate: ``final`` (the stage is over) returns the allocator's free blocks too;
    reference: ``owner`` with ``keep`` keeps them as that evaluation's spares."""

    KIND = "release"
    slots: list[int] = Field(default_factory=list)
    outs: list[int] = Field(default_factory=list)
    final: bool = True
    owner: str | None = None
    keep: bool = False


class Prepare(Request):
    KIND = "prepare"
    trial: TrialPlan
    into: int | None = None  # an input slot to rewrite, else a new arena
    inputs_only: bool = False  # timed, never checked: no float64 truth
    owner: str | None = None


class Survey(Request):
    KIND = "survey"
    trials: list[TrialPlan]


class Check(Request):
    KIND = "check"
    trial: int
    output: CandidateOutput
    slot: int | None = None


class BaselineRequest(Request):
    KIND = "baseline"
    trial: TrialPlan
    timing: dict[str, Any]
    warm_only: bool = False  # compile torch.compile's graph and stop (``baseline_warm``)
    compile_threads: int | None = None


class DeterminismRequest(Request):
    KIND = "determinism"
    trial: TrialPlan


class Trim(Request):
    KIND = "trim"
