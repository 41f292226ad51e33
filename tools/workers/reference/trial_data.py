"""[reference worker] A trial's tensors in the reference worker: inputs, the reference's output, the cache."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kernelfix.tools import input_sets
from kernelfix.tools.correctness import input_variants
from kernelfix.tools.correctness.chunked import leaves, vacuous_tolerance
from kernelfix.tools.task_size import tensor_bytes as nbytes
from kernelfix.tools.timing.clock import perf_counter
from kernelfix.tools.transport.protocol import TrialPlan
from kernelfix.tools.workers.child import TaskProblem, seed_all, short, sync, to_device


@dataclass
class TrialData:
    """One trial's tensors, as this worker computed them."""

    inputs: list | None = None
    out: Any = None
    out64: Any = None
    noise: float | None = None
    ref_ms: float = 0.0
    vacuous: str | None = None
    float64_note: str | None = None
    skipped: str | None = None
    out64_transient: bool = False  # computed for one check, beyond the cache's budget: dropped after it
    inputs_only: bool = False  # made for timing: no float64 truth, never cached, never checked against
    peak: int | None = None  # the allocator's peak just after the trial's forward (and backward): CUDA only
    # --backward: the cotangent sent with the inputs, the gradients the reference got (and in float64)
    cot: list | None = None
    grads: list | None = None
    grad_keys: list = field(default_factory=list)
    grads64: list | None = None
    grad_noise: list | None = None

    @property
    def size(self) -> int:
        return (
            nbytes(self.inputs)
            + nbytes(self.out)
            + nbytes(self.out64)
            + nbytes(self.cot)
            + nbytes(self.grads)
            + nbytes(self.grads64)
        )

    @property
    def payload(self) -> Any:
        """What the input arena carries: the inputs, and under --backward the cotangent beside them."""
        return self.inputs if self.cot is None else [self.inputs, self.cot]

    @property
    def expected(self) -> Any:
        """What the output arena receives: the output, and under --backward the gradients beside it."""
        return self.out if self.grads is None else [self.out, self.grads]


class Trials:
    """The part of :class:`ReferenceServer` that makes a trial's tensors: its inputs (drawn under the trial's seed,
    or varied from another trial's), the reference's output (and gradients under --backward), and the cache
    that keeps them while they fit ``cache_bytes``."""

    @contextlib.contextmanager
    def _timed(self, key: str) -> Iterator[None]:
        """Add the block's seconds (its GPU work finished) to this request's ``seconds[key]``: the breakdown
        the judge adds to the verdict's (``correctness.ref_<key>``)."""
        t0 = perf_counter()
        yield  # a block that raises is not timed: its error is what the request reports, not a sync's
        sync(self.device)
        self.seconds[key] = self.seconds.get(key, 0.0) + perf_counter() - t0

    def _draw(self, seed: int, input_set: int | None = None) -> list:
        import torch

        def get() -> list:  # get_inputs(), or one set of get_input_sets() (tools/input_sets.py)
            try:
                return input_sets.pick(self.task, input_set)
            except input_sets.InputSetsProblem as e:
                raise TaskProblem(str(e)) from e

        seed_all(seed)
        if self.on_device:
            try:
                # The same distributions get_inputs() asks for, drawn where they are used: a 6 GiB
                # input takes milliseconds here and ~10 s on the CPU.
                with torch.device(self.device):
                    inputs = get()
            except TaskProblem:
                raise
            except Exception as e:
                self.on_device = False
                self.draw_note = f"get_inputs() fails on the device ({short(e)}): drawn on the CPU"
                seed_all(seed)
                inputs = get()
        else:
            inputs = get()
        if not isinstance(inputs, (list, tuple)):
            raise TaskProblem(f"get_inputs() returned {type(inputs).__name__}, not a list")
        return to_device(list(inputs), self.device)

    def _inputs_of(self, index: int) -> list:
        if index in self.cache:
            return self.cache[index].inputs or []
        return self._draw(self.plans[index].seed, self.plans[index].input_set)

    def _get(self, plan: TrialPlan, inputs_only: bool = False) -> TrialData:
        """The trial's tensors: cached, the last one made, or made now. ``inputs_only`` (the benchmark's timed
        inputs): what a check needs beyond the inputs and the output (the float64 truth) is not made, and such a
        trial is never cached nor given to a check."""
        if plan.index in self.cache:
            return self.cache[plan.index]
        if self.recent is not None and self.recent[0] == plan.index and (inputs_only or not self.recent[1].inputs_only):
            return self.recent[1]
        if self.recent is not None:  # one uncached trial at a time
            (last_index, last) = self.recent
            self.recent = None
            if not _blocks_reused(self.plans.get(last_index), last, plan, inputs_only):
                with self._timed("free"):
                    free(self.cuda)  # its memory goes back to the driver before the next trial's
        data = self._compute(plan, inputs_only)
        if inputs_only:
            self.recent = (plan.index, data)
        elif data.skipped is None and self.cache_used + data.size <= self.spec.cache_bytes:
            self.cache[plan.index] = data
            self.cache_used += data.size
        elif data.skipped is None:
            self.recent = (plan.index, data)
        return data

    def _compute(self, plan: TrialPlan, inputs_only: bool = False) -> TrialData:
        import torch

        self.w.phase("reference_trial", trial=plan.index)
        try:
            with self._timed("draw"):
                if plan.variant:
                    # The base trial's inputs are drawn again from their seed, bit for bit: their moments are kept.
                    known = self.input_moments.setdefault(plan.variant_of or 0, {})
                    inputs, changed = input_variants.apply(
                        self._inputs_of(plan.variant_of or 0), plan.variant, plan.seed, known
                    )
                    if not changed:
                        return TrialData(skipped="no floating-point tensor inputs to vary")
                else:
                    inputs = self._draw(plan.seed, plan.input_set)
            t0 = perf_counter()
            if self.spec.backward:
                out, cot, keys, grads = self._forward_backward(self.model, inputs, plan.seed, trial=plan.index)
            else:
                with torch.no_grad():
                    out = self.model(*inputs)
            sync(self.device)
            ref_ms = (
                perf_counter() - t0
            ) * 1e3  # under --backward forward+backward: the candidate's deadline covers both
            self.seconds["forward"] = self.seconds.get("forward", 0.0) + ref_ms / 1e3
            peak = int(torch.cuda.max_memory_allocated()) if self.cuda else None  # before the float64 check's own
        except TaskProblem:
            raise
        except Exception as e:
            if oom(e):
                raise
            raise TaskProblem(f"{short(e)} while running Model.forward on trial {plan.index}") from e
        if plan.variant and not finite(out):
            return TrialData(
                skipped=f"the reference is not finite on {input_variants.describe(plan.variant, plan.variant_of or 0)}"
            )
        data = TrialData(inputs=inputs, out=out, ref_ms=ref_ms, peak=peak, inputs_only=inputs_only)
        if self.spec.backward:
            data.cot, data.grad_keys, data.grads = cot, keys, grads
        if plan.float64 and self.model64 is not None and not inputs_only:
            with self._timed("float64"):
                self._float64(plan, data)
        if plan.purpose == "correctness":
            # A property of the trial's reference output, which its seed decides: found once per worker (a 6 GiB
            # output's two passes cost tens of milliseconds, and a warm judge computes its trials again per verdict).
            if plan.index not in self.vacuous_of and not inputs_only:
                with self._timed("vacuous"):
                    self.vacuous_of[plan.index] = vacuous_tolerance(out, atol=self.spec.atol, rtol=self.spec.rtol)
            data.vacuous = self.vacuous_of.get(plan.index)
        return data

    def _forward_backward(
        self, model: Any, inputs: list, seed: int, cot: list | None = None, trial: int | None = None
    ) -> tuple[Any, list, list, list]:
        """Forward with grad, backward with the trial's cotangent: (output, cotangent, gradient keys, gradients)."""
        import torch

        from kernelfix.tools.correctness import gradients
        from kernelfix.tools.transport.protocol import GradKey

        args, leaf_list = gradients.grad_leaves(inputs)
        gradients.clear_grads(model)
        with torch.enable_grad():
            out = model(*args)
            cot = gradients.cotangents(out, seed) if cot is None else cot
            sync(self.device)  # a CUDA fault from here on is the backward's: the message says which pass
            try:
                why = gradients.backward(out, cot)
                sync(self.device)
            except Exception as e:
                if oom(e):
                    raise
                where = f" on trial {trial}" if trial is not None else ""  # None: the float64 check's, which notes it
                raise TaskProblem(
                    f"{short(e)} in torch's own backward of Model{where} (the reference's autograd, no candidate's code)"
                ) from e
        if why is not None:
            raise TaskProblem(f"{gradients.NO_BACKWARD} ({why}): run it without --backward")
        keys, grads = gradients.reference_grads(model, leaf_list)
        if not keys:
            raise TaskProblem(
                f"{gradients.NO_BACKWARD} (no floating input or parameter gets a gradient): run it without --backward"
            )
        gradients.clear_grads(model)
        out = detached(out)
        return out, cot, [GradKey.model_validate(k) for k in keys], [g.detach() for g in grads]


def _blocks_reused(last_plan: TrialPlan | None, last: TrialData, plan: TrialPlan, inputs_only: bool) -> bool:
    """Whether the next trial's tensors take exactly the blocks the last one's leave in torch's allocator: the same
    input set (the same shapes), and no float64 output left over unless the next trial makes one too. Then the
    allocator hands those blocks (6-12 GiB each at published sizes) straight back, where giving them to the driver
    and asking again cost every trial tens of milliseconds; what it holds is never more than the trial's own
    declared working set (tools/gpu/room.py), and an idle reference empties it when another judge wants the GPU
    (``trim``). Otherwise its memory goes back first, as before."""
    if last_plan is None or last_plan.input_set != plan.input_set:
        return False
    makes_float64 = plan.float64 and not inputs_only
    return last.out64 is None or makes_float64


def free(cuda: bool) -> None:
    import torch

    if cuda:
        torch.cuda.empty_cache()  # a candidate's process needs what this one's allocator no longer holds


def oom(e: BaseException) -> bool:
    return "OutOfMemoryError" in [c.__name__ for c in type(e).__mro__] or "out of memory" in str(e).lower()


def finite(obj: Any) -> bool:
    import torch

    return all(
        bool(torch.isfinite(x).all()) for _, x in leaves(obj) if isinstance(x, torch.Tensor) and x.is_floating_point()
    )


def detached(obj: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach()
    if isinstance(obj, (list, tuple)):
        return type(obj)(detached(o) for o in obj)
    if isinstance(obj, dict):
        return {k: detached(v) for k, v in obj.items()}
    return obj
