"""Profile the model's forward (or forward+backward step) with each module's calls marked.

Each module of the model gets a pre- and a post-hook that open and close a profiler range named
``kfmod::<path>``, so every op the profiler records sits under the ranges of the modules that were
running (the dynamic call stack, not the static tree); each profiled step sits under ``kftune::step``.
The backward's ops run outside any module (on the autograd engine's thread on a GPU): each carries
the sequence number of the forward op it differentiates, which places it in that op's modules.

What comes out is a flat list of :class:`ProfEvent` (plain data: the ranking in
:mod:`kernelfix.tune.rank` is a pure function of it, tested on recorded profiles).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections import defaultdict
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.utils._pytree as pytree
from pydantic import BaseModel, ConfigDict

from kernelfix.tune.model_call import ModelCall, describe_call

MODULE_MARK = "kfmod::"
STEP_MARK = "kftune::step"
WARMUP_STEPS = 3


class ProfEvent(BaseModel):
    """One profiler event as the ranking reads it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    parent: int | None = None  # index of the enclosing event on its thread
    cpu_us: float = 0.0  # self CPU time
    kernel_us: float = 0.0  # device time of the kernels this event launched itself
    seq: int = -1  # autograd sequence number (forward op, and the backward node that differentiates it)
    thread: int = 0
    fwd_thread: int = 0  # a backward node: the thread its forward op ran on


class Profile(BaseModel):
    """A profiled run of ``steps`` steps: the events, and each module's calls and input signatures."""

    model_config = ConfigDict(extra="forbid")

    events: list[ProfEvent]
    steps: int
    measure: str  # "cuda_kernels" or "cpu_time"
    calls: dict[str, int]  # module path (below the model) -> calls over all steps
    shapes: dict[str, list[str]]  # module path -> distinct signatures, first seen first
    classes: dict[str, str]  # module path -> class name
    step_ms: float  # one step without the profiler (median)
    kinds: dict[
        str, str
    ] = {}  # module path -> its kind (class, forward code, weights' layout, call signature): one target each
    stacks: list[
        str
    ] = []  # module paths that hold a list of several modules of one kind (a model's layers): not one kernel


def step_fn(model: nn.Module, call: ModelCall, *, backward: bool) -> Callable[[], object]:
    """One forward (under the call's grad mode and autocast), and with ``backward`` its backward under a fixed
    random cotangent, gradients cleared first: what the ranking profiles and the keep decision times."""
    args, kwargs = call.call_args()
    params = [p for p in model.parameters() if p.requires_grad]
    cotangents: list[torch.Tensor] | None = None

    def run():
        nonlocal cotangents
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.set_grad_enabled(backward or call.grad_enabled))
            for d in call.autocast:
                stack.enter_context(torch.autocast(d))
            out = model(*args, **kwargs)
        if not backward:
            return out
        for p in params:
            p.grad = None
        leaves = [x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor) and x.requires_grad]
        if cotangents is None:
            gen = torch.Generator(device="cpu").manual_seed(0)
            cotangents = [
                torch.randn(x.shape, generator=gen, dtype=torch.float32).to(x.device, x.dtype) for x in leaves
            ]
        torch.autograd.backward(leaves, cotangents)
        return out

    return run


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_step_ms(fn: Callable[[], object], device: torch.device, steps: int) -> float:
    times = []
    for _ in range(steps):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def profile_model(call: ModelCall, *, backward: bool, steps: int) -> Profile:
    """Profile ``steps`` steps of the model after a few untimed ones; hooks on its modules mark their calls."""
    from torch.profiler import ProfilerActivity, profile, record_function

    model, device = call.module, call.device
    paths = {m: p for p, m in model.named_modules()}  # the first name of a module used twice
    calls: dict[str, int] = defaultdict(int)
    shapes: dict[str, list[str]] = defaultdict(list)
    ranges: list = []
    counting = [False]
    kinds: dict[str, str] = {}

    def pre(module: nn.Module, args: tuple, kwargs: dict) -> None:
        path = paths[module]
        if counting[0]:
            calls[path] += 1
            sig = ", ".join(describe_call(args, kwargs))
            if sig not in shapes[path]:
                shapes[path].append(sig)
            if path not in kinds:
                kinds[path] = module_kind(module, args, kwargs)
        r = record_function(MODULE_MARK + path)
        r.__enter__()
        ranges.append(r)

    def post(module: nn.Module, args: tuple, *rest) -> None:
        if ranges:
            ranges.pop().__exit__(None, None, None)

    step = step_fn(model, call, backward=backward)
    for _ in range(WARMUP_STEPS):
        step()
    plain_ms = median_step_ms(step, device, max(steps, 5))
    handles = []
    try:
        for m in paths:
            handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(m.register_forward_hook(post, always_call=True))
        step()  # the hooks' own first call
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        prof = profile(activities=activities)
        with _stderr_off():  # the profiler's own start and stop lines (USDT: ... profiler_start) are not the user's
            prof.__enter__()
        try:
            counting[0] = True
            for _ in range(steps):
                with record_function(STEP_MARK):
                    step()
                sync(device)
            counting[0] = False
        finally:
            with _stderr_off():
                prof.__exit__(None, None, None)
    finally:
        for h in handles:
            h.remove()
    return Profile(
        events=flatten(prof.events(), cuda=device.type == "cuda"),
        steps=steps,
        measure="cuda_kernels" if device.type == "cuda" else "cpu_time",
        calls=dict(calls),
        shapes=dict(shapes),
        classes={p: type(m).__name__ for m, p in paths.items()},
        step_ms=plain_ms,
        kinds=kinds,
        stacks=[p for m, p in paths.items() if _is_stack(m)],
    )


def module_kind(module: nn.Module, args: tuple, kwargs: dict) -> str:
    """What makes two modules one target: the same class and forward code, parameters and buffers of the same shapes
    and dtypes, called the same way (tensors' shapes and dtypes, the other values; an object such as a cache by its
    type: what it holds per layer is the capture's business). Copies of one layer differ only in their weights."""
    import hashlib

    cls = type(module)
    code = getattr(cls.forward, "__code__", None)
    weights = [(n, tuple(t.shape), str(t.dtype)) for n, t in [*module.named_parameters(), *module.named_buffers()]]

    def leaf(x: object) -> str:
        if isinstance(x, torch.Tensor):
            return f"{x.dtype}{tuple(x.shape)}"
        if isinstance(x, (bool, int, float, str, type(None), torch.dtype, torch.device)):
            return repr(x)
        return type(x).__qualname__

    flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    text = repr(
        (
            cls.__module__,
            cls.__qualname__,
            code.co_filename if code else "",
            code.co_firstlineno if code else 0,
            weights,
            str(spec),
            [leaf(x) for x in flat],
        )
    )
    return f"{cls.__qualname__}:{hashlib.sha1(text.encode()).hexdigest()[:12]}"


def _is_stack(module: nn.Module) -> bool:
    """A module that holds a list of several modules of one class (a model's layers, a network's stages)."""
    for child in module.children():
        if isinstance(child, (nn.ModuleList, nn.Sequential)):
            classes = [type(m) for m in child.children()]
            if len(classes) >= 2 and len(set(classes)) == 1:
                return True
    return False


def flatten(events, *, cuda: bool) -> list[ProfEvent]:
    """The profiler's CPU-side events as ProfEvents: device-side events are read through the kernels each CPU
    event launched (``FunctionEvent.kernels``), so no kernel is counted twice."""
    from torch.autograd import DeviceType

    cpu = [e for e in events if e.device_type == DeviceType.CPU and not e.is_async]
    index = {id(e): i for i, e in enumerate(cpu)}
    out = []
    for e in cpu:
        parent = index.get(id(e.cpu_parent)) if e.cpu_parent is not None else None
        out.append(
            ProfEvent(
                name=e.name,
                parent=parent,
                cpu_us=max(0.0, float(e.self_cpu_time_total)),
                kernel_us=_kernel_us(e) if cuda else 0.0,
                seq=int(e.sequence_nr),
                thread=int(e.thread),
                fwd_thread=int(e.fwd_thread),
            )
        )
    return out


def _kernel_us(e) -> float:
    """The kernels an op launched; a profiler range launches none (its device-side twin is not a kernel)."""
    if getattr(e, "is_user_annotation", False) or e.name.startswith((MODULE_MARK, STEP_MARK)):
        return 0.0
    return float(sum(k.duration for k in e.kernels))


@contextlib.contextmanager
def _stderr_off():
    """File descriptor 2 to /dev/null for a moment: what C++ code prints there (kineto's lines) stays off the terminal."""
    import os
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)
