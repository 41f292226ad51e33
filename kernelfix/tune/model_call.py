"""The user's model and one call of it, from their script: what tune profiles, checks and times.

The script runs as `kernelfix capture` runs it (capture/script.py). The model is the first module the
script calls at the top level (not from inside another module's forward); with ``need_grad``
(--backward), the first called with gradients enabled (a warm-up or an evaluation under torch.no_grad is
passed over). Its name is the script's variable that holds it, which begins every module path
(``model.blocks.0.attn``), as capture's paths do. The script stops once that call has returned.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Iterator
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


def free_memory() -> None:
    """Collect what held a dropped model (cycles included) and give the GPU memory it had back."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@contextlib.contextmanager
def collections_skip_what_was_there() -> Iterator[None]:
    """Objects alive before a tune began (torch's, transformers' and the process's own: hundreds of thousands) cannot
    hold the script's model, so the tune's collections leave them out (``gc.freeze``): each scanned them all, about
    0.3 s of CPU, four times or more per tune. A process that froze objects itself keeps its own."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@dataclass
class ModelCall:
    module: nn.Module
    name: str
    args: tuple
    kwargs: dict
    grad_enabled: bool
    trainable: bool  # a parameter requires grad
    autocast: list[str] = field(default_factory=list)
    requires_grad: list[bool] = field(default_factory=list)  # per tensor leaf of (args, kwargs), as called
    trains: bool = False  # the script called backward() on a result of this call (or --backward said so)
    why: str = ""  # how that was decided, in words
    state_args: list = field(
        default_factory=list
    )  # capture.state_args.Recorded: a cache passed in, as it was before the call

    @property
    def device(self) -> torch.device:
        for t in [*self.module.parameters(), *self.module.buffers(), *_tensors((self.args, self.kwargs))]:
            return t.device
        return torch.device("cpu")

    def call_args(self) -> tuple[tuple, dict]:
        """The call's arguments, floating inputs that required grad requiring it again (detached copies do not), and
        every state object (a cache passed in) put back as it was before the recorded call: each replay meets the
        same state."""
        from kernelfix.capture.state_binding import restore

        restore(self.state_args)
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

    def to(self, device: torch.device) -> None:
        """The model and its recorded call on ``device``: tensors in the arguments (nested in tuples, lists, dicts and
        plain objects such as a transformers cache) and what the state objects held before the call."""
        from kernelfix.capture.state_args import Snapshot, resolve

        self.module.to(device)
        self.args, self.kwargs = pytree.tree_map(
            lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, (self.args, self.kwargs)
        )
        for x in pytree.tree_leaves((self.args, self.kwargs)):
            if not isinstance(x, torch.Tensor) and hasattr(x, "__dict__") and not isinstance(x, nn.Module):
                for path, held in Snapshot.take(x).held.items():
                    if held.tensor and path:
                        owner = resolve(x, path[:-1])
                        moved = held.value.to(device)
                        if isinstance(owner, (list, dict)):
                            owner[path[-1]] = moved
                        elif not isinstance(owner, tuple):
                            setattr(owner, path[-1], moved)
        for r in self.state_args:
            r.before_values = {
                k: v.to(device) if isinstance(v, torch.Tensor) else (device if isinstance(v, torch.device) else v)
                for k, v in r.before_values.items()
            }


def describe_call(args: tuple, kwargs: dict) -> list[str]:
    """``["args[0]: int64[2, 8]", "kwargs['mask']: bool[8, 8]"]``: each tensor's dtype and shape, other values as they are."""
    flat, _ = pytree.tree_flatten_with_path((tuple(args), dict(kwargs)))
    out = []
    for path, x in flat:
        where = pytree.keystr(path)
        where = (
            "args" + where[3:]
            if where.startswith("[0]")
            else "kwargs" + where[3:]
            if where.startswith("[1]")
            else where
        )
        out.append(
            f"{where}: {dtype_name(x.dtype)}[{', '.join(map(str, x.shape))}]"
            if isinstance(x, torch.Tensor)
            else f"{where}: {x!r}"
        )
    return out


def _tensors(obj: Any) -> list[torch.Tensor]:
    return [x for x in pytree.tree_leaves(obj) if isinstance(x, torch.Tensor)]


def _variable_holding(module: nn.Module) -> str | None:
    """The variable (local, then global) bound to ``module`` in the user's own code: the innermost such frame outside
    installed libraries first (a model called from inside ``generate()`` is ``model`` in the script, not ``self``)."""
    found: list[tuple[bool, str]] = []
    frame = sys._getframe(2)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            library = "site-packages" in frame.f_code.co_filename or "dist-packages" in frame.f_code.co_filename
            for scope in (frame.f_locals, frame.f_globals):
                for name, value in scope.items():
                    if (
                        value is module
                        and name.isidentifier()
                        and not name.startswith("__")
                        and name not in ("self", "cls")
                    ):
                        found.append((library, name))
        frame = frame.f_back
    found.sort(key=lambda x: x[0])  # stable: the innermost of the user's own frames first
    return found[0][1] if found else None


def run_to_model_call(
    script: str | Path,
    script_args: list[str] | tuple[str, ...] = (),
    *,
    backward: bool | None = None,
    need_grad: bool | None = None,
) -> ModelCall:
    """Run ``script`` to its model's first call, then on until it shows whether that call is a training step.

    A run is a training step when the script calls ``backward()`` (``torch.autograd.backward``, ``grad``) on a tensor
    computed from the model's result: the script is stopped there, before the backward runs. It is inference when
    the model ran without gradients, or when the script calls the model again, or ends, without such a backward.
    ``backward`` (--backward): True takes the first call made with gradients enabled as a training step (a warm-up
    or an evaluation under torch.no_grad before it is passed over); False takes the first call as a forward."""
    if need_grad is not None:  # the earlier name of backward=True
        backward = backward if backward is not None else (True if need_grad else None)
    script = Path(script)
    if not script.is_file():
        raise CaptureInputError(f"no such script: {script}")
    from kernelfix.capture.script import call_kwargs
    from kernelfix.capture.state_args import record_before

    depth = 0
    found: list[ModelCall] = []
    pending: dict[str, Any] = {}
    passed_over = 0
    first: list[nn.Module] = []
    outputs: list[Any] = []  # the grad_fns of the model's result
    decided: list[tuple[bool, str]] = []

    def pre_hook(module: nn.Module, args: tuple) -> None:
        nonlocal depth, passed_over
        depth += 1
        if depth != 1 or pending:
            return
        if found:  # the model again, and no backward since: the first call was inference
            if module is found[0].module:
                decided.append((False, "inference: called again, no backward() on its result"))
                raise StopScript
            return
        if backward and not torch.is_grad_enabled():
            passed_over += 1  # a warm-up or an evaluation: the training step's call is the one
            first[:1] = first or [module]
            return
        if first and module is not first[0] and not backward:
            return  # the model is the first top-level module called: later top-level calls of others (a loss) are not it
        first[:1] = [module]
        kw = call_kwargs(module)
        pending.update(
            module=module,
            args=detach_tree(args),
            kwargs=detach_tree(kw),
            name=_variable_holding(module),
            grad=torch.is_grad_enabled(),
            autocast=[d for d in ("cpu", "cuda") if torch.is_autocast_enabled(d)],
            requires_grad=[x.requires_grad for x in _tensors((args, kw))],
            state=record_before(args, kw),
        )

    def post_hook(module: nn.Module, args: tuple, *rest: Any) -> None:
        nonlocal depth
        depth -= 1
        if depth != 0 or not pending or module is not pending["module"]:
            return
        if len(rest) != 2:  # its forward raised: the script sees that itself
            pending.clear()
            return
        kwargs, output = rest
        p = dict(pending)
        pending.clear()
        found.append(
            ModelCall(
                module=module,
                name=p["name"] or DEFAULT_NAME,
                args=p["args"],
                kwargs=p["kwargs"] if p["kwargs"] or not kwargs else detach_tree(kwargs),
                grad_enabled=p["grad"],
                trainable=any(q.requires_grad for q in module.parameters()),
                autocast=p["autocast"],
                requires_grad=p["requires_grad"],
                state_args=p["state"],
            )
        )
        if backward is True:
            decided.append((True, "a training step: --backward"))
            raise StopScript
        if backward is False:
            decided.append((False, "a forward: --no-backward"))
            raise StopScript
        fns = [t.grad_fn for t in _tensors(output) if t.grad_fn is not None]
        if not p["grad"] or not fns:
            how = (
                "torch.inference_mode()"
                if torch.is_inference_mode_enabled()
                else "torch.no_grad()"
                if not p["grad"]
                else "no gradient"
            )
            decided.append(
                (
                    False,
                    f"inference: under {how}" if how != "no gradient" else "inference: its result needs no gradient",
                )
            )
            raise StopScript
        outputs.extend(fns)  # run on: does the script call backward() on something computed from it?

    def reaches(tensors: Any) -> bool:
        want = {id(f) for f in outputs}
        todo = [t.grad_fn for t in _tensors(tensors) if t.grad_fn is not None]
        seen: set[int] = set()
        while todo:
            fn = todo.pop()
            if fn is None or id(fn) in seen:
                continue
            if id(fn) in want:
                return True
            seen.add(id(fn))
            todo.extend(f for f, _ in fn.next_functions)
        return False

    def watch(real, name: str):
        def patched(tensors, *a, **k):
            if outputs and not decided and reaches(tensors):
                where = _user_line()
                decided.append((True, f"a training step: {name} on its result{where}"))
                raise StopScript
            return real(tensors, *a, **k)

        return patched

    saved = (torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad)
    torch.Tensor.backward = watch(saved[0], "backward()")
    torch.autograd.backward = watch(saved[1], "torch.autograd.backward()")
    torch.autograd.grad = watch(saved[2], "torch.autograd.grad()")
    try:
        run_script(script, script_args, pre_hook, post_hook, waiting_for="calling its model")
    finally:
        torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad = saved
    if found:
        call = found[0]
        if type(call.module).__name__ == "OptimizedModule":
            raise CaptureInputError(
                f"{script} calls its model through torch.compile: tune ranks and swaps the eager model. "
                "Give tune a script that calls the model itself (compile it after tuning)"
            )
        call.trains, call.why = (
            decided[0] if decided else (False, "inference: the script never calls backward() on its result")
        )
        outputs.clear()  # the autograd graph of the watched call: its memory is not needed any more
        return call
    if first and passed_over:
        raise CaptureInputError(
            f"{script} calls {type(first[0]).__name__} only without gradients (torch.no_grad or inference mode): "
            "--backward ranks a training step; give the script a training step (a forward with gradients enabled)"
        )
    raise CaptureInputError(
        f"{script} ran to its end without calling a module (tune needs a script that runs its model)"
    )


def _user_line() -> str:
    """`` at train.py:23``: where the user's code made the call being watched."""
    frame = sys._getframe(2)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return f" at {Path(frame.f_code.co_filename).name}:{frame.f_lineno}"
        frame = frame.f_back
    return ""
