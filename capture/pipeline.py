"""capture(): script -> recorded call -> torch.export -> task file + weights, kept only if it reproduces the call."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.utils._pytree as pytree

from kernelfix.base import atomic
from kernelfix.base.version import __version__
from kernelfix.capture.errors import CaptureFailed, CaptureInputError
from kernelfix.capture.export_graph import task_graph
from kernelfix.capture.files import CaptureFiles
from kernelfix.capture.reproduce import reproduce
from kernelfix.capture.schema import CaptureManifest, InputLeaf, OutputLeaf
from kernelfix.capture.script import CapturedCall, run_and_capture_calls
from kernelfix.capture.task_call import random_specs, state_specs, task_call
from kernelfix.capture.task_source import render_task
from kernelfix.capture.tensors import clone_like
from kernelfix.capture.trace import export_call, random_ops
from kernelfix.tools.config import JudgeConfig

_PRIMITIVES = (type(None), bool, int, float, str)


@dataclass
class CaptureResult:
    manifest: CaptureManifest
    files: list[Path]


def default_out(module_path: str) -> Path:
    return Path("captured") / (module_path.replace(".", "_") + ".py")


def capture(
    script: str | Path,
    module_path: str,
    out: str | Path | None = None,
    *,
    call: int = 1,
    calls: list[int] | str | None = None,
    max_calls: int = 8,
    script_args: list[str] | tuple[str, ...] = (),
    keep_call: bool = True,
    force: bool = False,
    config: JudgeConfig | None = None,
    with_grad: bool = False,
    backward: bool | None = None,
) -> CaptureResult:
    """Capture the ``call``-th call of ``module_path`` in ``script`` as a task at ``out``; or, with ``calls``
    (call numbers, or "all": the first call of each distinct signature, at most ``max_calls``), several
    calls, each a set of the task's get_input_sets() (get_inputs() is the first), each checked.

    ``with_grad`` (with ``calls="all"``): only the calls made with gradients enabled (a training step's).
    ``backward``: whether the run is a training step (`kernelfix tune` sees whether the script calls backward());
    None decides from the call (the module in training mode with gradients enabled). The task judges gradients
    (BACKWARD = True) only in a training step, and only where something in the module needs one.
    Raises CaptureInputError (bad input) or CaptureFailed (cannot be made faithful); writes nothing then.
    """
    files = CaptureFiles(Path(out) if out else default_out(module_path))
    if files.task.suffix != ".py":
        raise CaptureInputError(f"--out must name a .py file, not {files.task}")
    existing = [str(p) for p in files.all() if p.exists()]
    if existing and not force:
        raise CaptureInputError(
            f"{', '.join(existing)} already exist{'s' if len(existing) == 1 else ''}; pass --force to replace"
        )
    wanted = None if calls == "all" else list(calls) if calls is not None else [call]
    recorded = run_and_capture_calls(
        script,
        module_path,
        calls=wanted,
        limit=max_calls,
        script_args=script_args,
        with_grad=with_grad and wanted is None,
    )
    # A cache argument's tensors and what the call wrote there, dropout's masks: plain inputs and outputs of the task.
    cs = [task_call(x) for x in recorded]
    c, others = cs[0], cs[1:]
    skipped = []
    for x in others:
        why = _fixed_values_differ(c, x)
        if why and calls != "all":
            raise CaptureFailed(why)
        if why:
            skipped.append(why)
    if skipped:  # `all`: such calls are another task's
        bad = {int(w.split()[1]) for w in skipped}
        others = [x for x in others if x.call not in bad]
        cs = [c, *others]
    bw = trains(c) if backward is None else bool(backward) and needs_grad(c)
    export_notes: list[str] = []
    ep = export_call(c, others, notes=export_notes)
    rnd = random_ops(ep)
    if rnd:
        raise CaptureFailed(
            f"cannot capture {module_path}: its forward draws random numbers ({', '.join(rnd[:3])}) other than dropout's "
            "masks, which capture takes as the task's inputs; a task must give the same output for the same inputs. Draw "
            "them outside the module and pass them in as an argument, or capture a submodule that does not draw them."
        )
    tg = task_graph(ep, c)
    tg.notes[:0] = export_notes
    _mask_rates(tg.inputs, c)
    try:
        files.task.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CaptureInputError(f"cannot create {files.task.parent}: {e}") from None
    final = CaptureFiles(files.task.resolve())
    stage = Path(tempfile.mkdtemp(prefix=f".{files.task.stem}.", suffix=".kfcapture", dir=final.task.parent))
    staged = CaptureFiles(stage / final.task.name)
    try:
        torch.save({a.key: clone_like(a.value).cpu() for a in tg.attrs}, staged.weights)
        with open(staged.weights, "rb") as f:
            sha = hashlib.file_digest(f, "sha256").hexdigest()
        sets = [_set_inputs(tg.inputs, x) for x in cs] if others else []
        source = render_task(
            tg,
            module_path=module_path,
            module_class=type(c.module).__qualname__,
            script=str(script),
            weights_name=final.weights.name,
            weights_abs=str(final.weights),
            weights_sha256=sha,
            input_sets=sets,
            calls=[x.call for x in cs],
            backward=bw,
            state=state_specs(c),
            random=random_specs(c),
        )
        atomic.write_text(staged.task, source)
        checks = [reproduce(staged.task, x, config) for x in cs]  # every captured call, as the one call is checked
        for x, check in zip(cs, checks):
            if not check.ok:
                which = f" (call {x.call}, set {cs.index(x) + 1} of {len(cs)})" if others else ""
                raise CaptureFailed(f"cannot capture {module_path}{which}: {check.problem}. Nothing was written.")
        check = checks[0]
        notes = list(tg.notes) + [f"not captured: {w}" for w in skipped]
        notes += [
            f"input {i.name} had {i.tensor.nonfinite} non-finite values; get_inputs() draws finite ones"
            for i in tg.inputs
            if i.tensor is not None and i.tensor.nonfinite
        ]
        in_spec, why = _in_spec(c)
        if why:
            notes.append(why)
        call_kept = False
        if keep_call:
            call_kept, why = _save_call(c, staged.call, others)
            if why:
                notes.append(why)
        manifest = CaptureManifest(
            kernelfix_version=__version__,
            torch_version=torch.__version__,
            created_at=time.time(),
            script=str(Path(script).resolve()),
            script_args=list(script_args),
            module_path=module_path,
            module_class=f"{type(c.module).__module__}.{type(c.module).__qualname__}",
            call=call,
            device=str(c.device),
            training=c.module.training,
            grad_enabled=c.grad_enabled,
            backward=bw,
            task=final.task.name,
            weights=final.weights.name,
            weights_sha256=sha,
            call_file=final.call.name if call_kept else None,
            in_spec=in_spec,
            inputs=tg.inputs,
            outputs=tg.outputs,
            graph_ops=dict(tg.ops.most_common()),
            check=check,
            notes=notes,
            state=state_specs(c),
            random=random_specs(c),
            calls=[x.call for x in cs] if others else [],
            input_sets=sets,
            set_outputs=[_outputs(x) for x in cs] if others else [],
            set_checks=checks if others else [],
        )
        atomic.write_json(staged.manifest, manifest)
        written = []
        # The task last: a task never appears without its weights and manifest.
        for src, dst in (
            (staged.weights, final.weights),
            (staged.call, final.call),
            (staged.manifest, final.manifest),
            (staged.task, final.task),
        ):
            if src.exists():
                os.replace(src, dst)
                written.append(dst)
            elif dst.exists() and force:
                dst.unlink()  # a call file left by an earlier capture of this task would not match this one
        return CaptureResult(manifest=manifest, files=written)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def trains(c: CapturedCall) -> bool:
    """The call was part of training: the module in training mode, grad enabled, and a trainable parameter or an
    input that requires grad. (A script that runs its model in eval mode without torch.no_grad is inference: gradients
    enabled are not a training step. `kernelfix tune` decides by whether the script calls backward().)"""
    if not c.grad_enabled or not c.module.training:
        return False
    return needs_grad(c)


def needs_grad(c: CapturedCall) -> bool:
    """With gradients enabled, something in the call needs one: a trainable parameter, or an input that requires grad."""
    if not c.grad_enabled:
        return False
    params = any(p.requires_grad for p in c.module.parameters())
    inputs = any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in pytree.tree_leaves((tuple(c.args), dict(c.kwargs)))
    )
    return params or inputs


def _in_spec(c: CapturedCall) -> tuple[str, str | None]:
    _, spec = pytree.tree_flatten((tuple(c.args), dict(c.kwargs)))
    try:
        return pytree.treespec_dumps(spec), None
    except Exception as e:  # a pytree type registered without serialization
        return "", f"the call's argument structure cannot be saved ({e}); load_best cannot map calls to the kernel"


def _save_call(c: CapturedCall, path: Path, others: list[CapturedCall] = ()) -> tuple[bool, str | None]:
    """The captured inputs and output beside the task, for load_best's check (loadable with weights_only);
    with other calls, every call under "sets" (the first included)."""
    leaves = pytree.tree_leaves((tuple(c.args), dict(c.kwargs)))
    odd = [type(x).__name__ for x in leaves if not isinstance(x, (torch.Tensor, *_PRIMITIVES))]
    if odd:
        return (
            False,
            f"the call passes {odd[0]} objects, which cannot be kept safely: load_best checks against the task's Model instead",
        )
    saved: dict = {"leaves": leaves, "output": c.output}
    if others:
        saved["sets"] = [
            {"leaves": pytree.tree_leaves((tuple(x.args), dict(x.kwargs))), "output": x.output} for x in (c, *others)
        ]
    torch.save(saved, path)
    return True, None


def _fixed_values_differ(c: CapturedCall, x: CapturedCall) -> str | None:
    """The task fixes every non-tensor argument to the first call's value: why call ``x`` does not agree, if it does not."""
    if state_specs(c) != state_specs(x):
        return (
            f"call {x.call} of {c.module_path} finds its state argument unlike call {c.call} did (a cache that already "
            "holds keys, say): capture such calls separately (--call N)"
        )
    if [(d.name, d.p) for d in c.random] != [(d.name, d.p) for d in x.random]:
        return f"call {x.call} of {c.module_path} draws other dropout masks than call {c.call}: capture it separately (--call N)"
    first, first_spec = pytree.tree_flatten((tuple(c.args), dict(c.kwargs)))
    flat, spec = pytree.tree_flatten((tuple(x.args), dict(x.kwargs)))
    if spec != first_spec:
        return f"call {x.call} of {c.module_path} passes its arguments unlike call {c.call}: capture them separately (--call N)"
    for a, b in zip(first, flat):
        if not isinstance(a, torch.Tensor) and repr(a) != repr(b):
            return (
                f"call {x.call} of {c.module_path} passes {b!r} where call {c.call} passed {a!r}: a task fixes non-tensor "
                "arguments to one value; capture such calls separately (--call N)"
            )
    return None


def _set_inputs(first: list[InputLeaf], x: CapturedCall) -> list[InputLeaf]:
    """One call's inputs described as the task's first call's are (the same names, this call's shapes and ranges)."""
    from kernelfix.capture.tensors import describe

    leaves = pytree.tree_leaves((tuple(x.args), dict(x.kwargs)))
    return [
        leaf.model_copy(update={"tensor": describe(v)}) if leaf.tensor is not None else leaf
        for leaf, v in zip(first, leaves)
    ]


def _outputs(x: CapturedCall) -> list[OutputLeaf]:
    from kernelfix.capture.check import leaves_with_paths
    from kernelfix.capture.tensors import describe

    out, _ = leaves_with_paths(x.output)
    return [
        OutputLeaf(path=p, description=describe(v).describe() if isinstance(v, torch.Tensor) else repr(v))
        for p, v in out
    ]


def _mask_rates(inputs: list[InputLeaf], c: CapturedCall) -> None:
    """get_inputs() draws each dropout mask with the drop rate the module asked for, not the share one draw happened to keep."""
    rates = {d.name: d.p for d in c.random}
    for leaf in inputs:
        name = next((n for n in rates if leaf.path == f"kwargs['kf_random']['{n}']"), None)
        if name is not None and leaf.tensor is not None:
            leaf.tensor.p_true = 1.0 - rates[name]
