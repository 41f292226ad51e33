"""[one-shot child] The process compute-sanitizer watches, and the probe that picks its input.

``python -m kernelfix.tools.workers.sanitizer_target SPEC.json``, in the candidate's sandbox:

- ``sanitize_probe`` (no sanitizer in front): draws the failing trial's inputs as the reference worker
  drew them (its seed, its input set, its variant), tries the cuts of ``reduce.plans`` smallest
  first, each checked with the task's own Model, runs the candidate twice on it, and keeps the first
  cut that shows the failure again (a wrong output, a fault, two calls that differ); with nothing to
  reproduce (``--sanitize`` on a correct kernel) the smallest the Model runs. The chosen inputs go
  to a file for the tool runs, where they are small enough.
- ``sanitize_<tool>`` (compute-sanitizer in front): started with the stage, it imports torch, the task and
  the candidate, waits for the stage's room, starts CUDA and builds the model, waits, ready, for the plan
  (``tools/sanitizer/handoff.py``), then the chosen inputs, one forward, a sync. Every
  tensor is its own allocation (``PYTORCH_NO_CUDA_MEMORY_CACHING``, set by the stage), so memcheck sees
  each tensor's real end.

The probe's result also goes to a file: a tool in front of this process may not pass the message pipe on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernelfix.tools.timing.clock import Cuda
from kernelfix.tools.transport.protocol import TargetResult
from kernelfix.tools.workers.child import (
    Worker,
    build_model,
    load_module,
    load_task,
    seed_all,
    short,
    tensors_in,
    to_device,
)

INPUTS_FILE = "inputs.pt"


def _draw(task: Any, seed: int, input_set: int | None, device: str) -> list:
    """A trial's inputs as the reference worker draws them (tools/workers/reference/server.py: on the
    device under the trial's seed, on the CPU where the task's code cannot run there)."""
    import torch

    from kernelfix.tools import input_sets

    seed_all(seed)
    try:
        with torch.device(device):
            inputs = input_sets.pick(task, input_set)
    except Exception:
        seed_all(seed)
        inputs = input_sets.pick(task, input_set)
    return to_device(list(inputs), device)


def _trial_inputs(task: Any, trial: dict[str, Any], device: str) -> list:
    from kernelfix.tools.correctness import input_variants

    if trial.get("variant"):
        base = _draw(task, trial["base_seed"], trial.get("input_set"), device)
        return input_variants.apply(base, trial["variant"], trial["seed"])[0]
    return _draw(task, trial["seed"], trial.get("input_set"), device)


def _import_candidate(w: Worker, spec: dict[str, Any]) -> Any:
    from kernelfix.tools.compile import load_inline
    from kernelfix.tools.config import BuildOptions

    load_inline.install(Path(spec["build_dir"]), spec["device"], BuildOptions(**spec.get("build", {})))
    w.phase("import_candidate")
    cls = getattr(load_module(spec["candidate_path"], "kernelfix_candidate"), "ModelNew", None)
    if cls is None:
        raise RuntimeError("the candidate module defines no ModelNew")
    return cls


def _wrong(out: Any, ref: Any, atol: float | None, rtol: float | None) -> str | None:
    """How ``out`` differs from ``ref`` beyond the tolerance, or None when it does not."""
    import torch

    from kernelfix.tools.correctness.tolerance import tolerance

    outs, refs = tensors_in(out), tensors_in(ref)
    if len(outs) != len(refs):
        return f"{len(outs)} output tensors where the reference has {len(refs)}"
    for k, (o, r) in enumerate(zip(outs, refs)):
        if o.shape != r.shape:
            return f"output {k} has shape {list(o.shape)}, the reference {list(r.shape)}"
        if not r.is_floating_point():
            bad = int((o.to(r.dtype) != r).sum())
        else:
            a, t = tolerance(r.dtype, atol, rtol)
            o64, r64 = o.double(), r.double()
            close = torch.isclose(o64, r64, atol=a, rtol=t, equal_nan=True)
            bad = int((~close).sum())
        if bad:
            return f"{bad} of {r.numel()} elements of output {k} outside the tolerance"
    return None


def _differs(a: Any, b: Any) -> str | None:
    """How two outputs of the same call on the same inputs differ, bit for bit (NaN equal to NaN)."""
    import torch

    for k, (x, y) in enumerate(zip(tensors_in(a), tensors_in(b))):
        if x.shape != y.shape:
            return f"output {k} changed shape between the calls"
        same = x == y
        if x.is_floating_point():
            same |= torch.isnan(x) & torch.isnan(y)
        n = int((~same).sum())
        if n:
            return f"{n} of {x.numel()} elements of output {k} differ between two calls on the same inputs"
    return None


def probe(w: Worker) -> None:
    import torch

    from kernelfix.tools import input_sets
    from kernelfix.tools.sanitizer import reduce

    spec = w.spec
    device = spec["device"]
    Cuda.bind()
    torch.set_grad_enabled(False)
    task = load_task(w, spec["task_path"])
    w.phase("draw_inputs")
    inputs = _trial_inputs(task, spec["trial"], device)
    shapes = [tuple(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs]
    dtypes = [str(x.dtype).removeprefix("torch.") if isinstance(x, torch.Tensor) else "" for x in inputs]
    names = input_sets.forward_names(task)
    w.phase("build_reference")
    ref_model = build_model(task.Model, task, spec["init_seed"], device)
    cls = _import_candidate(w, spec)
    w.phase("build_model")
    model = build_model(cls, task, spec["init_seed"], device)
    want = spec.get("reproduce")  # "wrong", "fault", or None (nothing to reproduce)
    tried: list[dict[str, Any]] = []
    result: dict[str, Any] = {"tried": tried}
    chosen: tuple[reduce.Plan, list] | None = None
    for plan in reduce.plans(shapes, spec["max_elements"]):
        x = reduce.cut(inputs, plan)
        row: dict[str, Any] = {"plan": plan.model_dump(), "inputs": reduce.describe(plan, shapes, names, dtypes)}
        tried.append(row)
        w.phase("reference_forward", rows=plan.rows)
        try:
            ref = ref_model(*x)
            Cuda.sync()
        except Exception as e:  # a cut the task's own Model cannot run
            row["reference_failed"] = short(e)
            continue
        if chosen is None:
            chosen = (plan, x)  # the smallest cut the Model runs: used when nothing reproduces
        row["saved"] = _save(spec, x)  # before the candidate runs: a fault leaves nothing to copy
        w.phase("candidate_forward", rows=plan.rows)
        try:
            out1 = model(*x)
            Cuda.sync()
            out2 = model(*x)
            Cuda.sync()
        except Exception as e:  # a fault (the CUDA context is gone after one) or the candidate's own error
            row["fault"] = short(e)
            chosen = (plan, x)
            break
        row["wrong"] = _wrong(out1, ref, spec.get("atol"), spec.get("rtol"))
        row["nondeterministic"] = _differs(out1, out2)
        if want is None or row["wrong"] or row["nondeterministic"]:
            chosen = (plan, x)
            break
    if chosen is None:
        raise RuntimeError(
            "the task's Model runs on none of the inputs tried: "
            + "; ".join(r.get("reference_failed", "") for r in tried)
        )
    plan, _ = chosen
    mine = next(r for r in tried if r["plan"] == plan.model_dump())
    result |= {
        "plan": plan.model_dump(),
        "inputs": mine["inputs"],
        "reduced": plan.reduced,
        "saved": mine.get("saved"),
        "reproduced": None
        if want is None
        else bool(mine.get("fault") or mine.get("wrong") or mine.get("nondeterministic")),
        "nondeterministic": mine.get("nondeterministic"),
        "wrong": mine.get("wrong"),
        "fault": mine.get("fault"),
    }
    _done(spec, w, result)


def _save(spec: dict[str, Any], x: list) -> str | None:
    """The cut inputs in a file for the tool runs, where small enough; else they draw them again."""
    import torch

    size = sum(t.numel() * t.element_size() for t in tensors_in(x))
    if size > spec["max_save_bytes"]:
        return None
    path = Path(spec["outdir"]) / INPUTS_FILE
    torch.save(to_device(x, "cpu"), path)
    return str(path)


def run_tool(w: Worker) -> None:
    """One forward on the chosen inputs, under the sanitizer in front of this process. It starts with the
    stage, before its room: torch, the task and the candidate's import (CPU work, which a candidate worker
    does outside the GPU's lock too); then, once the stage has room (``handoff``), CUDA under the tool and
    ``ModelNew``; then it waits, ready, for the plan, which the judge writes once it holds the GPU's lock
    for the tools; the inputs and the forward after it."""
    import torch

    from kernelfix.tools.sanitizer import handoff, reduce

    spec = w.spec
    device = spec["device"]
    Cuda.bind(stream=False)  # before the candidate's code; the stream's query would start CUDA before the room
    torch.set_grad_enabled(False)
    task = load_task(w, spec["task_path"])
    cls = _import_candidate(w, spec)
    w.phase(handoff.IMPORTED_PHASE)
    room = handoff.wait(Path(spec["room_file"]), spec["wait_s"])
    if not room or room.get("cancel"):
        _done(spec, w, {"ran": False})
        return
    w.phase("build_model")
    Cuda.start()  # CUDA under the tool, now that the stage has room
    model = build_model(cls, task, spec["init_seed"], device)
    Cuda.sync()
    w.phase(handoff.READY_PHASE)
    try:
        handoff.ready_file(Path(spec["outdir"]), spec["stage"]).touch()
    except OSError:  # only a hint to the judge (the phase above says the same)
        pass
    plan = handoff.wait(Path(spec["plan_file"]), spec["wait_s"])
    if not plan or plan.get("cancel") or not plan.get("plan"):
        _done(spec, w, {"ran": False})
        return
    w.phase("inputs")
    if plan.get("inputs_file"):
        x = to_device(torch.load(plan["inputs_file"], weights_only=True), device)
    else:
        x = reduce.cut(_trial_inputs(task, spec["trial"], device), reduce.Plan(**plan["plan"]))
    Cuda.sync()
    w.phase("sanitized_forward")
    model(*x)
    Cuda.sync()  # every report is out once the forward's kernels have finished (the tool prints at each kernel's end)
    _done(spec, w, {"ran": True})


def _done(spec: dict[str, Any], w: Worker, result: dict[str, Any]) -> None:
    (Path(spec["outdir"]) / f"{spec['stage']}.json").write_text(json.dumps(result, default=str))
    w.say(TargetResult(**result))


def body(w: Worker) -> None:
    if w.spec["device"] != "cuda":
        raise RuntimeError("the sanitizer needs a CUDA device")
    if w.spec["stage"] == "sanitize_probe":
        probe(w)
    else:
        run_tool(w)


def main() -> None:
    Worker().run(body)


if __name__ == "__main__":
    main()
