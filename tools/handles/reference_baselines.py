"""[judge] The reference's baselines (eager and torch.compile, timed in its worker): from memory, the
disk cache (``timing.baselines``) or measured; a part of :class:`~kernelfix.tools.handles.reference.Reference`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kernelfix.tools.handles.worker_handle import Deadline, WorkerGone
from kernelfix.tools.timing import baselines
from kernelfix.tools.transport.protocol import BaselineRequest, BaselineTimes, BaselineWarm, TrialPlan

if TYPE_CHECKING:
    from kernelfix.tools.gpu.floor import TaskFloor
    from kernelfix.tools.gpu.specs import GpuSpec


class ReferenceBaselines:
    """Uses the reference's lock, its worker's requests and its trials (``Reference``)."""

    def baseline(
        self,
        lease: Callable[..., Any],
        *,
        warm_gate: Callable[[], Any] | None = None,
        fresh: bool = False,
        input_set: int | None = None,
    ) -> baselines.Baseline:
        """Eager and torch.compile timings of the reference: from memory, the disk cache, or measured
        (torch.compile's compilation outside the GPU lease, under ``warm_gate`` when given, the
        timing inside it). ``fresh``: measure even when the disk cache has them. ``input_set``: on
        that set's first trial (tools/input_sets.py); default the first trial of all."""
        with self._lock:
            ready = self.ensure()
            if input_set is None:  # a task with sets: its first set is its default shape
                input_set = self.trials[0].input_set
            if input_set in self._baselines:
                return self._baselines[input_set]
            key = baselines.key(self.ctx.task, self.config, ready) + (
                f"-set{input_set}" if input_set is not None else ""
            )
            cached = None if fresh else baselines.load(key)
            if cached is not None:
                self._baselines[input_set] = cached
                return cached
        timing = baselines.timing_settings(self.config)
        trial = next((t for t in self.trials if t.input_set == input_set), self.trials[0])
        compile_note = None
        if self.config.time_torch_compile:  # torch.compile's compilation: CPU work, outside the lease
            # ... unless its tensors are large: its warm-up runs the compiled forward on the GPU, and
            # gigabytes taken there while another judge's stage holds the lease are taken from that stage.
            big = self.size is not None and self.size.trial_bytes > self.config.warmup_max_gb * 2**30
            with (
                warm_gate() if warm_gate is not None else contextlib.nullcontext(),
                self._big(lease, "baseline warm-up", shared=True) if big else contextlib.nullcontext(),
                self._lock,
            ):
                compile_note = self.warm_compiled(trial, timing)
            if compile_note is not None:
                timing = timing | {"time_torch_compile": False}
        with self.ctx.room("baseline"), lease("baseline"), self._lock:
            if input_set not in self._baselines:
                msg = self._request(
                    BaselineRequest(trial=trial, timing=timing, compile_threads=self.config.reference_compile_threads),
                    BaselineTimes,
                    self.config.bench_timeout_s,
                )
                self._baselines[input_set] = baselines.Baseline(
                    **msg.model_dump() | {"compile_note": compile_note or msg.compile_note}
                )
                baselines.save(key, self._baselines[input_set])
            return self._baselines[input_set]

    @contextlib.contextmanager
    def _big(self, lease: Callable[..., Any], what: str, *, shared: bool):
        """Room for the stage's memory, then the GPU's lock: for what runs a large trial on the GPU."""
        with self.ctx.room(what), lease(what, shared=shared):
            yield

    def warm_compiled(self, trial: TrialPlan, timing: dict[str, Any]) -> str | None:
        """torch.compile's first call on the reference (its compilation), bounded by
        ``reference_compile_timeout_s``: past it the worker is ended, and the note returned says that
        eager alone is timed (a training graph of 90_cumprod compiled for minutes on the H100 while
        the GPU lease waited). Any other failure is the worker's, as in every request."""
        limit = self.config.reference_compile_timeout_s
        deadline = Deadline("torch.compile of the reference", self.config.bench_timeout_s, hard_s=limit)
        try:
            self._send(
                BaselineRequest(
                    trial=trial, timing=timing, warm_only=True, compile_threads=self.config.reference_compile_threads
                ),
                BaselineWarm,
                deadline,
            )
            return None
        except WorkerGone as e:
            phase = (e.outcome.last("phase") or {}).get("phase")
            if not (e.outcome.timed_out and phase == "compile_reference"):
                self._failed(e)  # raises
            self._forget_worker()
            return f"torch.compile did not finish compiling the reference within {limit:g} s (judge.reference_compile_timeout_s): eager alone is timed"

    def task_floor(self, device: str, lease: Callable[..., Any], *, with_baseline: bool = True) -> "TaskFloor | None":
        """The task's floor on this GPU (tools/gpu/floor.py): its bytes and FLOPs at the GPU's peaks, and on a
        GPU eager's and torch.compile's times (the baselines, measured once per task and cached).
        None off the GPU, or when the reference has not reported its sizes."""
        from kernelfix.tools.gpu import floor

        if device != "cuda":
            return None  # a floor is the GPU's: a CPU session times nothing
        ready = self.wait()
        size = self.size
        if size is None:
            return None
        eager = compiled = None
        if with_baseline:
            try:
                base = self.baseline(lease)
                eager, compiled = base.eager.median_ms, base.compiled.median_ms if base.compiled else None
            except Exception:  # no baseline is no reason to hold up the session: the floor alone still helps
                pass
        return floor.build(
            input_bytes=size.input_bytes,
            output_bytes=size.output_bytes,
            flops=ready.task_flops,
            dtypes=ready.dtypes,
            gpu_props=ready.gpu_props,
            eager_ms=eager,
            compile_ms=compiled,
        )

    def gpu_spec(self, device: str) -> "GpuSpec | None":
        """The GPU's numbers (tools/gpu/specs.py), as the reference worker read them; None off the GPU."""
        ready = self.wait()
        if device != "cuda" or not ready.gpu_props:
            return None
        from kernelfix.tools.gpu import specs as gpu_specs

        return gpu_specs.measured(ready.gpu_props)
