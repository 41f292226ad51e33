"""Run the user's script and record one call of one of its submodules.

The script runs in this process, as ``python SCRIPT ARGS`` would run it
(``__main__``, its directory first on sys.path, its own argv). Two global
module hooks watch every module call: the pre-hook finds the module PATH names
and, at the chosen call, copies its inputs and its parameters and buffers
before the call can change them; the post-hook takes the output and stops the
script there, so nothing after the captured call runs.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
import sysconfig
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.utils._pytree as pytree

import kernelfix.base.version
from kernelfix.capture.errors import CaptureInputError
from kernelfix.capture.randomness import RandomDraws
from kernelfix.capture.state_args import record_after, record_before
from kernelfix.capture.tensors import clone_like, detach_tree

# Code that is never the user's: torch, kernelfix itself, the standard library (runpy among it).
_NOT_USER = tuple(
    str(Path(p).resolve()) + os.sep
    for p in (Path(torch.__file__).parent, Path(kernelfix.base.version.__file__).parent, Path(__file__).parent)
)
_STDLIB = str(Path(sysconfig.get_paths()["stdlib"]).resolve()) + os.sep


def is_user_file(filename: str) -> bool:
    """The user's code (their script, their model's library), not torch's, kernelfix's or Python's own."""
    if filename.startswith("<"):  # <frozen runpy>, <string>
        return False
    path = os.path.realpath(filename)
    if path.startswith(_NOT_USER):
        return False
    return not path.startswith(_STDLIB) or "site-packages" in path or "dist-packages" in path


def shown_path(path: str | Path) -> str:
    """Relative to the working directory when under it, else absolute."""
    rel = os.path.relpath(path)
    return str(Path(path).resolve()) if rel.startswith("..") else rel


@dataclass
class CapturedCall:
    module: nn.Module
    module_path: str
    call: int
    args: tuple
    kwargs: dict
    output: Any
    state: dict[str, torch.Tensor]  # parameters and buffers by every name they have, as they were before the call
    grad_enabled: bool
    autocast: list[str] = field(default_factory=list)  # device types with autocast on during the call
    state_args: list = field(default_factory=list)  # capture/state_args.Recorded: arguments that hold state (a cache)
    random: list = field(default_factory=list)  # capture/randomness.Draw: what the call drew at random, in order

    @property
    def device(self) -> torch.device:
        for t in [*self.state.values(), *_tensors((self.args, self.kwargs))]:
            return t.device
        return torch.device("cpu")


def _tensors(obj: Any) -> list[torch.Tensor]:
    return [x for x in pytree.tree_leaves(obj) if isinstance(x, torch.Tensor)]


class _Captured(BaseException):
    """Raised from the post-hook to stop the script: BaseException, so the script's `except Exception` lets it pass."""


class _Resolver:
    """Finds the module that PATH names: ``model.blocks.0.mlp`` is ``blocks.0.mlp`` of the script's variable ``model``,
    or, when no variable of that name holds a module, PATH (or PATH without its first part) below a top-level module call."""

    def __init__(self, path: str):
        self.path = path
        self.head, _, self.rest = path.partition(".")
        self.target: nn.Module | None = None
        self.tried_roots: list[str] = []

    def resolve(self, called: nn.Module, depth: int) -> nn.Module | None:
        if self.target is not None:
            return self.target
        root = _find_variable(self.head)
        if root is not None:
            self.target = _submodule(root, self.rest, self.head)  # CaptureInputError when the path goes nowhere
            return self.target
        if depth == 0:  # a top-level call: PATH may be relative to this module
            self.tried_roots.append(type(called).__name__)
            for sub in (self.path, self.rest) if self.rest else (self.path,):
                try:
                    self.target = called.get_submodule(sub)
                    return self.target
                except AttributeError:
                    continue
        return None


def _find_variable(name: str) -> nn.Module | None:
    """The innermost user frame (not torch's, not kernelfix's) with a variable ``name`` bound to a module."""
    frame = sys._getframe(2)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            for scope in (frame.f_locals, frame.f_globals):
                value = scope.get(name)
                if isinstance(value, nn.Module):
                    return value
        frame = frame.f_back
    return None


def _submodule(root: nn.Module, rest: str, head: str) -> nn.Module:
    """root.get_submodule(rest), with an error that lists what there is where the path stops."""
    mod, walked = root, head
    for part in rest.split(".") if rest else []:
        children = dict(mod.named_children())
        if part not in children:
            have = ", ".join(list(children)[:20]) or "no submodules"
            raise CaptureInputError(f"{walked} ({type(mod).__name__}) has no submodule {part!r}; it has: {have}")
        mod, walked = children[part], f"{walked}.{part}"
    return mod


def signature(args: tuple, kwargs: dict) -> tuple:
    """A call's kind: its argument structure, each tensor's shape and dtype, every other value."""
    flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    return (str(spec), tuple((str(x.dtype), tuple(x.shape)) if isinstance(x, torch.Tensor) else repr(x) for x in flat))


def run_and_capture(
    script: str | Path, module_path: str, *, call: int = 1, script_args: list[str] | tuple[str, ...] = ()
) -> CapturedCall:
    """Run ``script`` until the ``call``-th call of the module at ``module_path`` has returned; that call, recorded."""
    return run_and_capture_calls(script, module_path, calls=[call], script_args=script_args)[0]


def run_and_capture_calls(
    script: str | Path,
    module_path: str,
    *,
    calls: list[int] | None,
    limit: int = 8,
    script_args: list[str] | tuple[str, ...] = (),
    with_grad: bool = False,
) -> list[CapturedCall]:
    """Several calls of the module, recorded: ``calls`` by number, or (None) the first call of each distinct
    signature (shapes, dtypes, structure), at most ``limit``. The script stops once nothing more is wanted.
    Every call shares the state (parameters, buffers) recorded before the first one: the task has one set of weights.
    ``with_grad`` (with ``calls`` None): only calls made with gradients enabled, a training step's (a warm-up or an
    evaluation under torch.no_grad is passed over), as `kernelfix tune --backward` wants them."""
    script = Path(script)
    if not script.is_file():
        raise CaptureInputError(f"no such script: {script}")
    if calls is not None and (not calls or min(calls) < 1):
        raise CaptureInputError("--call and --calls count from 1")
    wanted = sorted(set(calls)) if calls is not None else None
    kinds: set[tuple] = set()
    resolver = _Resolver(module_path)
    depth = 0
    seen = 0
    pending: dict[str, Any] = {}
    captured: list[CapturedCall] = []
    failure: list[CaptureInputError] = []
    state: dict[str, Any] = {}

    def done() -> bool:
        return len(captured) >= (len(wanted) if wanted is not None else limit)

    def pre_hook(module: nn.Module, args: tuple) -> None:
        nonlocal depth, seen
        try:
            target = resolver.resolve(module, depth)
        except CaptureInputError as e:
            failure.append(e)
            raise _Captured from None  # stop the script: the path is wrong
        depth += 1
        if module is not target or done() or pending:
            return
        seen += 1
        if with_grad and wanted is None and not torch.is_grad_enabled():
            return
        if wanted is None or seen in wanted:
            # Before the call: a module that updates its buffers (running stats, counters) must be captured as it was.
            pending["args"] = detach_tree(args)
            if not state:  # the first captured call's: the task's weights
                state.update({n: clone_like(t) for n, t in _named_state(module)})
            pending["state"] = state
            pending["call"] = seen
            pending["grad"] = torch.is_grad_enabled()
            pending["autocast"] = [d for d in ("cpu", "cuda") if torch.is_autocast_enabled(d)]
            kw = call_kwargs(module)
            pending["kwargs"] = detach_tree(kw)  # before the call too: a call may write into a tensor passed by keyword
            # An argument that holds state (a transformers cache) is changed by the call: what it held before, now.
            pending["state_args"] = record_before(args, kw)
            pending["random"] = RandomDraws.start(module)

    def post_hook(module: nn.Module, args: tuple, *rest: Any) -> None:
        nonlocal depth
        depth -= 1
        if len(rest) != 2:  # the forward raised: torch then calls always-call hooks as (module, args, result)
            return
        kwargs, output = rest
        if module is resolver.target and pending:
            p = dict(pending)
            pending.clear()
            p["random"].stop()
            record_after(p["state_args"], module)
            kind = signature(p["args"], kwargs)
            if wanted is None and kind in kinds:
                return  # a kind already captured: `--calls all` keeps the first of each
            kinds.add(kind)
            captured.append(
                CapturedCall(
                    module=module,
                    module_path=module_path,
                    call=p["call"],
                    args=p["args"],
                    kwargs=p["kwargs"] if p["kwargs"] or not kwargs else detach_tree(kwargs),
                    output=detach_tree(output),
                    state=p["state"],
                    grad_enabled=p["grad"],
                    autocast=p["autocast"],
                    state_args=p["state_args"],
                    random=p["random"].draws,
                )
            )
            if done():
                raise _Captured

    run_script(script, script_args, pre_hook, post_hook, waiting_for=f"calling {module_path}")
    if failure:
        raise failure[0]
    if captured and (wanted is None or len(captured) == len(wanted)):
        return captured
    if resolver.target is None:
        how = f"no variable {resolver.head!r} holding a module" + (
            f", and no top-level module call ({', '.join(sorted(set(resolver.tried_roots)))}) has a submodule {module_path!r}"
            if resolver.tried_roots
            else ", and no module was called"
        )
        raise CaptureInputError(f"{script} ran to its end without calling {module_path}: {how}")
    what = f"{module_path} ({type(resolver.target).__name__})"
    if with_grad and wanted is None and seen:
        raise CaptureInputError(
            f"{script} called {what} {seen} time{'s' if seen != 1 else ''}, never with gradients enabled (a training step)"
        )
    call = (wanted or [1])[len(captured)] if wanted else 1
    if seen >= call:
        raise CaptureInputError(f"{script}: call {call} of {what} raised instead of returning (the script caught it)")
    raise CaptureInputError(
        f"{script} called {what} {seen} time{'s' if seen != 1 else ''}, not {call}"
        if seen
        else f"{script} ran to its end without calling {what}"
    )


def call_kwargs(module: nn.Module) -> dict:
    """The keyword arguments of the module call now starting: a global forward pre-hook is handed only the positional
    ones, and the call's frame (nn.Module's call machinery, which runs the hook) holds the rest."""
    frame = sys._getframe(1)
    for _ in range(4):
        if frame is None:
            break
        loc = frame.f_locals
        if (
            "forward_call" in loc
            and isinstance(loc.get("kwargs"), dict)
            and (loc.get("self") is module or "self" not in loc)
        ):
            return loc["kwargs"]
        frame = frame.f_back
    return {}


def run_script(
    script: Path, script_args: list[str] | tuple[str, ...], pre_hook, post_hook, *, waiting_for: str
) -> None:
    """Run ``script`` as ``python SCRIPT ARGS`` would, with two global module hooks (``post_hook`` takes
    ``(module, args, kwargs, output)``, and ``(module, args, result)`` when the forward raised). A hook stops
    the script by raising :class:`StopScript`. The script failing (or exiting non-zero) is a CaptureInputError
    that names the user's line; ``waiting_for`` says what the script was still to do."""
    handles = [
        nn.modules.module.register_module_forward_pre_hook(pre_hook),
        nn.modules.module.register_module_forward_hook(post_hook, with_kwargs=True, always_call=True),
    ]
    saved_argv, saved_path, saved_main = sys.argv[:], sys.path[:], sys.modules.get("__main__")
    sys.argv = [str(script), *script_args]
    sys.path.insert(0, str(script.resolve().parent))
    try:
        # The script's prints go to stderr: stdout is kernelfix's (--json).
        with contextlib.redirect_stdout(sys.stderr):
            runpy.run_path(str(script), run_name="__main__")
    except _Captured:
        pass
    except SystemExit as e:
        if e.code not in (None, 0):
            raise CaptureInputError(f"{script} exited with status {e.code} before {waiting_for}") from None
    except BaseException as e:  # the user's script failed: show them where
        if isinstance(e, KeyboardInterrupt):
            raise
        where = _user_frame(e, script)
        raise CaptureInputError(f"{script} raised {type(e).__name__}: {e}{where}") from None
    finally:
        for h in handles:
            h.remove()
            # torch leaves a global hook's with_kwargs flag behind, and torch.compile then warns of global hooks
            getattr(nn.modules.module, "_global_forward_hooks_with_kwargs", {}).pop(h.id, None)
        sys.argv, sys.path[:] = saved_argv, saved_path
        if saved_main is not None:
            sys.modules["__main__"] = saved_main


StopScript = _Captured  # what a hook given to run_script raises to end the script there


def _named_state(module: nn.Module):
    yield from module.named_parameters(remove_duplicate=False)
    yield from module.named_buffers(remove_duplicate=False)


def _user_frame(e: BaseException, script: Path) -> str:
    frames = [f for f in traceback.extract_tb(e.__traceback__) if is_user_file(f.filename)]
    if not frames:
        return ""
    f = frames[-1]
    return f"\n  at {shown_path(f.filename)}:{f.lineno} in {f.name}: {(f.line or '').strip()}"
