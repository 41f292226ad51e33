"""The user's model and one call of it, from their script: what tune profiles, checks and times.

The script runs as `kernelfix capture` runs it (capture/script.py). The model is the first module the
script calls at the top level (not from inside another module's forward); with ``need_grad``
(--backward), the first called with gradients enabled (a warm-up or an evaluation under torch.no_grad is
passed over). Its name is the script's variable that holds it, which begins every module path
(``model.blocks.0.attn``), as capture's paths do. The script stops once that call has returned.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.utils._pytree as pytree

from kernelfix.capture.errors import CaptureInputError
from kernelfix.capture.script import StopScript, is_user_file, run_script
from kernelfix.capture.tensors import detach_tree, dtype_name

DEFAULT_NAME = "model"  # when no variable holds it: capture then resolves PATH below the top-level call


@dataclass
class ModelCall:
    module: nn.Module
    name: str
    args: tuple
    kwargs: dict
    grad_enabled: bool
    trainable: bool  # a parameter requires grad (with grad enabled: the script trains)
    autocast: list[str] = field(default_factory=list)
    requires_grad: list[bool] = field(default_factory=list)  # per tensor leaf of (args, kwargs), as called

    @property
    def device(self) -> torch.device:
        for t in [*self.module.parameters(), *self.module.buffers(), *_tensors((self.args, self.kwargs))]:
            return t.device
        return torch.device("cpu")

    @property
    def trains(self) -> bool:
        return self.grad_enabled and self.trainable

    def call_args(self) -> tuple[tuple, dict]:
        """The call's arguments, floating inputs that required grad requiring it again (detached copies do not)."""
        flat, spec = pytree.tree_flatten((self.args, self.kwargs))
        it = iter(self.requires_grad)
        out = []
        for x in flat:
            if isinstance(x, torch.Tensor):
                x = x.requires_grad_(True) if next(it, False) and x.is_floating_point() else x
            out.append(x)
        return pytree.tree_unflatten(out, spec)

    def signature(self) -> list[str]:
        return describe_call(self.args, self.kwargs)


def describe_call(args: tuple, kwargs: dict) -> list[str]:
    """``["args[0]: int64[2, 8]", "kwargs['mask']: bool[8, 8]"]``: each tensor's dtype and shape, other values as they are."""
    flat, _ = pytree.tree_flatten_with_path((tuple(args), dict(kwargs)))
    out = []
    for path, x in flat:
        where = pytree.keystr(path)
        where = "args" + where[3:] if where.startswith("[0]") else "kwargs" + where[3:] if where.startswith("[1]") else where
        out.append(f"{where}: {dtype_name(x.dtype)}[{', '.join(map(str, x.shape))}]" if isinstance(x, torch.Tensor) else f"{where}: {x!r}")
    return out


def _tensors(obj: Any) -> list[torch.Tensor]:
    return [x for x in pytree.tree_leaves(obj) if isinstance(x, torch.Tensor)]


def _variable_holding(module: nn.Module) -> str | None:
    """The innermost user frame's variable (local, then global) bound to ``module``."""
    frame = sys._getframe(2)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            for scope in (frame.f_locals, frame.f_globals):
                for name, value in scope.items():
                    if value is module and name.isidentifier() and not name.startswith("__"):
                        return name
        frame = frame.f_back
    return None


def run_to_model_call(script: str | Path, script_args: list[str] | tuple[str, ...] = (), *, need_grad: bool = False) -> ModelCall:
    """Run ``script`` until its model's first call (with gradients, when ``need_grad``) has returned."""
    script = Path(script)
    if not script.is_file():
        raise CaptureInputError(f"no such script: {script}")
    depth = 0
    found: list[ModelCall] = []
    pending: dict[str, Any] = {}
    passed_over = 0
    first: list[nn.Module] = []

    def pre_hook(module: nn.Module, args: tuple) -> None:
        nonlocal depth, passed_over
        depth += 1
        if depth != 1 or found or pending:
            return
        if need_grad and not torch.is_grad_enabled():
            passed_over += 1  # a warm-up or an evaluation: the training step's call is the one
            first[:1] = first or [module]
            return
        if first and module is not first[0] and not need_grad:
            return  # the model is the first top-level module called: later top-level calls of others (a loss) are not it
        first[:1] = [module]
        pending.update(
            module=module, args=detach_tree(args), name=_variable_holding(module), grad=torch.is_grad_enabled(),
            autocast=[d for d in ("cpu", "cuda") if torch.is_autocast_enabled(d)],
            requires_grad=[x.requires_grad for x in _tensors(args)],
        )

    def post_hook(module: nn.Module, args: tuple, *rest: Any) -> None:
        nonlocal depth
        depth -= 1
        if depth != 0 or not pending or module is not pending["module"]:
            return
        if len(rest) != 2:  # its forward raised: the script sees that itself
            pending.clear()
            return
        kwargs, _ = rest
        p = dict(pending)
        pending.clear()
        found.append(
            ModelCall(
                module=module, name=p["name"] or DEFAULT_NAME, args=p["args"], kwargs=detach_tree(kwargs), grad_enabled=p["grad"],
                trainable=any(q.requires_grad for q in module.parameters()), autocast=p["autocast"],
                requires_grad=p["requires_grad"] + [x.requires_grad for x in _tensors(kwargs)],
            )
        )
        raise StopScript

    run_script(script, script_args, pre_hook, post_hook, waiting_for="calling its model")
    if found:
        call = found[0]
        if type(call.module).__name__ == "OptimizedModule":
            raise CaptureInputError(
                f"{script} calls its model through torch.compile: tune ranks and swaps the eager model. "
                "Give tune a script that calls the model itself (compile it after tuning)"
            )
        return call
    if first and passed_over:
        raise CaptureInputError(
            f"{script} calls {type(first[0]).__name__} only without gradients (torch.no_grad or inference mode): "
            "--backward ranks a training step; give the script a training step (a forward with gradients enabled)"
        )
    raise CaptureInputError(f"{script} ran to its end without calling a module (tune needs a script that runs its model)")
