"""[reference worker] The float64 truth: the task's Model run in float64, where that refines it."""

from __future__ import annotations

import os
from typing import Any

from kernelfix.sandbox.process_tree import rss_bytes
from kernelfix.tools import task_size
from kernelfix.tools.correctness.chunked import leaves, relative_error
from kernelfix.tools.transport.protocol import TrialPlan
from kernelfix.tools.workers.child import short, sync
from kernelfix.tools.workers.reference.trial_data import TrialData


class Float64Truth:
    """The part of :class:`ReferenceServer` that computes the float64 truth a trial is also judged by."""

    def _float64(self, plan: TrialPlan, data: TrialData) -> None:
        import torch

        self.w.phase("reference_float64", trial=plan.index)
        why = _no_float64_truth(self.model, data.inputs, data.out)
        if why is None:
            # A check it cannot afford is skipped with a note, not run into the memory limit (which would
            # end the worker and refuse a task that fits without it).
            need = sum(_bytes_as_float64(x) for x in (data.inputs, data.out, data.grads, data.cot) if x is not None)
            if self.cuda:
                free, where = torch.cuda.mem_get_info()[0], "of the GPU"
            else:
                free, where = (
                    (self.spec.memory_limit_bytes or 1 << 62) - rss_bytes([os.getpid()]),
                    "of the host memory the judge allows",
                )
            while need > 0.8 * free and self.cuda and self._drop_one_spare():
                # The evaluations' spare arenas (Handoff) are kept for speed: they go, one at a time, before a check does.
                free = torch.cuda.mem_get_info()[0]
            if need > 0.8 * free:
                why = f"skipped on trial {plan.index}: its float64 tensors need {task_size.size_text(need)}, {task_size.size_text(max(free, 0))} {where} is free"
        if why is None:
            try:
                if data.grads is not None:
                    out64, grads64 = self._backward_float64(data)
                else:
                    out64, grads64 = _forward_float64(self.model64, data.inputs, self.device), None
                why = _float64_mismatch(data.out, out64)
                if why is None:
                    # The float32 reference's own error: its inputs come from the trial's seed, so a warm judge
                    # finds it once per trial (a pass over 6 GiB and its float64 twin at published sizes).
                    if plan.index not in self.noise_of:
                        self.noise_of[plan.index] = relative_error(out64, data.out) or 0.0
                    data.out64, data.noise = out64, self.noise_of[plan.index]
                    if grads64 is not None and len(grads64) == len(data.grads or []):
                        data.grads64 = grads64
                        data.grad_noise = [relative_error(g64, g) or 0.0 for g64, g in zip(grads64, data.grads or [])]
                if self.cuda:
                    torch.cuda.empty_cache()  # its float64 inputs were temporaries: the arenas to come need the memory
            except Exception as e:  # an op without a float64 kernel, a forward that mixes dtypes, no memory
                why = f"the reference fails in float64 ({short(e)})"
                if self.cuda:
                    torch.cuda.empty_cache()
        if why is not None:
            data.float64_note = why
            if not why.startswith("skipped"):
                self.model64, self.float64_note = None, why  # a task with no float64 truth stays so

    def _backward_float64(self, data: TrialData) -> tuple[Any, list | None]:
        """The float64 model's output and gradients on the same inputs and cotangent (upcast)."""
        import torch

        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)  # tensors the forward creates itself follow
        try:
            ins, cot = _up(data.inputs, self.device), _up(data.cot, self.device)
            out64, _, keys, grads64 = self._forward_backward(self.model64, ins, 0, cot)
            sync(self.device)
        finally:
            torch.set_default_dtype(previous)
        if [k.name for k in keys] != [k.name for k in data.grad_keys]:
            return out64, None
        return out64, grads64


def _floating(obj: Any) -> list:
    import torch

    return [x for _, x in leaves(obj) if isinstance(x, torch.Tensor) and x.is_floating_point()]


def _no_float64_truth(model, inputs: list, out: Any) -> str | None:
    """Why a float64 run of the task is no truth to judge by (None when it is one): its floating
    tensors must all be float32 or half precision (float16, bfloat16), which float64 refines. A
    half-precision reference rounds as much as an honest kernel does, so it needs the rule as much."""
    tensors = _floating(inputs) + _floating(out)
    if hasattr(model, "parameters"):
        tensors += [p for p in model.parameters() if p.is_floating_point()] + [
            b for b in model.buffers() if b.is_floating_point()
        ]
    other = sorted({str(t.dtype).removeprefix("torch.") for t in tensors if t.dtype not in _refined()})
    if not tensors:
        return "no floating-point inputs, weights or outputs"
    if other:
        return f"the task is not float32 or half precision throughout ({', '.join(other)})"
    return None


def _refined() -> tuple:
    """The dtypes a float64 run refines: upcast for it, judged against it."""
    import torch

    return (torch.float32, torch.float16, torch.bfloat16)


def _bytes_as_float64(obj: Any) -> int:
    """What ``obj``'s tensors take once the refined ones are float64 (4x for half precision, 2x for float32)."""
    import torch

    total = 0
    for _, x in leaves(obj):
        if isinstance(x, torch.Tensor):
            total += x.numel() * 8 if x.dtype in _refined() else x.numel() * x.element_size()
    return total


def _up(obj: Any, device: str) -> Any:
    """float32 and half-precision tensors as float64 (on ``device``), anything else as it is."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device=device, dtype=torch.float64) if obj.dtype in _refined() else obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_up(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: _up(v, device) for k, v in obj.items()}
    return obj


def _forward_float64(model64, inputs: list, device: str) -> Any:
    import torch

    def up(obj: Any) -> Any:
        return _up(obj, device)

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # tensors the forward creates itself follow
    try:
        with torch.no_grad():
            out = model64(*up(inputs))
        sync(device)
    finally:
        torch.set_default_dtype(previous)
    return out


def _float64_mismatch(out: Any, out64: Any) -> str | None:
    import torch

    a, b = leaves(out), leaves(out64)
    if len(a) != len(b):
        return "the float64 reference returns a different structure"
    for (path, x), (_, y) in zip(a, b):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            if not isinstance(y, torch.Tensor) or y.dtype != torch.float64 or y.shape != x.shape:
                return f"the reference's {path} is not float64 when run in float64 (it casts)"
    return None
