"""Does a written task reproduce the captured call? Checked before the task is kept."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.utils._pytree as pytree

from kernelfix.capture.check import compare_outputs
from kernelfix.capture.files import import_file
from kernelfix.capture.schema import ReproductionCheck
from kernelfix.capture.script import CapturedCall
from kernelfix.capture.tensors import clone_like
from kernelfix.tools.config import JudgeConfig

_OUTSIDE_STATE = (
    "its output may depend on something outside its inputs, parameters and buffers (a global, a cache an earlier "
    "call filled, a random generator, the time), which a task cannot hold"
)


def tensor_inputs(call: CapturedCall) -> list[torch.Tensor]:
    """The call's tensors in the order the task's forward takes them (pytree order of (args, kwargs))."""
    return [x for x in pytree.tree_leaves((tuple(call.args), dict(call.kwargs))) if isinstance(x, torch.Tensor)]


def reproduce(task_path: Path, call: CapturedCall, config: JudgeConfig | None = None) -> ReproductionCheck:
    device = call.device
    try:
        task = import_file(task_path, "kernelfix_captured")
        model = task.Model(*task.get_init_inputs()).to(device)
        with torch.no_grad():
            out = model(*[clone_like(t) for t in tensor_inputs(call)])
    except Exception as e:
        return ReproductionCheck(
            ok=False, problem=f"the written task fails on the captured inputs: {type(e).__name__}: {e}"
        )
    captured = compare_outputs(out, call.output, config)
    if not captured.ok:
        return ReproductionCheck(
            ok=False,
            captured=captured,
            problem=f"the written task's output differs from the captured call's ({captured.summary()}): {_OUTSIDE_STATE}",
        )
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(0)
            fresh = [t.to(device) for t in task.get_inputs()]
            fresh_out = task.Model(*task.get_init_inputs()).to(device)(*fresh)
    except Exception as e:
        return ReproductionCheck(
            ok=False,
            captured=captured,
            problem=f"the task reproduces the captured call but fails on inputs get_inputs() draws: {type(e).__name__}: {e}",
        )
    outs = [x for x in pytree.tree_leaves(fresh_out) if isinstance(x, torch.Tensor)]
    finite = all(bool(torch.isfinite(x).all()) for x in outs if x.is_floating_point())
    return ReproductionCheck(
        ok=True,
        captured=captured,
        fresh_inputs="runs on get_inputs() draws" + ("" if finite else " (with non-finite outputs)"),
    )
