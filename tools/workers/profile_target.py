"""[one-shot child] The process a profiler watches: one forward of the candidate after a warm-up.

``python -m kernelfix.tools.workers.profile_target SPEC.json``, run by ncu (``profile_ncu``:
forward inside the NVTX range ncu filters on) or alone (``profile_torch``:
torch.profiler's kernel list, for when ncu cannot run). The profile judges
nothing, so its inputs are the task's own distribution drawn here under a seed
of this process's: no trial's inputs are needed. The reference's matmul/conv
FLOPs are counted on the meta device before any candidate code is imported
(or come from the judge, which has the reference's). The result also goes to a
file: a profiler in front of this process may not pass the message pipe on.

Started ahead of its stage (``go_file`` in the spec), it imports torch and the
task, and a Triton candidate's Triton, then waits for the judge's go before it
starts CUDA: the stage holds the GPU from the go on.
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path
from typing import Any

from kernelfix.tools.sanitizer import handoff
from kernelfix.tools.timing.clock import Cuda
from kernelfix.tools.transport.protocol import TargetResult
from kernelfix.tools.workers.child import Worker, build_model, load_module, load_task, seed_all, tensors_in, to_device

# Wall-clock readings of this process's phases, for the judge's breakdown of the stage (the judge reads them against
# its own clock at ncu's start: the same host's).
MARKS: dict[str, float] = {"loaded": time.time()}


def _phase(w: Worker, name: str) -> None:
    MARKS[name] = time.time()
    w.phase(name)


def _task_flops(task) -> float | None:
    """Matmul/conv FLOPs of one reference forward (``task_size.flops_on_meta``)."""
    from kernelfix.tools.task_size import flops_on_meta

    return flops_on_meta(task)


def _kernel_list(prof) -> list[dict[str, Any]]:
    """GPU work torch.profiler saw (kernels, copies, memsets): name, launches, total ms."""
    from torch.autograd import DeviceType

    agg: dict[str, dict[str, Any]] = {}
    for ev in prof.events():
        if getattr(ev, "device_type", None) != DeviceType.CUDA:
            continue
        e = agg.setdefault(ev.name, {"name": ev.name, "calls": 0, "total_ms": 0.0})
        e["calls"] += 1
        e["total_ms"] += ev.time_range.elapsed_us() / 1e3
    return sorted(agg.values(), key=lambda e: -e["total_ms"])


def body(w: Worker) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from kernelfix.tools.compile import load_inline
    from kernelfix.tools.config import BuildOptions

    spec = w.spec
    device = spec["device"]
    if device != "cuda":
        raise RuntimeError("profiling needs a CUDA device")
    _phase(w, "torch_imported")
    task = load_task(w, spec["task_path"])
    known = spec.get("known")  # the reference's count, when the judge has it: not counted again under the profiler
    if spec.get(
        "go_file"
    ):  # started ahead of the stage (tools/stages/profile.py: prestart): nothing of CUDA's until the go
        _ahead(spec)
        _phase(w, "ready")
        go = handoff.wait(Path(spec["go_file"]), float(spec.get("wait_s", 600.0)))
        if not go or not go.get("go"):
            return _done(spec, w, {"cancelled": True})
        MARKS["go"] = time.time()
        known = go.get("known") or known
    Cuda.bind()
    nvtx_push, nvtx_pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    if known is None:
        _phase(w, "count_flops")
    result: dict[str, Any] = {"flops": known["flops"] if known is not None else _task_flops(task)}
    _phase(w, "inputs")
    seed_all(secrets.randbelow(2**30))
    with torch.device(device):
        inputs = to_device(list(task.get_inputs()), device)
    result["dtypes"] = (
        list(known["dtypes"])
        if known is not None
        else sorted({str(t.dtype).removeprefix("torch.") for t in tensors_in(inputs) if t.is_floating_point()})
    )
    load_inline.install(Path(spec["build_dir"]), device, BuildOptions(**spec.get("build", {})))
    _phase(w, "import_candidate")
    cls = getattr(load_module(spec["candidate_path"], "kernelfix_candidate"), "ModelNew", None)
    if cls is None:
        raise RuntimeError("the candidate module defines no ModelNew")
    _phase(w, "build_model")
    model = build_model(cls, task, spec["init_seed"], device)
    if spec.get("backward"):
        _forward_backward(w, spec, model, inputs, result)
        return _done(spec, w, result)
    torch.set_grad_enabled(False)
    _phase(w, "warmup")
    for _ in range(spec["warmup_calls"]):
        model(*inputs)
    Cuda.sync()
    _phase(w, "host_syncs")
    result["host_syncs"] = _host_syncs(lambda: model(*inputs), spec["candidate_path"])
    Cuda.sync()
    _phase(w, "profiled_forward")
    if spec["stage"] == "profile_ncu":
        nvtx_push(spec["nvtx_range"])
        model(*inputs)
        Cuda.sync()
        nvtx_pop()
    else:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            model(*inputs)
            Cuda.sync()
        result["kernels"] = _kernel_list(prof)
    _done(spec, w, result)


def _ahead(spec: dict[str, Any]) -> None:
    """While the run waits for its go: a Triton candidate's Triton imported and its key computed (a hash of libtriton.so,
    tools/workers/candidate/ahead.py), which its first kernel call would do inside the stage. Reads files, starts nothing
    of CUDA's."""
    from kernelfix.sandbox.zygote import kind_for_candidate

    try:
        if kind_for_candidate(Path(spec["candidate_path"]).read_text()) in ("triton", "candidate"):
            import triton  # noqa: F401

            from kernelfix.tools.workers.candidate.ahead import triton_key_ahead

            triton_key_ahead()
    except Exception:  # the first kernel call does it, as before
        pass


def _host_syncs(forward: Any, candidate_path: str) -> dict[str, Any]:
    """Which lines of the forward made the host wait for the GPU (``host_sync.watch``), on a warmed-up
    forward that no profiler replays; a failure here is a note, never the profile's end."""
    from kernelfix.tools.profile import host_sync

    try:
        return host_sync.watch(forward, candidate_path).model_dump()
    except Exception as e:
        return host_sync.SyncReport(note=f"host syncs not checked: {type(e).__name__}: {e}"[:300]).model_dump()


def _done(spec: dict[str, Any], w: Worker, result: dict[str, Any]) -> None:
    MARKS["done"] = time.time()
    result["phase_times"] = dict(MARKS)
    (Path(spec["outdir"]) / f"{spec['stage']}.json").write_text(json.dumps(result))
    w.say(TargetResult(**result))


def _forward_backward(w: Worker, spec: dict[str, Any], model: Any, inputs: list, result: dict[str, Any]) -> None:
    """--backward: one forward with grad, then its backward on a random cotangent. The autograd engine
    launches a CUDA backward from its own device thread, where the forward's push/pop NVTX range (one
    thread's) does not reach: the backward runs inside a start/end range, which ncu sees on every
    thread and names per kernel, so each kernel is told forward or backward."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from kernelfix.tools.correctness import gradients

    args, _ = gradients.grad_leaves(inputs)

    def forward() -> Any:
        with torch.enable_grad():
            return model(*args)

    _phase(w, "warmup")
    for _ in range(spec["warmup_calls"]):
        gradients.warm_backward(model, inputs)
    Cuda.sync()
    _phase(w, "profiled_forward_backward")
    if spec["stage"] == "profile_ncu":
        torch.cuda.nvtx.range_push(spec["nvtx_range"])
        out = forward()
        Cuda.sync()
        torch.cuda.nvtx.range_pop()
        cots = gradients.cotangents(out, 0)  # drawn between the ranges: the random draw's kernel is neither pass's
        Cuda.sync()
        rid = torch.cuda.nvtx.range_start(spec["backward_range"])
        why = gradients.backward(out, cots)
        Cuda.sync()
        torch.cuda.nvtx.range_end(rid)
    else:  # two profiles, so each kernel list is one pass's
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as fprof:
            out = forward()
            Cuda.sync()
        cots = gradients.cotangents(out, 0)
        Cuda.sync()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as bprof:
            why = gradients.backward(out, cots)
            Cuda.sync()
        result["kernels"] = [{**k, "part": "forward"} for k in _kernel_list(fprof)] + [
            {**k, "part": "backward"} for k in _kernel_list(bprof)
        ]
    if why is not None:
        raise RuntimeError(f"no backward to profile: {why}")


def main() -> None:
    Worker().run(body)


if __name__ == "__main__":
    main()
