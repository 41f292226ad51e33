"""The swapped kernel, called as the captured module was (:class:`CapturedKernel`: eager, and under
torch.compile on the path capture/compile_path.py checked), and a call it is checked on (:class:`CheckCall`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.utils._pytree as pytree
from torch.compiler import is_compiling

from kernelfix.capture.calls import (
    CallPlans,
    compiled_call_tensors,
    compiled_signature,
    leaves_shape,
    output_layout,
    rebuild,
)
from kernelfix.capture.errors import CallMismatch
from kernelfix.capture.randomness import RANDOM_KEY, draw_masks
from kernelfix.capture.schema import CaptureManifest, CompilePath, SwapCheck
from kernelfix.capture.state_args import STATE_KEY
from kernelfix.capture.state_binding import StateBinding


class CapturedKernel(nn.Module):
    """A kernel called as the captured module was called."""

    def __init__(
        self,
        kernel: nn.Module,
        manifest: CaptureManifest,
        original: nn.Module | None = None,
        reference: nn.Module | None = None,
    ):
        """``reference``: the task's Model on the meta device (capture/custom_op.py); with it the kernel runs
        under torch.compile as a custom operator that torch.compile takes whole, without it as a plain call
        (which Dynamo traces, as :func:`load_best` does when it checked that this works)."""
        super().__init__()
        self.kernel = kernel
        self.original = original  # a submodule, so .to() moves it along; runs the calls the kernel was not judged on
        self.manifest = manifest
        self.checks: list[SwapCheck] = []
        self.fallbacks = 0  # eager calls handed to the original module
        self._in_spec = pytree.treespec_loads(manifest.in_spec) if manifest.in_spec else None
        self._sets = manifest.input_sets or [
            manifest.inputs
        ]  # every captured call's inputs: what the kernel was judged on
        self.calls = CallPlans(self._in_spec, self._sets)  # eager: the check's answer per kind of call
        # Under torch.compile: the captured calls as one tuple of plain tagged tuples, which Dynamo guards with
        # a single equality check (a list would cost a guard per item).
        self._signatures = (
            tuple(compiled_signature(self._in_spec, leaves) for leaves in self._sets)
            if self._in_spec is not None
            else ()
        )
        self._refusal = (
            f"{manifest.module_path}: torch.compile traced a call unlike every captured one, and there is no original module "
            f"to hand it to (kernelfix.load_best(session, original)); the kernel was judged on calls like {leaves_shape(self._sets[0])}"
        )
        # A call that passes a state object (a transformers cache) or draws dropout masks is rewritten as the task
        # takes it (capture/task_call.py): the state's tensors read, fresh masks drawn, the state written back after.
        self.state = StateBinding(manifest.state, instance=original) if manifest.state else None
        self._random = [(r.name, r.p, _mask_shape(self._sets[0], r.name)) for r in manifest.random]
        self._op = self._out_layout = None
        self.op_name: str | None = None
        self.extensions = None  # capture/cpp_ops.py's record of the kernel's load_inline extensions (load_best sets it)
        self.compile_path = CompilePath(
            kind="plain",
            note="the kernel's forward as it is, for Dynamo to trace (not checked: load_best(custom_op=False))",
        )
        if reference is not None:
            self.use_custom_op(reference)

    def use_custom_op(self, reference: nn.Module, note: str | None = None) -> None:
        """Run the kernel under torch.compile as one opaque custom operator (capture/custom_op.py)."""
        from kernelfix.capture.custom_op import op_name, register

        sample = [
            torch.empty(leaf.tensor.shape, dtype=getattr(torch, leaf.tensor.dtype), device="meta")
            for leaf in self.manifest.inputs
            if leaf.tensor
        ]
        self._op, out_spec, returned = register(
            self.kernel, reference, self.manifest.module_path, sample, backward=self.manifest.backward
        )
        self._out_layout = output_layout(
            out_spec, returned
        )  # rebuilt without pytree, which Dynamo would guard on every call
        self.op_name = op_name(self._op)
        self.compile_path = CompilePath(kind="custom_op", op=self.op_name, note=note or "asked for")

    def use_traced(self, path: CompilePath) -> None:
        """Let torch.compile trace the kernel's forward (checked by capture/compile_path.py)."""
        self._op = self._out_layout = None
        self.op_name = None
        self.compile_path = path

    def kernel_inputs(self, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        """The kernel's tensors from a call; CallMismatch when the call is unlike every captured one."""
        plan, tensors = self.calls.plan(args, kwargs)
        if plan.mismatch is not None:
            raise CallMismatch(plan.mismatch)
        return tensors

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if (self.state is not None or self._random) and not self._is_task_call(args, kwargs):
            return self._rewritten(args, kwargs)
        return self._run(args, kwargs)

    def _is_task_call(self, args: tuple, kwargs: dict) -> bool:
        """The call already in the task's form (load_best's check calls with the captured, rewritten call)."""
        if RANDOM_KEY in kwargs or STATE_KEY in kwargs:
            return True
        return self.state is not None and self.state.is_rewritten(args, kwargs)

    def _rewritten(self, args: tuple, kwargs: dict) -> Any:
        """The user's call with a state object or dropout: run as the task's call, the state written back after."""
        if self._random and not self.training:  # the kernel drops what the captured training call dropped
            return self._fall_back(
                "the kernel was captured in training, with dropout; in eval mode dropout keeps everything", args, kwargs
            )
        got = self.state.flat(args, kwargs) if self.state is not None else (args, dict(kwargs), [])
        if isinstance(
            got, str
        ):  # the state is not as captured (a cache that already holds keys): the module's own call
            return self._fall_back(got, args, kwargs)
        fargs, fkwargs, targets = got
        if self._random:
            device = next(
                (t.device for t in pytree.tree_leaves((fargs, fkwargs)) if isinstance(t, torch.Tensor)),
                torch.device("cpu"),
            )
            fkwargs[RANDOM_KEY] = draw_masks(self._random, device)
        out = self._run(fargs, fkwargs, real=(args, kwargs))
        if out is _FELL_BACK:
            return self._fallback_result
        return self.state.write_back(out, targets) if self.state is not None else out

    def _fall_back(self, why: str, args: tuple, kwargs: dict) -> Any:
        if self.original is None:
            raise CallMismatch(f"{self.manifest.module_path}: {why}")
        if not is_compiling():
            self.fallbacks += 1
            if self.fallbacks == 1:
                warnings.warn(f"{self.manifest.module_path}: {why}; such calls run the original module", stacklevel=3)
        return self.original(*args, **kwargs)

    def _run(self, args: tuple, kwargs: dict, real: tuple[tuple, dict] | None = None) -> Any:
        """The kernel on a call in the task's form; a call unlike every captured one runs the original module on
        ``real`` (the user's own call, when this one was rewritten from it) and gives _FELL_BACK then."""
        if is_compiling():
            # The call as Dynamo traces it, written to add as few guards to a compiled call as can be (each is
            # checked before every call; docs/capture.md, "What a swap costs"): the match is comparisons Dynamo
            # decides while tracing (no exception text, no dict of answers), reading one tuple of signatures;
            # the code is inline here rather than in methods (each method looked up on self is a guard);
            # `is_compiling` is imported, since reading `torch` here as well as in the kernel's module gives
            # the torch module a second source, an object-aliasing guard that Dynamo evaluates in Python.
            tensors = compiled_call_tensors(self._signatures, args, kwargs)
            if tensors is None:
                if self.original is None:
                    raise CallMismatch(self._refusal)
                if real is not None:
                    self._fallback_result = self.original(*real[0], **real[1])
                    return _FELL_BACK
                return self.original(*args, **kwargs)  # not counted: Python state would cost a recompile per call
            if self._op is None:
                return self.kernel(*tensors)
            return self._operator_call(tensors)
        plan, tensors = self.calls.plan(args, kwargs)
        if plan.mismatch is None:
            return self.kernel(*tensors)
        if real is not None:
            self._fallback_result = self._fall_back(plan.mismatch, *real)
            return _FELL_BACK
        return self._fall_back(plan.mismatch, args, kwargs)

    def _operator_call(self, tensors: list[torch.Tensor]) -> Any:
        """The kernel as the custom operator, under torch.compile (capture/custom_op.py)."""
        if self.manifest.backward:  # the operator's autograd formula runs the kernel's own backward
            return rebuild(
                self._out_layout, self._op(tensors, [p for p in self.kernel.parameters() if p.requires_grad])
            )
        return rebuild(self._out_layout, self._op(tensors))

    def extra_repr(self) -> str:
        return f"captured={self.manifest.module_path!r}, compiled={self.compile_path.kind}, fallbacks={self.fallbacks}"


_FELL_BACK = object()  # _run's answer when the original module ran the user's call instead


def _mask_shape(leaves: list, name: str) -> tuple[int, ...]:
    """The shape of the dropout mask ``name`` among a captured call's inputs."""
    for leaf in leaves:
        if leaf.path == f"kwargs['{RANDOM_KEY}']['{name}']" and leaf.tensor is not None:
            return tuple(leaf.tensor.shape)
    raise ValueError(f"the capture lists the dropout mask {name} but no input holds it")


@dataclass
class CheckCall:
    """One call the swap is checked on, and the output it must give."""

    args: tuple
    kwargs: dict
    want: Any
    against: str  # what ``want`` is: "captured_call" or "task_model"
    input_set: int | None = None
    note: str | None = None
