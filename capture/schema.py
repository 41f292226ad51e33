"""Typed records of a capture: the call's inputs, the check of the written task, the manifest
beside it (``TASK.capture.json``), and the reports the CLI prints with --json."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MANIFEST_FORMAT = "kernelfix-capture/1"


class TensorSpec(BaseModel):
    """One captured tensor: its layout and the range of its values (never the values)."""

    model_config = ConfigDict(extra="forbid")

    shape: list[int]
    stride: list[int]
    dtype: str  # "float32", as torch.float32 prints without its prefix
    device: str
    kind: Literal["float", "int", "bool", "complex"]
    min: float | None = None  # finite values only
    max: float | None = None
    mean: float | None = None
    std: float | None = None
    p_true: float | None = None  # bool tensors: the share of True
    nonfinite: int = 0  # NaN/Inf elements in the captured tensor (get_inputs draws finite values)

    @property
    def contiguous(self) -> bool:
        expect, acc = [], 1
        for size in reversed(self.shape):
            expect.append(acc)
            acc *= max(size, 1)
        return all(sz <= 1 or st == e for sz, st, e in zip(self.shape, self.stride, reversed(expect)))

    def describe(self) -> str:
        text = f"{self.dtype}[{', '.join(map(str, self.shape))}]"
        if not self.contiguous:
            text += f" strides {tuple(self.stride)}"
        if self.kind == "bool" and self.p_true is not None:
            return f"{text}, {100 * self.p_true:.0f}% true"
        if self.min is not None and self.max is not None:
            return f"{text} in [{self.min:.4g}, {self.max:.4g}]"
        return text


class InputLeaf(BaseModel):
    """One leaf of the call's flattened (args, kwargs): a tensor the task takes, or a value export fixed."""

    model_config = ConfigDict(extra="forbid")

    path: str  # "args[0]", "kwargs['mask']"
    name: str | None = None  # the task's forward argument (tensors only)
    tensor: TensorSpec | None = None
    constant: str | None = None  # repr() of a non-tensor leaf, specialised into the graph


class OutputLeaf(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    description: str


class LeafCheck(BaseModel):
    """One output leaf of a comparison."""

    model_config = ConfigDict(extra="forbid")

    path: str
    ok: bool
    problem: str | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    worst_index: list[int] | None = None
    atol: float | None = None
    rtol: float | None = None


class OutputCheck(BaseModel):
    """Whether one output matches another within the tolerance for its dtype."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    leaves: list[LeafCheck] = Field(default_factory=list)
    problem: str | None = None  # structure: different kinds or numbers of outputs
    note: str | None = None  # passed by the rule against a higher-precision result (capture/check.py truth_rule)

    def summary(self) -> str:
        if self.problem:
            return self.problem
        if self.note:
            return self.note
        bad = [leaf for leaf in self.leaves if not leaf.ok]
        if bad:
            return "; ".join(f"{leaf.path}: {leaf.problem}" for leaf in bad[:4])
        errs = [leaf.max_abs_error for leaf in self.leaves if leaf.max_abs_error is not None]
        tols = sorted({f"atol {leaf.atol:g}, rtol {leaf.rtol:g}" for leaf in self.leaves if leaf.atol is not None})
        return f"max abs error {max(errs):.3g} ({'; '.join(tols)})" if errs else "equal"


class ReproductionCheck(BaseModel):
    """The written task against the captured call, before the task is kept."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    captured: OutputCheck | None = None  # Model on the captured inputs vs the captured output
    fresh_inputs: str | None = None  # how Model fared on get_inputs() (None: not reached)
    problem: str | None = None


class StateValue(BaseModel):
    """A non-tensor value a state object holds (a flag, a count), or where its tensors are."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["value", "device", "dtype", "absent"] = "value"  # device: the call's own device, on any machine
    value: bool | int | float | str | None = None


class StateUnit(BaseModel):
    """One object inside a state argument that the call read and wrote (``layers[0]`` of a transformers cache)."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="below the state argument: layers[0]")
    index_attr: str | None = Field(
        None,
        description="the module's attribute naming the index in path (layer_idx): "
        "another instance of the module reads and writes its own unit",
    )
    inputs: list[str] = Field(
        default_factory=list, description="tensor attributes the task takes as they were before the call"
    )
    outputs: list[str] = Field(
        default_factory=list, description="tensor attributes the call wrote, which the task returns"
    )
    before: dict[str, StateValue] = Field(
        default_factory=dict,
        description="other attributes before the call: a call "
        "whose unit differs is not the captured kind (a cache that already holds keys)",
    )
    after: dict[str, StateValue] = Field(default_factory=dict, description="what the call set them to")


class StateArg(BaseModel):
    """An argument that carries state from call to call (a transformers Cache), and what the call did to it."""

    model_config = ConfigDict(extra="forbid")

    leaf: str = Field(description="where in the call: kwargs['cache']")
    type: str = Field(description="its class: transformers.cache_utils.DynamicCache")
    units: list[StateUnit]


class RandomInput(BaseModel):
    """A dropout's mask among the task's inputs (True: kept), drawn with the captured drop rate."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="its key in kf_random: dropout_0, attention_dropout_1")
    p: float = Field(description="the drop rate")
    op: str


class CaptureManifest(BaseModel):
    """``TASK.capture.json``: where the task came from and how to call a kernel as the module was called."""

    model_config = ConfigDict(extra="forbid")

    format: str = MANIFEST_FORMAT
    kernelfix_version: str
    torch_version: str
    created_at: float
    script: str
    script_args: list[str] = Field(default_factory=list)
    module_path: str
    module_class: str
    call: int = Field(description="which call of the module was captured (1: the first)")
    device: str = Field(description="where the module ran when captured")
    training: bool
    grad_enabled: bool
    backward: bool = False  # the task says BACKWARD = True: grad enabled on trainable tensors (training)
    task: str  # file names, beside each other
    weights: str
    weights_sha256: str
    call_file: str | None = Field(
        None, description="the captured inputs and output, for load_best's check; never part of the task"
    )
    in_spec: str = Field(description="torch.utils._pytree.treespec_dumps of the call's (args, kwargs)")
    inputs: list[InputLeaf]
    outputs: list[OutputLeaf]
    # `--calls`: every captured call (the first is `call`, `inputs`, `outputs` and `check` above), each a set
    # of the task's get_input_sets(); empty for a capture of one call.
    calls: list[int] = Field(
        default_factory=list, description="the captured calls, one per input set (empty: `call` alone)"
    )
    input_sets: list[list[InputLeaf]] = Field(
        default_factory=list, description="each captured call's inputs, in `calls` order"
    )
    set_outputs: list[list[OutputLeaf]] = Field(default_factory=list)
    set_checks: list[ReproductionCheck] = Field(
        default_factory=list, description="each call reproduced by the task's Model"
    )
    graph_ops: dict[str, int] = Field(default_factory=dict, description="ATen operator -> count in the task's forward")
    check: ReproductionCheck
    notes: list[str] = Field(default_factory=list)
    state: list[StateArg] = Field(
        default_factory=list,
        description="arguments the call read and wrote (a cache): the "
        "task takes their tensors in kf_state and returns what the call wrote under kf_state",
    )
    random: list[RandomInput] = Field(
        default_factory=list,
        description="dropout masks the captured call drew, which "
        "the task takes in kf_random: a swapped kernel gets fresh ones at every call",
    )


class CaptureReport(BaseModel):
    """What `kernelfix capture --json` prints."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    exit_code: int
    error: str | None = None
    files: list[str] = Field(default_factory=list)
    manifest: CaptureManifest | None = None


class SwapCheck(BaseModel):
    """The swapped-in kernel against the captured call (or, without it, against the task's Model)."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    against: Literal["captured_call", "original_module", "task_model", "gradients"]
    output: OutputCheck
    note: str | None = None
    input_set: int | None = None  # which captured call (1-based set of get_input_sets()); None: the one call


class CompilePath(BaseModel):
    """How the swapped kernel runs under torch.compile (capture/compile_path.py)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["traced", "custom_op", "plain"] = Field(
        description="traced: Dynamo traces the kernel's forward (Triton launches, C++ operators and torch ops are graph nodes), "
        "checked on the captured calls; custom_op: one opaque custom operator; plain: traced as it is, unchecked (load_best(custom_op=False))"
    )
    note: str = Field(description="why this path")
    op: str | None = Field(None, description="the custom operator's name (custom_op)")
    kernels: list[str] = Field(
        default_factory=list, description="what the traced graph calls: Triton kernels, C++ operators"
    )
    backend: str | None = Field(None, description="the torch.compile backend the traced path was checked with")
    checks: list[SwapCheck] = Field(default_factory=list, description="the compiled kernel against each captured call")


class SwapReport(BaseModel):
    """What `kernelfix swap --json` prints."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    session: str
    task: str
    module_path: str
    best_turn: int | None = None
    speedup_eager: float | None = None
    snippet: str | None = None
    checks: list[SwapCheck] = Field(default_factory=list)
    compile_path: CompilePath | None = None
    error: str | None = None
