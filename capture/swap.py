"""Put a session's best kernel back into the user's model.

    model.blocks[0].mlp = kernelfix.load_best("sessions/mlp", model.blocks[0].mlp)

load_best builds the session's best ``ModelNew`` with the captured weights and wraps it in
:class:`CapturedKernel`, which takes the call as the captured module took it (positional and
keyword arguments, nested structures) and hands the kernel its tensors. A call unlike every
captured one (another shape or dtype, another value where export fixed one) is not what the
kernel was judged on: it raises, or runs the original module when one was given.

A swap costs nothing it need not (docs/capture.md, "What a swap costs"):

- Eager, the call check runs once per kind of call (capture/calls.py): later calls cost a walk
  over the arguments and a dict lookup, then the kernel is called directly.
- Under torch.compile the check is plain tuple comparisons, which Dynamo turns into guards, and
  the kernel takes the path load_best checked it on (capture/compile_path.py): Dynamo traces its
  forward (Triton launches and C++ operators become graph nodes, no Python at run time), or it
  runs as one opaque custom operator (capture/custom_op.py).
"""

from __future__ import annotations

import ast
import hashlib
import os
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.utils._pytree as pytree

from kernelfix.capture.captured_kernel import CapturedKernel, CheckCall
from kernelfix.capture.check import compare_outputs
from kernelfix.capture.errors import SwapCheckFailed, SwapError
from kernelfix.capture.files import CaptureFiles, import_file
from kernelfix.capture.schema import CaptureManifest, CompilePath, OutputCheck, SwapCheck
from kernelfix.tools.config import JudgeConfig

__all__ = ["load_best", "snippet", "attribute_path"]


# --------------------------------------------------------------------------- loading


class SessionKernel:
    """What load_best reads from a session: its settings, the capture manifest, the best kernel's source."""

    def __init__(self, session_dir: str | Path):
        from kernelfix.agent.session_dir import SessionDir, SessionError

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
    trace: bool | None = None,
) -> CapturedKernel:
    """The session's best kernel as a module that replaces the captured one.

    ``original``: the module being replaced; calls unlike the captured one run it, and the check
    also compares against it. ``device``: default the one the module was captured on (CPU when
    that is not here; Triton kernels then run in its interpreter). ``check``: run the kernel on the
    captured call (TASK.call.pt, else inputs from get_inputs()) and raise SwapCheckFailed unless it
    matches within the judge's tolerance (at every captured call, for a task captured with --calls).
    ``custom_op``: make the swap compile with ``torch.compile(model, fullgraph=True)``: the kernel's
    forward traced by Dynamo where that was checked to work on the captured calls, else a custom
    operator with a fake implementation (capture/custom_op.py); False: a plain call, unchecked.
    ``trace``: None picks as just said; True insists on the traced path (SwapError when it fails);
    False always takes the custom operator. ``.compile_path`` says which was taken and why.
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
    from kernelfix.capture import cpp_ops

    init = list(task.get_init_inputs())
    own = (
        instance_weights(sk, original, init[0]) if original is not None and init and isinstance(init[0], str) else None
    )
    try:
        with cpp_ops.registering() as extensions:  # its load_inline functions also as C++ operators, for torch.compile
            best = import_file(sk.best, "kernelfix_best")
        kernel = best.ModelNew(*([own.name, *init[1:]] if own is not None else init)).to(dev)
    except Exception as e:
        raise SwapError(f"cannot build the best kernel of {sk.store.path}: {type(e).__name__}: {e}") from e
    module = CapturedKernel(kernel, sk.manifest, original)
    module.extensions = extensions
    try:
        # Another instance of the captured module: the task's Model with its weights is the reference.
        if own is not None:
            calls = instance_calls(module, sk, task, dev, [own.name, *init[1:]]) if check or custom_op else []
        else:
            calls = check_calls(module, sk, task, dev) if check or custom_op else []
    except SwapError:
        if check:
            raise
        calls = []  # only the compile path's check wanted them: it then takes the custom operator
    if check:
        module.checks = swap_checks(module, calls, sk.judge_config, truth=_truth(module))
        failed = [c for c in module.checks if not c.ok]
        if failed:
            raise SwapCheckFailed(
                f"the best kernel of {sk.store.path} does not reproduce {sk.manifest.module_path}: "
                + "; ".join(f"against the {c.against.replace('_', ' ')}: {c.output.summary()}" for c in failed),
                module.checks,
            )
    if custom_op:
        from kernelfix.capture.compile_path import choose_compile_path

        key = (str(Path(sk.store.path).resolve()), hashlib.sha256(source.encode()).hexdigest(), str(dev))
        first = (
            _FIRST_PATH.get(key) if trace is None and not (extensions is not None and extensions.extensions) else None
        )
        # Another instance of one kind: its code and calls, its own weights.
        if first is not None and first.kind == "traced":
            module.use_traced(
                first.model_copy(update={"checks": [], "note": f"as every instance of this kind: {first.note}"})
            )
        elif first is not None:
            module.use_custom_op(_meta_reference(task), note=first.note)
        else:
            choose_compile_path(module, lambda: _meta_reference(task), calls, sk.judge_config, trace=trace)
            if trace is None:
                _FIRST_PATH[key] = module.compile_path
    return module


# The compile path decided at a kernel's first instance, by (session, best.py's text, device): every other instance
# runs the same code on the same captured calls with its own weights (each checked eagerly above), so the traced check,
# an Inductor compile of its own per instance (33 RMSNorms: minutes on the H200), is made once.
_FIRST_PATH: dict[tuple[str, str, str], CompilePath] = {}


def _truth(module: CapturedKernel):
    """The original module, copied to float64, on a check call (made on first use): the exact result that a
    half-precision kernel and the captured module are both measured against. None where there is no original to copy
    or the call is not the module's own (a cache or dropout masks, rewritten as the task takes them)."""
    import copy

    if module.original is None or module.manifest.state or module.manifest.random:
        return None
    made: list[nn.Module] = []

    def truth(c: CheckCall):
        if not made:
            made.append(copy.deepcopy(module.original).to(torch.float64))
        wide = pytree.tree_map(
            lambda x: x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x,
            (c.args, c.kwargs),
        )
        with torch.no_grad():
            return made[0](*wide[0], **wide[1])

    return truth


def _meta_reference(task) -> nn.Module:
    from kernelfix.capture.custom_op import meta_reference

    try:
        return meta_reference(task.Model(*task.get_init_inputs()))
    except Exception as e:
        raise SwapError(f"cannot build the task's Model for the kernel's shape rule: {type(e).__name__}: {e}") from e


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


class _Weights:
    """A weights file of one instance, removed when it is no longer needed."""

    def __init__(self, name: str):
        self.name = name

    def __del__(self) -> None:
        try:
            os.unlink(self.name)
        except OSError:
            pass


def instance_weights(sk: SessionKernel, original: nn.Module, captured: str) -> _Weights | None:
    """``original``'s own weights under the captured file's names, when they differ from the captured ones (another
    layer of the same kind: one kernel serves every instance, each built from its own weights); None for the captured
    module itself."""
    import tempfile

    saved = torch.load(captured, map_location="cpu", weights_only=True)
    state = dict(original.named_parameters(remove_duplicate=False)) | dict(
        original.named_buffers(remove_duplicate=False)
    )
    mine = {k: (state[k].detach().cpu() if k in state else v) for k, v in saved.items()}
    if all(torch.equal(mine[k], v) for k, v in saved.items() if k in state):
        return None
    bad = [k for k, v in saved.items() if k in state and (state[k].shape != v.shape or state[k].dtype != v.dtype)]
    if bad:
        raise SwapError(
            f"{bad[0]} of this module is {state[bad[0]].dtype} {list(state[bad[0]].shape)}, the captured module's "
            f"{saved[bad[0]].dtype} {list(saved[bad[0]].shape)}: not an instance of the same kind"
        )
    fd, name = tempfile.mkstemp(prefix="kernelfix-instance-", suffix=".pt")
    os.close(fd)
    torch.save(mine, name)
    return _Weights(name)


def instance_calls(module: CapturedKernel, sk: SessionKernel, task, dev: torch.device, init: list) -> list[CheckCall]:
    """The captured calls' inputs, each with the output of the task's Model built from this instance's weights."""
    captured = check_calls(module, sk, task, dev)
    model = task.Model(*init).to(dev)
    out = []
    with torch.no_grad():
        for c in captured:
            want = model(*module.kernel_inputs(c.args, c.kwargs))
            out.append(
                CheckCall(
                    c.args,
                    c.kwargs,
                    want,
                    "task_model",
                    c.input_set,
                    "another instance of the captured module: against the task's Model with its weights",
                )
            )
    return out


def check_calls(module: CapturedKernel, sk: SessionKernel, task, dev: torch.device) -> list[CheckCall]:
    """Every captured call (TASK.call.pt) with its captured output; without that file, calls drawn from
    get_inputs() (each set of get_input_sets()) with the task's Model's output."""
    m = sk.manifest
    call_file = sk.files.call if m.call_file else None
    multi = len(m.input_sets) > 1
    calls = []
    with torch.no_grad():
        if call_file is not None and call_file.is_file():
            saved = torch.load(call_file, map_location=dev, weights_only=True)
            for k, one in enumerate(saved.get("sets") or [saved], start=1):  # every captured call
                args, kwargs = pytree.tree_unflatten(one["leaves"], module._in_spec)
                calls.append(CheckCall(args, kwargs, one["output"], "captured_call", k if multi else None))
        else:
            model = task.Model(*task.get_init_inputs()).to(dev)
            for k in range(1, len(m.input_sets) + 1) if multi else [None]:
                args, kwargs = _drawn_call(m, task, dev, module._in_spec, k)
                note = "no captured call kept (TASK.call.pt): compared on inputs from get_inputs()" + (
                    "" if k is None else f" (set {k} of get_input_sets())"
                )
                calls.append(CheckCall(args, kwargs, model(*module.kernel_inputs(args, kwargs)), "task_model", k, note))
    return calls


def swap_checks(module: CapturedKernel, calls: list[CheckCall], cfg: JudgeConfig, truth=None) -> list[SwapCheck]:
    """The kernel, called as the module was, against the captured output (or the task's) and the original module.
    ``truth(call)``: the task's Model in float64 on the call, for half-precision outputs outside the element-wise
    tolerance (judged as the judge judges them: as close to the exact result as the module's own)."""
    from kernelfix.capture.check import HALF, truth_rule

    checks = []
    with torch.no_grad():
        for c in calls:
            got = module(*c.args, **c.kwargs)
            out = compare_outputs(got, c.want, cfg)
            if (
                not out.ok
                and truth is not None
                and any(isinstance(x, torch.Tensor) and x.dtype in HALF for x in pytree.tree_leaves(c.want))
            ):
                try:
                    out = truth_rule(got, c.want, truth(c), cfg, out)
                except Exception:  # the module does not run in float64: the element-wise check stands
                    pass
            checks.append(_check(c.against, out, c.note, input_set=c.input_set))
            if module.original is not None and not (module.manifest.state or module.manifest.random):
                # (a call with a cache or dropout masks is checked in the task's form, which the module itself does not take)
                checks.append(
                    _check(
                        "original_module",
                        compare_outputs(got, module.original(*c.args, **c.kwargs), cfg),
                        input_set=c.input_set,
                    )
                )
    if module.fallbacks:
        raise SwapError(
            "the check's own call ran the original module: the captured call no longer matches the capture's record"
        )
    return checks


def _check(against: str, output: OutputCheck, note: str | None = None, input_set: int | None = None) -> SwapCheck:
    return SwapCheck(ok=output.ok, against=against, output=output, note=note, input_set=input_set)


def _drawn_call(
    m: CaptureManifest, task, dev: torch.device, in_spec: pytree.TreeSpec | None, input_set: int | None = None
) -> tuple[tuple, dict]:
    """A call of the captured kind with tensors from get_inputs() (or one set of get_input_sets()) and the fixed values as captured."""
    if in_spec is None:
        raise SwapError(
            "the capture could not record the call's structure, and no captured call was kept: nothing to check with"
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        drawn = iter(
            [t.to(dev) for t in (task.get_inputs() if input_set is None else task.get_input_sets()[input_set - 1])]
        )
    leaves = []
    for leaf in m.inputs:
        if leaf.tensor is not None:
            leaves.append(next(drawn))
            continue
        try:
            leaves.append(ast.literal_eval(leaf.constant or "None"))
        except (ValueError, SyntaxError):
            raise SwapError(
                f"{leaf.path} was {leaf.constant}, which cannot be rebuilt without the captured call"
            ) from None
    return pytree.tree_unflatten(leaves, in_spec)


def snippet(module_path: str, session_dir: str | Path) -> str:
    """The lines that put the kernel in the user's model."""
    target = attribute_path(module_path)
    return (
        f"import kernelfix\n{target} = kernelfix.load_best({str(session_dir)!r}, {target})\n"
        "# torch.compile(model, fullgraph=True) compiles it without a graph break; calls of other shapes run the original"
    )


def attribute_path(module_path: str) -> str:
    """model.blocks.0.mlp -> model.blocks[0].mlp"""
    head, *rest = module_path.split(".")
    out = head
    for part in rest:
        out += f"[{part}]" if part.isdigit() else f".{part}" if part.isidentifier() else f"[{part!r}]"
    return out
