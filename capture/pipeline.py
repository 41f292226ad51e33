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

from kernelfix import __version__, atomic
from kernelfix.capture.errors import CaptureFailed, CaptureInputError
from kernelfix.capture.files import CaptureFiles
from kernelfix.capture.graph import task_graph
from kernelfix.capture.records import CaptureManifest
from kernelfix.capture.reproduce import reproduce
from kernelfix.capture.script import CapturedCall, run_and_capture
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
    script_args: list[str] | tuple[str, ...] = (),
    keep_call: bool = True,
    force: bool = False,
    config: JudgeConfig | None = None,
) -> CaptureResult:
    """Capture the ``call``-th call of ``module_path`` in ``script`` as a task at ``out``.

    Raises CaptureInputError (bad input) or CaptureFailed (cannot be made faithful); writes nothing then.
    """
    files = CaptureFiles(Path(out) if out else default_out(module_path))
    if files.task.suffix != ".py":
        raise CaptureInputError(f"--out must name a .py file, not {files.task}")
    existing = [str(p) for p in files.all() if p.exists()]
    if existing and not force:
        raise CaptureInputError(f"{', '.join(existing)} already exist{'s' if len(existing) == 1 else ''}; pass --force to replace")
    c = run_and_capture(script, module_path, call=call, script_args=script_args)
    ep = export_call(c)
    rnd = random_ops(ep)
    if rnd:
        raise CaptureFailed(
            f"{module_path} draws random numbers in its forward ({', '.join(rnd[:3])}): no task can reproduce its output. "
            "Put the model in eval mode (model.eval()) before the call, or capture a submodule without them"
        )
    tg = task_graph(ep, c)
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
        source = render_task(
            tg, module_path=module_path, module_class=type(c.module).__qualname__, script=str(script),
            weights_name=final.weights.name, weights_abs=str(final.weights), weights_sha256=sha,
        )
        atomic.write_text(staged.task, source)
        check = reproduce(staged.task, c, config)
        if not check.ok:
            raise CaptureFailed(f"cannot capture {module_path}: {check.problem}. Nothing was written.")
        notes = list(tg.notes)
        notes += [f"input {i.name} had {i.tensor.nonfinite} non-finite values; get_inputs() draws finite ones"
                  for i in tg.inputs if i.tensor is not None and i.tensor.nonfinite]
        in_spec, why = _in_spec(c)
        if why:
            notes.append(why)
        call_kept = False
        if keep_call:
            call_kept, why = _save_call(c, staged.call)
            if why:
                notes.append(why)
        manifest = CaptureManifest(
            kernelfix_version=__version__, torch_version=torch.__version__, created_at=time.time(),
            script=str(Path(script).resolve()), script_args=list(script_args), module_path=module_path,
            module_class=f"{type(c.module).__module__}.{type(c.module).__qualname__}", call=call, device=str(c.device),
            training=c.module.training, grad_enabled=c.grad_enabled, task=final.task.name, weights=final.weights.name,
            weights_sha256=sha, call_file=final.call.name if call_kept else None, in_spec=in_spec, inputs=tg.inputs,
            outputs=tg.outputs, graph_ops=dict(tg.ops.most_common()), check=check, notes=notes,
        )
        atomic.write_json(staged.manifest, manifest)
        written = []
        # The task last: a task never appears without its weights and manifest.
        for src, dst in ((staged.weights, final.weights), (staged.call, final.call), (staged.manifest, final.manifest), (staged.task, final.task)):
            if src.exists():
                os.replace(src, dst)
                written.append(dst)
            elif dst.exists() and force:
                dst.unlink()  # a call file left by an earlier capture of this task would not match this one
        return CaptureResult(manifest=manifest, files=written)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _in_spec(c: CapturedCall) -> tuple[str, str | None]:
    _, spec = pytree.tree_flatten((tuple(c.args), dict(c.kwargs)))
    try:
        return pytree.treespec_dumps(spec), None
    except Exception as e:  # a pytree type registered without serialization
        return "", f"the call's argument structure cannot be saved ({e}); load_best cannot map calls to the kernel"


def _save_call(c: CapturedCall, path: Path) -> tuple[bool, str | None]:
    """The captured inputs and output beside the task, for load_best's check (loadable with weights_only)."""
    leaves = pytree.tree_leaves((tuple(c.args), dict(c.kwargs)))
    odd = [type(x).__name__ for x in leaves if not isinstance(x, (torch.Tensor, *_PRIMITIVES))]
    if odd:
        return False, f"the call passes {odd[0]} objects, which cannot be kept safely: load_best checks against the task's Model instead"
    torch.save({"leaves": leaves, "output": c.output}, path)
    return True, None
