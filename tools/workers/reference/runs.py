"""[reference worker] The reference's own runs: the baselines' timing (eager, torch.compile) and the determinism check."""

from __future__ import annotations

import sys
from typing import Any

from kernelfix.tools.correctness.chunked import leaves, relative_error, same_bytes
from kernelfix.tools.task_size import tensor_bytes as nbytes
from kernelfix.tools.transport.protocol import (
    BaselineRequest,
    BaselineTimes,
    BaselineWarm,
    Determinism,
    DeterminismRequest,
)
from kernelfix.tools.workers.child import short, sync
from kernelfix.tools.workers.reference.trial_data import TrialData, free


class Runs:
    """The part of :class:`ReferenceServer` that runs the reference for its own sake: ``baseline`` (eager and
    torch.compile, timed) and ``determinism`` (the same trial twice)."""

    def baseline(self, req: BaselineRequest, fds: list[int]) -> None:
        """Eager and torch.compile on the first trial's inputs. ``warm_only``: compile and run once,
        time nothing (outside the GPU lease); else time both (under it)."""
        import torch

        from kernelfix.tools.timing.clock import bandwidth_gbps, l2_flush_buffer, time_cuda

        plan = req.trial
        self.plans[plan.index] = plan
        data = self._get(plan)
        inputs = data.inputs or []
        out_bytes = nbytes(data.out)
        t = req.timing
        if t.get("backward") and self.recent is not None and self.recent[1] is data:
            # Timing needs the inputs and the cotangent alone. The output and gradients kept beside the
            # timed passes' own (and autograd's temporaries) met 80 GiB for 38_L1Norm_'s 8 GiB trial; an
            # uncached trial is computed again when next asked.
            self.recent = None
            data = TrialData(inputs=data.inputs, cot=data.cot)
            free(self.cuda)
        torch.set_grad_enabled(False)
        if not hasattr(self, "_compiled"):
            self._compiled, self._compile_note = None, None
            if t.get("time_torch_compile", True):
                self.w.phase("compile_reference")
                _compile_threads(req.compile_threads)
                try:
                    cref = torch.compile(self.model)
                    if t.get("backward"):  # the training graph, and its backward compiled at its first call
                        self._passes(cref, data)[1]()
                    else:
                        cref(*inputs)
                    sync(self.device)
                    self._compiled = cref
                except Exception as e:  # a task torch.compile can't handle still gets an eager speedup
                    self._compile_note = f"torch.compile failed: {short(e)}"
                    torch._dynamo.reset()
        if req.warm_only:
            if (
                self._compiled is not None and plan.input_set is not None
            ):  # another set's shapes: compiled here, outside the lease
                if t.get("backward"):
                    self._passes(self._compiled, data)[1]()
                else:
                    self._compiled(*inputs)
                sync(self.device)
            self.w.say(BaselineWarm(), req.id)
            return
        flush = l2_flush_buffer(t.get("flush_l2", True))

        def progress(n: int) -> None:
            self.w.phase("timing", done=n)

        extra: dict[str, Any] = {}
        if t.get("backward"):  # forward (grad enabled) and forward+backward; the latter is what ranks
            self.w.phase("time_eager")
            fwd, both = self._passes(self.model, data)
            extra["eager_forward"] = time_cuda(fwd, t, flush, progress)
            eager = time_cuda(both, t, flush, progress)
            compiled = None
            if self._compiled is not None:
                self.w.phase("time_torch_compile")
                fwd, both = self._passes(self._compiled, data)
                extra["compiled_forward"] = time_cuda(fwd, t, flush, progress)
                compiled = time_cuda(both, t, flush, progress)
            _clear_grads(self.model)
        else:
            self.w.phase("time_eager")
            eager = time_cuda(lambda: self.model(*inputs), t, flush, progress)
            compiled = None
            if self._compiled is not None:
                self.w.phase("time_torch_compile")
                compiled = time_cuda(lambda: self._compiled(*inputs), t, flush, progress)
        del flush
        self.w.phase("bandwidth")
        bw = bandwidth_gbps()
        self.w.say(
            BaselineTimes.model_validate(
                dict(
                    eager=eager,
                    compiled=compiled,
                    compile_note=self._compile_note,
                    bytes_moved=nbytes(inputs) + out_bytes,
                    bandwidth_gbps=bw,
                    gpu=torch.cuda.get_device_name(0),
                    peak_bytes=int(torch.cuda.max_memory_allocated()),
                    **extra,
                )
            ),
            req.id,
        )

    def _passes(self, model: Any, data: TrialData) -> tuple[Any, Any]:
        """--backward timing's callables (gradients.timed_passes); torch.compile's module shares Model's parameters."""
        from kernelfix.tools.correctness import gradients

        return gradients.timed_passes(model, data.inputs or [], data.cot or [], params_of=self.model)

    def determinism(self, req: DeterminismRequest, fds: list[int]) -> None:
        """The same trial twice from scratch: inputs and outputs must agree (``kernelfix baseline``)."""
        import torch

        plan = req.trial
        # Two trials at once, beside nothing else: under --backward a trial is four tensors (inputs,
        # outputs, cotangent, gradients) and three held together filled the H100 for 21_Sigmoid.
        self.recent = None
        free(self.cuda)
        held = 0
        if self.cuda:  # the peaks `kernelfix baseline` reports: one trial's own, and this process's (baseline's reply)
            torch.cuda.reset_peak_memory_stats()
            held = torch.cuda.memory_allocated()
        first = self._compute(plan)
        first.out64 = first.cot = first.grads = first.grads64 = None  # only inputs and outputs are compared
        if self.spec.backward and self.cuda:
            # The second run's autograd needs the room (39_L2Norm_'s 8 GiB trial met 80 GiB): the first
            # waits in host memory, and each comparison brings it back a chunk at a time.
            first.inputs, first.out = _to_host(first.inputs), _to_host(first.out)
        free(self.cuda)
        second = self._compute(plan.model_copy(update={"float64": False}))  # its float64 note is first's
        # The second run's tensors lead: the comparisons bring the other's chunks to their device.
        inputs_equal = all(
            same_bytes(b, a)
            for (_, a), (_, b) in zip(leaves(first.inputs), leaves(second.inputs))
            if isinstance(a, torch.Tensor)
        )
        outputs_equal = all(
            isinstance(b, torch.Tensor) and same_bytes(b, a)
            for (_, a), (_, b) in zip(leaves(first.out), leaves(second.out))
            if isinstance(a, torch.Tensor)
        )
        self.w.say(
            Determinism(
                inputs_equal=inputs_equal,
                outputs_equal=outputs_equal,
                rel_error=relative_error(second.out, first.out),
                vacuous=first.vacuous,
                ref_ms=first.ref_ms,
                input_bytes=nbytes(first.inputs),
                output_bytes=nbytes(first.out),
                float64_note=first.float64_note or self.float64_note,
                trial_peak_bytes=first.peak - held if first.peak is not None else None,
                draw_note=self.draw_note or ("drawn on the device" if self.on_device else "drawn on the CPU"),
            ),
            req.id,
        )


def _to_host(obj: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_host(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _to_host(v) for k, v in obj.items()}
    return obj


def _clear_grads(model: Any) -> None:
    from kernelfix.tools.correctness import gradients

    gradients.clear_grads(model)


def _compile_threads(n: int | None) -> None:
    """Inductor's compile threads for the reference's torch.compile (``JudgeConfig.reference_compile_threads``).
    Its default, a pool of one subprocess per core (16 on the H100's host), starts interpreters that each import
    torch before compiling anything: on the H100 a cold GELU baseline's process took 27.2 s to 18.6 s in one thread,
    its first compiled call no slower (bench/baseline_compile_cold.py), and in a batch every task's pool competed
    with the other judges for the cores. 0 or None: inductor's own choice."""
    if not n:
        return
    import os

    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = str(n)  # read when inductor's config is imported (not yet, here)
    config = sys.modules.get("torch._inductor.config")
    if config is not None:  # imported already: its value is read at the first compilation
        config.compile_threads = n
