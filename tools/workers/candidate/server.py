"""[candidate worker] The candidate's worker: one sandboxed process per evaluation, for compile, every trial and timing.

``python -m kernelfix.tools.workers.candidate.server SPEC.json``. In order:

1. binds the CUDA entry points the clock uses, wraps the compilers (load_inline,
   Triton) so the judge's hang deadline pauses while one runs, and marks
   Triton's launches for the op record;
2. imports the candidate (building its extensions) and builds
   ``ModelNew(*get_init_inputs())`` under the judge's init seed: ``built``;
3. answers requests: ``warmup`` (for a small task, one forward on inputs it draws
   itself under a seed of its own, so first-call compilation and autotuning happen
   before any trial: ``warmed``; the judge asks under a shared hold of the GPU's
   lease, so no warm-up runs beside another candidate's timing), ``trial`` (a
   forward on inputs that arrive in an arena, under the op recorder; the outputs
   go back into the output arena), ``ops``,
   ``time`` (CUDA events, then back-to-back calls bracketed by messages the
   judge stamps), ``release``.

No trial's inputs exist in this process before its import and build are over,
and none touch the disk. Comparison, the reference and the baselines live in
another process.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelfix.tools.import_hooks import after_import
from kernelfix.tools.task_size import tensor_bytes as nbytes
from kernelfix.tools.timing.clock import Cuda, perf_counter
from kernelfix.tools.transport import Arena, TensorSpec, UnsupportedValue, flatten, unflatten
from kernelfix.tools.transport.protocol import (
    Builds,
    Built,
    CandidateOutput,
    CandidateSpec,
    CandidateTiming,
    Compiler,
    Exit,
    Go,
    Ops,
    OpsRequest,
    Release,
    Released,
    RunTrial,
    Standby,
    Time,
    Timed,
    WallEnd,
    WallIssued,
    WallStart,
    Warmed,
    Warmup,
)
from kernelfix.tools.transport.tree import dtype_name, read, spec_of, write_values
from kernelfix.tools.workers.candidate.ahead import triton_driver_ahead, triton_key_ahead
from kernelfix.tools.workers.candidate.interpreter import patch_once
from kernelfix.tools.workers.child import Worker, build_model, load_module, load_task, seed_all, sync, to_device

triton_key_ahead()  # in a Triton fork server, before any worker forks from it


class NoModelNew(Exception):
    pass


@dataclass
class _Inputs:
    """One input slot: the arena, the tensors forward gets (views of it, or device copies of a host arena)."""

    arena: Arena
    views: list
    local: list
    obj: list
    copies: bool

    @classmethod
    def bind(cls, arena: Arena, specs: list[TensorSpec], skeleton: Any, device: str) -> "_Inputs":
        views = [read(arena, s) for s in specs]
        copies = arena.spec.kind == "host" and device.startswith(
            "cuda"
        )  # a host arena on a GPU machine: copy in and out
        local = [v.to(device) for v in views] if copies else views
        return cls(arena, views, local, unflatten(skeleton, local), copies)

    def refresh(self) -> None:
        """New contents in the same tensors (the judge rewrote the arena)."""
        if self.copies:
            for loc, v in zip(self.local, self.views):
                loc.copy_(v)

    def write_back(self) -> None:
        """Where forward wrote to its inputs, the arena shows it (the judge checks there)."""
        if self.copies:
            for loc, v in zip(self.local, self.views):
                v.copy_(loc)


class CandidateRunner:
    def __init__(self, w: Worker, spec: CandidateSpec):
        self.w, self.spec = w, spec
        self.device = spec.device
        self.slots: dict[int, _Inputs] = {}
        self.outs: dict[int, tuple[Arena, list[TensorSpec]]] = {}
        self.recorder = None

    # ------------------------------------------------------------------ compile

    def start(self) -> None:
        """What needs no candidate: torch, CUDA, Triton, the recorder. A standby worker (started while
        the model is still writing its reply) then waits for ``go``: the candidate exists by then."""
        import torch  # noqa: F401

        if self.device.startswith("cuda"):
            Cuda.bind()
            triton_driver_ahead()  # CUDA is up, no candidate yet: Triton's driver, target and backend key now
        elif os.environ.get("TRITON_INTERPRET") == "1":
            after_import("triton", lambda _: patch_once())  # the CPU's interpreter, without its repeated patching
        if self.spec.record_ops:
            from kernelfix.tools.workers.candidate.recorder import OpRecorder, mark_function_backward, suspend_in_triton

            self.recorder = OpRecorder()
            after_import("triton", lambda _: suspend_in_triton(self.recorder))  # when a candidate imports it
            if self.spec.backward:
                mark_function_backward(self.recorder)
        if self.spec.standby:
            self.w.say(Standby())
            self.w.requests = self.w.chan.requests()
            while True:
                got = self.w.requests.recv()
                if got is None or got[0].get("type") == Exit.KIND:
                    raise SystemExit(0)
                if got[0].get("type") == Go.KIND:
                    break

    def build(self) -> None:
        import torch

        from kernelfix.tools.compile import load_inline
        from kernelfix.tools.config import BuildOptions

        self.task = load_task(self.w, self.spec.task_path)
        load_inline.install(Path(self.spec.build_dir), self.device, BuildOptions(**self.spec.build))
        _watch_compilers(self.w)
        self.w.phase("import_candidate")
        t0 = perf_counter()
        try:
            mod = load_module(self.spec.candidate_path, "kernelfix_candidate")
        finally:
            # What each extension build did (cache hit or not), for the compile report; sent on failure too.
            self.w.say(Builds(builds=[b.model_dump() for b in load_inline.records()]))
        cls = getattr(mod, "ModelNew", None)
        if cls is None:
            raise NoModelNew("the candidate module defines no ModelNew")
        import_s = perf_counter() - t0
        self.w.phase("build_model")
        self.model = build_model(cls, self.task, self.spec.init_seed, self.device)
        torch.set_grad_enabled(False)
        self.w.say(Built(import_seconds=import_s))

    def warmup(self, req: Warmup, fds: list[int]) -> None:
        """One forward on inputs of its own, for small tasks: first-call compilation and autotuning
        happen here, before any trial, and never count against a trial's deadline. ``input_bytes``:
        the inputs' size as the judge counted it (else counted here, on the meta device)."""
        import torch

        rid = req.id
        limit = self.spec.warmup_max_bytes
        if limit <= 0:
            self.w.say(Warmed(done=False, why="off"), rid)
            return
        size = req.input_bytes
        if size is None:
            from kernelfix.tools.task_size import without_dynamo

            def on_meta() -> int:
                seed_all(0)
                with torch.device("meta"):  # shapes without memory
                    return nbytes(self.task.get_inputs())

            try:
                size = without_dynamo(on_meta)
            except Exception:
                self.w.say(Warmed(done=False, why="input sizes unknown"), rid)
                return
        if size > limit:
            self.w.say(Warmed(done=False, why=f"inputs are {size / 2**30:.1f} GiB"), rid)
            return
        self.w.phase("warmup")
        from kernelfix.tools import input_sets

        # Each input set's shapes compile (and autotune) here too, not inside a timed trial.
        sets = list(range(1, len(self.task.get_input_sets()) + 1)) if input_sets.has_sets(self.task) else [None]
        ms = 0.0
        for k in sets:
            seed_all(secrets.randbelow(2**30))  # not any trial's seed: nothing learned here helps a trial
            try:
                with torch.device(self.device):
                    inputs = input_sets.pick(self.task, k)
            except Exception:
                inputs = input_sets.pick(self.task, k)
            inputs = to_device(list(inputs), self.device)
            t0 = perf_counter()
            if self.spec.backward:
                from kernelfix.tools.correctness import gradients

                gradients.warm_backward(self.model, inputs)
            else:
                self.model(*inputs)
            sync(self.device)
            ms += (perf_counter() - t0) * 1e3
            del inputs
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()
        self.w.say(Warmed(done=True, ms=ms), rid)

    # ------------------------------------------------------------------ requests

    def trial(self, req: RunTrial, fds: list[int]) -> None:
        import torch

        t_open = perf_counter()
        slot = req.slot
        fds = list(fds)
        if req.in_arena is not None:
            arena = Arena.open(req.in_arena, fds.pop(0))
            self.slots[slot] = _Inputs.bind(arena, req.input_specs, req.inputs, self.device)
        else:
            self.slots[slot].refresh()
        out_arena = Arena.open(req.out_arena, fds.pop(0))
        expected = req.expected_specs
        self.outs[req.out] = (out_arena, expected)
        inputs = self.slots[slot]
        index = req.index
        open_ms = (perf_counter() - t_open) * 1e3
        self.w.phase("forward", trial=index)
        reply = CandidateOutput(index=index, out=req.out, open_ms=open_ms)
        t0 = perf_counter()
        if self.spec.backward:
            out = self._forward_backward(inputs.obj, req, expected, reply)
        else:
            out = self.recorder.run(self.model, *inputs.obj) if self.recorder is not None else self.model(*inputs.obj)
            sync(self.device)
        reply.forward_ms = (perf_counter() - t0) * 1e3
        self.w.phase("handoff", trial=index)
        t1 = perf_counter()
        try:
            reply.skeleton, leaves = flatten(out)
            reply.specs = [spec_of(t) for t in leaves]
            wrong_device = next(
                (i for i, t in enumerate(leaves) if t.device.type != torch.device(self.device).type), None
            )
            if wrong_device is not None:
                raise UnsupportedValue(
                    f"output tensor {wrong_device} is on {leaves[wrong_device].device.type}, expected {self.device}"
                )
            if len(leaves) == len(expected) and all(
                (dtype_name(t.dtype), list(t.shape)) == (e.dtype, e.shape) for t, e in zip(leaves, expected)
            ):
                for e, t in zip(expected, leaves):
                    write_values(out_arena, e, t)
                sync(self.device)
                reply.copied = True
        except UnsupportedValue as e:
            reply.unsupported = str(e)
        inputs.write_back()
        sync(self.device)
        del out
        reply.handoff_ms = (perf_counter() - t1) * 1e3
        if self.device.startswith("cuda"):
            reply.allocated = int(torch.cuda.memory_allocated())
        self.w.say(reply, req.id)

    def _forward_backward(self, payload: Any, req: RunTrial, expected: list[TensorSpec], reply: CandidateOutput) -> Any:
        """--backward: forward with grad on fresh leaves, backward with the judge's cotangent (both under the
        recorder); returns [output, gradients] in the order the reference's gradients come (``req.grads``)."""
        import torch

        from kernelfix.tools.correctness import gradients
        from kernelfix.tools.transport.tree import torch_dtype

        inputs, cots = payload
        keys = req.grads
        args, leaf_list = gradients.grad_leaves(inputs)
        gradients.clear_grads(self.model)
        rec = self.recorder
        with torch.enable_grad():
            out = rec.run(self.model, *args) if rec is not None else self.model(*args)
            sync(self.device)
            self.w.phase("backward", trial=req.index)
            t0 = perf_counter()
            why = rec.run_backward(gradients.backward, out, cots) if rec is not None else gradients.backward(out, cots)
            sync(self.device)
            reply.backward_ms = (perf_counter() - t0) * 1e3
        fill = [
            torch.zeros(e.shape, dtype=torch_dtype(e.dtype), device=self.device)
            for e in expected[len(expected) - len(keys) :]
        ]
        grads, missing = gradients.candidate_grads(self.model, leaf_list, keys, fill)
        if why is not None:
            why = f"{why}: {gradients.NO_GRAD_HINT}"
        reply.no_gradient = why or missing
        gradients.clear_grads(self.model)
        return [out, grads]

    def ops(self, req: OpsRequest, fds: list[int]) -> None:
        r = self.recorder
        self.w.say(
            Ops(
                ops=r.ops() if r is not None else None,
                recorder_intact=r.intact if r is not None else True,
                backward_ops=r.backward_ops() if r is not None and self.spec.backward else None,
            ),
            req.id,
        )

    def time(self, req: Time, fds: list[int]) -> None:
        from kernelfix.tools.timing.clock import l2_flush_buffer, time_cuda, wall_check_calls

        inputs = self.slots[req.slot].obj
        t = req.timing
        flush = l2_flush_buffer(t.get("flush_l2", True))
        model = self.model

        def progress(n: int) -> None:
            self.w.phase("time_candidate", done=n)

        self.w.phase("time_candidate")
        forward = None
        if t.get(
            "backward"
        ):  # forward (grad enabled), then forward+backward: what ranks, and what the wall check calls
            fwd, call = _passes(model, inputs)
            forward = time_cuda(fwd, t, flush, progress)
        else:

            def call() -> None:
                model(*inputs)

        cand = time_cuda(call, t, flush, progress)
        del flush
        self.w.say(
            CandidateTiming.model_validate({"candidate": cand, "forward": forward})
        )  # validated here, before the wall check

        # Judge-observed wall clock: back-to-back calls, one device-wide sync at the end,
        # bracketed by messages the parent stamps on arrival. Work on side streams or
        # threads, or a patched timer, shows up as wall time the events did not see.
        # Nothing validated inside the bracket: the issue stamp is built before it, the end stamp unvalidated.
        self.w.phase("wall_check")
        k = wall_check_calls(cand["median_ms"])
        issued = WallIssued()
        Cuda.sync()
        self.w.say(WallStart(calls=k))
        t0 = perf_counter()
        done = 0
        while done < k:
            call()
            done += 1
            if perf_counter() - t0 > 5.0:
                break
        self.w.say(issued)  # the host is done issuing: what the sync waits for next is the GPU's
        Cuda.sync()
        self.w.say(WallEnd.model_construct(calls=done))
        self.w.say(Timed(), req.id)

    def release(self, req: Release, fds: list[int]) -> None:
        for sid in req.slots:
            self.slots.pop(sid, None)
        for oid in req.outs:
            self.outs.pop(oid, None)
        if self.device.startswith("cuda") and req.final:
            # The stage is over and the lease goes back: what the allocator holds free is another judge's to use.
            # Between trials it keeps them: the next forward takes the same blocks (within the stage's room).
            Cuda.sync()
            Cuda.empty_cache()
        self.w.say(Released(), req.id)


def _passes(model: Any, payload: Any) -> tuple[Any, Any]:
    """--backward timing: forward with grad enabled, and forward+backward on the judge's cotangent."""
    from kernelfix.tools.correctness import gradients

    inputs, cots = payload
    return gradients.timed_passes(model, inputs, cots, strict=True)


def _watch_compilers(w: Worker) -> None:
    """Tell the judge while a compiler runs (an extension build, a Triton kernel's compilation):
    a hang deadline counts only the time outside them; the compile limit counts all of it. Each
    library is wrapped when imported (kernelfix.tools.import_hooks)."""
    import functools

    depth = 0

    def watched(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            nonlocal depth
            depth += 1
            if depth == 1:
                w.say(Compiler(running=True))
            try:
                return fn(*args, **kwargs)
            finally:
                depth -= 1
                if depth == 0:
                    w.say(Compiler(running=False))

        return run

    def cpp_extension(ce) -> None:
        ce.load_inline = watched(ce.load_inline)
        ce.load = watched(ce.load)

    def triton_compiler(_) -> None:
        try:
            import triton.compiler as tc
            import triton.compiler.compiler as tcc
        except ImportError:
            return
        tc.compile = tcc.compile = watched(tcc.compile)  # JITFunction imports it from triton.compiler when it binds

    after_import("torch.utils.cpp_extension", cpp_extension)
    after_import("triton", triton_compiler)


def main() -> None:
    w = Worker()

    def body(w: Worker) -> None:
        runner = CandidateRunner(w, CandidateSpec.model_validate(w.spec))
        runner.start()
        runner.build()
        w.serve(
            {
                Warmup: runner.warmup,
                RunTrial: runner.trial,
                OpsRequest: runner.ops,
                Time: runner.time,
                Release: runner.release,
            }
        )

    w.run(body)


if __name__ == "__main__":
    main()
