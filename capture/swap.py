"""Put a session's best kernel back into the user's model.

    model.blocks[0].mlp = kernelfix.load_best("sessions/mlp", model.blocks[0].mlp)

load_best builds the session's best ``ModelNew`` with the captured weights and
wraps it in :class:`CapturedKernel`, which takes the call as the captured module
took it (positional and keyword arguments, nested structures) and hands the
kernel its tensors, through a custom operator (capture/custom_op.py) so that
``torch.compile(model, fullgraph=True)`` compiles the model without a graph
break. A call unlike every captured one (another shape or dtype, another value
where export fixed one) is not what the kernel was judged on: it raises, or runs
the original module when one was given.
"""

from __future__ import annotations

import ast
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.utils._pytree as pytree

from kernelfix.capture.check import compare_outputs
from kernelfix.capture.errors import CallMismatch, SwapCheckFailed, SwapError
from kernelfix.capture.files import CaptureFiles, import_file
from kernelfix.capture.records import CaptureManifest, InputLeaf, OutputCheck, SwapCheck
from kernelfix.capture.tensors import dtype_name
from kernelfix.tools.config import JudgeConfig


class CapturedKernel(nn.Module):
    """A kernel called as the captured module was called."""

    def __init__(self, kernel: nn.Module, manifest: CaptureManifest, original: nn.Module | None = None, reference: nn.Module | None = None):
        """``reference``: the task's Model on the meta device (capture/custom_op.py); with it the kernel runs
        as a custom operator that torch.compile takes whole, without it as a plain call."""
        super().__init__()
        self.kernel = kernel
        self.original = original  # a submodule, so .to() moves it along; runs the calls the kernel was not judged on
        self.manifest = manifest
        self.checks: list[SwapCheck] = []
        self.fallbacks = 0  # calls handed to the original module
        self._in_spec = pytree.treespec_loads(manifest.in_spec) if manifest.in_spec else None
        self._sets = manifest.input_sets or [manifest.inputs]  # every captured call's inputs: what the kernel was judged on
        # The calls' signatures as plain tuples: torch.compile traces this check without a graph break.
        self._signatures = [_signature(leaves) for leaves in self._sets]
        self._op = self._out_spec = None
        self.op_name: str | None = None
        if reference is not None:
            from kernelfix.capture.custom_op import register

            sample = [torch.empty(leaf.tensor.shape, dtype=getattr(torch, leaf.tensor.dtype), device="meta") for leaf in manifest.inputs if leaf.tensor]
            self._op, self._out_spec = register(kernel, reference, manifest.module_path, sample, backward=manifest.backward)
            self.op_name = self._op._qualname

    def kernel_inputs(self, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        """The kernel's tensors from a call; CallMismatch when the call is unlike every captured one."""
        if self._in_spec is None:
            raise CallMismatch("the capture could not record the call's structure")
        flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
        if spec == self._in_spec:
            sig = tuple((x.dtype, tuple(x.shape)) if isinstance(x, torch.Tensor) else x for x in flat)
            if sig in self._signatures:
                return [x for x in flat if isinstance(x, torch.Tensor)]
        errors = []
        for leaves in self._sets:  # the slow path, for its message (and keywords in another order)
            try:
                return match_call(self._in_spec, leaves, args, kwargs)
            except CallMismatch as e:
                errors.append(str(e))
        raise CallMismatch(errors[0] if len(errors) == 1 else "; ".join(f"captured call {k}: {e}" for k, e in enumerate(errors, start=1)))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        try:
            tensors = self.kernel_inputs(args, kwargs)
        except CallMismatch as e:
            if self.original is None:
                raise CallMismatch(f"{self.manifest.module_path}: {e}") from None
            self.fallbacks += 1
            if self.fallbacks == 1 and not torch.compiler.is_compiling():
                warnings.warn(f"{self.manifest.module_path}: {e}; such calls run the original module", stacklevel=2)
            return self.original(*args, **kwargs)
        if self._op is None:
            return self.kernel(*tensors)
        if self.manifest.backward:  # the operator's autograd formula runs the kernel's own backward
            return pytree.tree_unflatten(self._op(tensors, [p for p in self.kernel.parameters() if p.requires_grad]), self._out_spec)
        return pytree.tree_unflatten(self._op(tensors), self._out_spec)

    def extra_repr(self) -> str:
        return f"captured={self.manifest.module_path!r}, fallbacks={self.fallbacks}"


def match_call(in_spec: pytree.TreeSpec, leaves: list[InputLeaf], args: tuple, kwargs: dict) -> list[torch.Tensor]:
    flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    if spec != in_spec:
        keys = _captured_keywords(in_spec)
        if keys is not None and set(keys) == set(kwargs):  # the same keywords, in another order
            flat, spec = pytree.tree_flatten((tuple(args), {k: kwargs[k] for k in keys}))
    if spec != in_spec:
        raise CallMismatch(f"called with {_call_shape(args, kwargs)}; the kernel was judged on calls like {_leaves_shape(leaves)}")
    tensors = []
    for leaf, value in zip(leaves, flat):
        if leaf.tensor is None:
            if repr(value) != leaf.constant:
                raise CallMismatch(f"{leaf.path} is {value!r}; the capture fixed it to {leaf.constant}")
            continue
        if not isinstance(value, torch.Tensor):
            raise CallMismatch(f"{leaf.path} is a {type(value).__name__}, not a tensor")
        got = f"{dtype_name(value.dtype)}[{', '.join(map(str, value.shape))}]"
        want = f"{leaf.tensor.dtype}[{', '.join(map(str, leaf.tensor.shape))}]"
        if got != want:
            raise CallMismatch(f"{leaf.path} is {got}; the kernel was judged on {want}")
        tensors.append(value)
    return tensors


def _signature(leaves: list[InputLeaf]) -> tuple:
    """A call's leaves as (dtype, shape) per tensor and the value of each fixed one, for a fast match."""
    out: list[Any] = []
    for leaf in leaves:
        if leaf.tensor is not None:
            out.append((getattr(torch, leaf.tensor.dtype), tuple(leaf.tensor.shape)))
        else:
            try:
                out.append(ast.literal_eval(leaf.constant or "None"))
            except (ValueError, SyntaxError):
                out.append(object())  # matches nothing: such calls take the slow path, which compares reprs
    return tuple(out)


def _captured_keywords(in_spec: pytree.TreeSpec) -> list[str] | None:
    children = in_spec.children() if hasattr(in_spec, "children") else in_spec.children_specs
    return list(children[1].context) if len(children) == 2 and children[1].type is dict else None


def _call_shape(args: tuple, kwargs: dict) -> str:
    def one(x: Any) -> str:
        return f"{dtype_name(x.dtype)}[{', '.join(map(str, x.shape))}]" if isinstance(x, torch.Tensor) else repr(x)

    parts = [one(a) if not isinstance(a, (list, tuple, dict)) else str(pytree.tree_map(one, a)) for a in args]
    parts += [f"{k}={one(v) if not isinstance(v, (list, tuple, dict)) else pytree.tree_map(one, v)}" for k, v in kwargs.items()]
    return f"({', '.join(parts)})"


def _leaves_shape(leaves: list[InputLeaf]) -> str:
    return "(" + ", ".join(f"{leaf.path}={leaf.tensor.describe().split(' in ')[0] if leaf.tensor else leaf.constant}" for leaf in leaves) + ")"


# --------------------------------------------------------------------------- loading


class SessionKernel:
    """What load_best reads from a session: its settings, the capture manifest, the best kernel's source."""

    def __init__(self, session_dir: str | Path):
        from kernelfix.agent.session import SessionDir, SessionError

        try:
            self.store = SessionDir.open(session_dir)
        except SessionError as e:
            raise SwapError(str(e)) from None
        self.files = CaptureFiles(Path(self.store.settings.task_path))
        if not self.files.manifest.is_file():
            raise SwapError(
                f"the session's task {self.files.task} was not made by `kernelfix capture` (no {self.files.manifest.name} beside it): "
                "there is no captured module to put the kernel back into"
            )
        try:
            self.manifest = self.files.read_manifest()
        except (OSError, ValueError) as e:
            raise SwapError(f"cannot read {self.files.manifest}: {str(e).splitlines()[0]}") from None
        self.best = self.store.path / "best.py"
        traj = self.store.read_trajectory()
        self.best_turn = traj.outcome.best_turn if traj else None
        self.speedup_eager = traj.outcome.best_speedup_eager if traj else None

    @property
    def judge_config(self) -> JudgeConfig:
        return self.store.settings.judge


def load_best(
    session_dir: str | Path,
    original: nn.Module | None = None,
    *,
    device: str | torch.device | None = None,
    check: bool = True,
    custom_op: bool = True,
) -> CapturedKernel:
    """The session's best kernel as a module that replaces the captured one.

    ``original``: the module being replaced; calls unlike the captured one run it, and the check
    also compares against it. ``device``: default the one the module was captured on (CPU when
    that is not here; Triton kernels then run in its interpreter). ``check``: run the kernel on the
    captured call (TASK.call.pt, else inputs from get_inputs()) and raise SwapCheckFailed unless it
    matches within the judge's tolerance (at every captured call, for a task captured with --calls).
    ``custom_op``: run the kernel as a custom operator with a fake implementation (capture/custom_op.py),
    so ``torch.compile(model, fullgraph=True)`` compiles the model without a graph break.
    Raises SwapError when there is nothing to load.
    """
    sk = SessionKernel(session_dir)
    if not sk.best.is_file():
        raise SwapError(f"session {sk.store.path} has no correct kernel yet (no best.py)")
    dev = torch.device(device) if device is not None else _usable(sk.manifest.device)
    source = sk.best.read_text(encoding="utf-8")
    if dev.type == "cpu" and "triton" in source:
        _triton_interpreter()
    task = import_file(sk.store.task_path, "kernelfix_task")
    try:
        best = import_file(sk.best, "kernelfix_best")
        kernel = best.ModelNew(*task.get_init_inputs()).to(dev)
    except Exception as e:
        raise SwapError(f"cannot build the best kernel of {sk.store.path}: {type(e).__name__}: {e}") from e
    reference = None
    if custom_op:
        from kernelfix.capture.custom_op import meta_reference

        try:
            reference = meta_reference(task.Model(*task.get_init_inputs()))
        except Exception as e:
            raise SwapError(f"cannot build the task's Model for the kernel's shape rule: {type(e).__name__}: {e}") from e
    module = CapturedKernel(kernel, sk.manifest, original, reference)
    if check:
        module.checks = swap_checks(module, sk, task, dev)
        failed = [c for c in module.checks if not c.ok]
        if failed:
            raise SwapCheckFailed(
                f"the best kernel of {sk.store.path} does not reproduce {sk.manifest.module_path}: "
                + "; ".join(f"against the {c.against.replace('_', ' ')}: {c.output.summary()}" for c in failed),
                module.checks,
            )
    return module


def _triton_interpreter() -> None:
    """Triton runs on the CPU only in its interpreter, which is chosen when triton.language is first imported."""
    tl = sys.modules.get("triton.language")
    if tl is None:
        os.environ["TRITON_INTERPRET"] = "1"
    elif type(getattr(tl, "sigmoid", None)).__name__ == "JITFunction":
        raise SwapError(
            "the kernel is Triton, which runs on the CPU only in Triton's interpreter, and this process imported "
            "triton without it: set TRITON_INTERPRET=1 in the environment, or load the kernel on a GPU"
        )


def _usable(device: str) -> torch.device:
    dev = torch.device(device)
    return dev if dev.type != "cuda" or torch.cuda.is_available() else torch.device("cpu")


def swap_checks(module: CapturedKernel, sk: SessionKernel, task, dev: torch.device) -> list[SwapCheck]:
    """The kernel, called as the module was, against the captured output and the original module."""
    m = sk.manifest
    cfg = sk.judge_config
    call_file = sk.files.call if m.call_file else None
    checks = []
    multi = len(m.input_sets) > 1
    with torch.no_grad():
        if call_file is not None and call_file.is_file():
            saved = torch.load(call_file, map_location=dev, weights_only=True)
            for k, one in enumerate(saved.get("sets") or [saved], start=1):  # every captured call
                args, kwargs = pytree.tree_unflatten(one["leaves"], module._in_spec)
                got = module(*args, **kwargs)
                checks.append(_check("captured_call", compare_outputs(got, one["output"], cfg), input_set=k if multi else None))
                if module.original is not None:
                    checks.append(_check("original_module", compare_outputs(got, module.original(*args, **kwargs), cfg), input_set=k if multi else None))
        else:
            model = task.Model(*task.get_init_inputs()).to(dev)
            for k in range(1, len(m.input_sets) + 1) if multi else [None]:
                args, kwargs = _drawn_call(m, task, dev, module._in_spec, k)
                got = module(*args, **kwargs)
                ref = model(*module.kernel_inputs(args, kwargs))
                note = "no captured call kept (TASK.call.pt): compared on inputs from get_inputs()" + ("" if k is None else f" (set {k} of get_input_sets())")
                checks.append(_check("task_model", compare_outputs(got, ref, cfg), note, input_set=k))
                if module.original is not None:
                    checks.append(_check("original_module", compare_outputs(got, module.original(*args, **kwargs), cfg), input_set=k))
    if module.fallbacks:
        raise SwapError("the check's own call ran the original module: the captured call no longer matches the capture's record")
    return checks


def _check(against: str, output: OutputCheck, note: str | None = None, input_set: int | None = None) -> SwapCheck:
    return SwapCheck(ok=output.ok, against=against, output=output, note=note, input_set=input_set)


def _drawn_call(m: CaptureManifest, task, dev: torch.device, in_spec: pytree.TreeSpec | None, input_set: int | None = None) -> tuple[tuple, dict]:
    """A call of the captured kind with tensors from get_inputs() (or one set of get_input_sets()) and the fixed values as captured."""
    if in_spec is None:
        raise SwapError("the capture could not record the call's structure, and no captured call was kept: nothing to check with")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        drawn = iter([t.to(dev) for t in (task.get_inputs() if input_set is None else task.get_input_sets()[input_set - 1])])
    leaves = []
    for leaf in m.inputs:
        if leaf.tensor is not None:
            leaves.append(next(drawn))
            continue
        try:
            leaves.append(ast.literal_eval(leaf.constant or "None"))
        except (ValueError, SyntaxError):
            raise SwapError(f"{leaf.path} was {leaf.constant}, which cannot be rebuilt without the captured call") from None
    return pytree.tree_unflatten(leaves, in_spec)


def snippet(module_path: str, session_dir: str | Path) -> str:
    """The lines that put the kernel in the user's model (a custom operator: torch.compile takes it whole)."""
    target = attribute_path(module_path)
    return (
        f"import kernelfix\n{target} = kernelfix.load_best({str(session_dir)!r}, {target})\n"
        "# the kernel runs as a custom operator: torch.compile(model, fullgraph=True) compiles it without a graph break"
    )


def attribute_path(module_path: str) -> str:
    """model.blocks.0.mlp -> model.blocks[0].mlp"""
    head, *rest = module_path.split(".")
    out = head
    for part in rest:
        out += f"[{part}]" if part.isdigit() else f".{part}" if part.isidentifier() else f"[{part!r}]"
    return out
