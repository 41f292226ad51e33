"""Rank a model's modules by their share of the forward's time, and say which are worth a kernel.

Attribution (a pure function of the profile, :mod:`kernelfix.tune.model_profile`):

- **What is counted.** On a GPU, the device time of the CUDA kernels each op launched; on a CPU, each
  event's self CPU time (the op's own work, and the Python between ops in a module's forward). Only what
  runs inside a profiled step, or in the backward of one.
- **Where it goes.** An op's time goes to every module on the call stack when it ran (the ``kfmod::``
  ranges around it): a module's *share* includes its children's, its *self share* only its own code's.
  A backward op goes to the modules of the forward op it differentiates (their autograd sequence number).
  Time outside every submodule (the model's own code, gradient accumulation) stays with the model.
- **Ops.** A module's compute ops are the ATen ops its own code and its submodules call directly (not
  the ops those decompose into), less those that only view, copy or allocate memory (the judge's
  allowlist of non-computational ops: view, transpose, reshape, expand, clone, ...).

Which modules are worth a kernel (``candidate``), decided leaves first:

- not the whole model (tune optimizes its parts);
- it computes: some op that is not a view or a copy;
- no module inside it is worth a kernel (a block whose attention and MLP are: tuned through them, so
  the chosen modules never overlap and each swap is measured alone);
- it holds at least ``min_share`` of the forward: a module at 0.5% makes the model at most 1.005x faster
  however fast its kernel;
- it runs at least two compute ops per call: a kernel gains by fusing them (one memory round trip and
  one launch where there were several). A module of one op (a Linear: one GEMM) alone competes with the
  library's own kernel; where it lies inside a module worth a kernel, that module's kernel covers it.

The candidates are ranked by share; ``--top K`` optimizes the first K that capture can trace.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from kernelfix.tools.legality.allowlist import DEFAULT_ALLOWED, base_name
from kernelfix.tune.model_profile import MODULE_MARK, STEP_MARK, ProfEvent, Profile
from kernelfix.tune.tune_report import ModuleRow, Ranking

BACKWARD_MARK = "autograd::engine::evaluate_function: "


@dataclass
class Attribution:
    """Microseconds per step (the median over the profiled steps), by module path below the model ("" is the model)."""

    total_us: float = 0.0
    inclusive: dict[str, float] = field(default_factory=dict)
    own: dict[str, float] = field(default_factory=dict)
    ops: dict[str, Counter] = field(
        default_factory=lambda: defaultdict(Counter)
    )  # compute ops per step, the module's subtree
    outside_us: float = 0.0  # under no submodule
    work: dict[str, float] = field(
        default_factory=dict
    )  # the ops' own time by module (not its Python, not the profiler's)


def _is_compute_op(name: str) -> bool:
    return name.startswith("aten::") and base_name(name) not in DEFAULT_ALLOWED


def attribute(events: list[ProfEvent], *, measure: str) -> Attribution:
    """Each counted event's time to the modules that were running when it ran (see the module docstring).

    Summed per step, then the median over the steps: an op the machine stalled in one step (another
    process on its cores, a page fault) does not move the ranking."""
    kernels = measure == "cuda_kernels"
    n = len(events)
    chains: list[tuple[str, ...] | None] = [None] * n  # the module ranges around each event, innermost first
    step_of: list[int | None] = [None] * n
    backward_of: list[int | None] = [None] * n  # the backward node above an event
    steps = 0
    for i, e in enumerate(events):  # parents come before children in the profiler's order
        p = e.parent
        parent_chain = chains[p] if p is not None else None
        chains[i] = (
            (e.name[len(MODULE_MARK) :], *(parent_chain or ())) if e.name.startswith(MODULE_MARK) else parent_chain
        )
        if e.name == STEP_MARK:
            step_of[i], steps = steps, steps + 1
        elif p is not None:
            step_of[i] = step_of[p]
        backward_of[i] = i if e.name.startswith(BACKWARD_MARK) else (backward_of[p] if p is not None else None)
    forward: dict[
        tuple[int, int], tuple[tuple[str, ...], int]
    ] = {}  # a forward op's (thread, seq) -> its modules and step
    for i, e in enumerate(events):
        if e.seq >= 0 and step_of[i] is not None and backward_of[i] is None and chains[i]:
            forward.setdefault((e.thread, e.seq), (chains[i], step_of[i]))
    steps = max(steps, 1)
    inclusive: dict[str, list[float]] = defaultdict(lambda: [0.0] * steps)
    own: dict[str, list[float]] = defaultdict(lambda: [0.0] * steps)
    work: dict[str, list[float]] = defaultdict(lambda: [0.0] * steps)  # the ops' time alone (not a module's own Python)
    total, outside = [0.0] * steps, [0.0] * steps
    loose = 0.0  # backward work no step can claim (gradient accumulation on the autograd thread): spread evenly
    a = Attribution()
    for i, e in enumerate(events):
        bw = backward_of[i]
        if bw is not None:
            node = events[bw]
            chain, step = forward.get((node.fwd_thread, node.seq), ((), step_of[i]))
        elif step_of[i] is not None and chains[i]:
            chain, step = chains[i], step_of[i]
        else:
            continue  # the harness (the step's own code, clearing gradients), not the model
        us = e.kernel_us if kernels else e.cpu_us
        if step is None:
            loose += us
            continue
        total[step] += us
        if not chain or chain == ("",):
            outside[step] += us
        for path in chain:
            inclusive[path][step] += us
            if not e.name.startswith((MODULE_MARK, STEP_MARK)):
                work[path][step] += us
        if chain:
            own[chain[0]][step] += us
        if bw is None and chain and _is_compute_op(e.name):
            parent = events[e.parent] if e.parent is not None else None
            if parent is None or not parent.name.startswith(
                "aten::"
            ):  # what the module's code called, not its decomposition
                for path in chain:
                    a.ops[path][e.name] += 1
    for c in a.ops.values():
        for k in c:
            c[k] /= steps
    a.total_us = statistics.median(total) + loose / steps
    a.outside_us = statistics.median(outside) + loose / steps
    a.inclusive = {path: statistics.median(xs) for path, xs in inclusive.items()}
    a.own = {path: statistics.median(xs) for path, xs in own.items()}
    a.work = {path: statistics.median(xs) for path, xs in work.items()}
    a.inclusive[""] = a.total_us  # the model holds every counted op, its own code's and the backward's
    return a


def _sub(path: str, prefix: str) -> bool:
    return prefix == "" or path.startswith(prefix + ".")


def rows(
    profile: Profile,
    model_name: str,
    model_class: str,
    *,
    min_share: float,
    measure: str | None = None,
    excluded: dict[str, str] | None = None,
) -> list[ModuleRow]:
    """One row per kind of module the model called, largest share first by ``measure`` (default the profile's), the
    targets chosen and ranked, the others with why (kernelfix.tune.targets); on a GPU each row also carries its share
    of the kernel time and of the CPU time. ``excluded``: kinds capture cannot take, with why."""
    from kernelfix.tune.targets import Part, choose

    measure = measure or profile.measure
    a = attribute(profile.events, measure=measure)
    both = (
        {m: attribute(profile.events, measure=m) for m in ("cuda_kernels", "cpu_time")}
        if profile.measure == "cuda_kernels"
        else {}
    )
    steps = profile.steps
    total = a.total_us or 1.0
    parts = {}
    for path in sorted(set(profile.calls) | {""}):
        parts[path] = Part(
            path=path,
            kind=profile.kinds.get(path, path) if path else "",
            share=a.inclusive.get(path, 0.0) / total,
            self_share=a.own.get(path, 0.0) / total,
            ms=a.inclusive.get(path, 0.0) / 1e3,
            work=a.work.get(path, 0.0) / total,
            calls=profile.calls.get(path, steps) / steps,
            ops=a.ops.get(path, Counter()),
            shapes=profile.shapes.get(path, []),
            kernel_share=_share(both.get("cuda_kernels"), path),
            cpu_share=_share(both.get("cpu_time"), path),
        )
    return choose(
        parts,
        classes=profile.classes,
        model_name=model_name,
        model_class=model_class,
        min_share=min_share,
        stacks=set(profile.stacks),
        excluded=excluded,
    )


def _share(a: Attribution | None, path: str) -> float | None:
    return None if a is None else round(a.inclusive.get(path, 0.0) / (a.total_us or 1.0), 6)


LAUNCH_BOUND = 0.5  # below this share of the step the GPU runs kernels, the step's time is the CPU issuing them


def ranking(profile: Profile, device: str, *, backward: bool) -> Ranking:
    """How to rank: on a GPU by kernel time, unless the GPU is busy less than half the step (launch-bound: the
    step's time goes to the CPU issuing ops, one launch each, and fusing them is what a kernel saves); then by
    the CPU time of each module's ops, launches included. On a CPU by CPU time."""
    a = attribute(profile.events, measure=profile.measure)
    per_step_ms = a.total_us / 1e3
    busy = (
        round(per_step_ms / profile.step_ms, 4) if profile.measure == "cuda_kernels" and profile.step_ms > 0 else None
    )
    measure, why = profile.measure, None
    if busy is not None and busy < LAUNCH_BOUND:
        measure = "cpu_time"
        a = attribute(profile.events, measure=measure)
        why = (
            f"the GPU ran kernels {100 * busy:.0f}% of the step: launch-bound, so ranked by the CPU time of each module's ops "
            "(launches included), where the step's time goes"
        )
    return Ranking(
        device=device,
        measure=measure,
        backward=backward,
        steps=profile.steps,
        step_ms=round(profile.step_ms, 6),
        attributed_ms=round(a.total_us / 1e3, 6),
        kernel_ms=round(per_step_ms, 6) if busy is not None else None,
        busy=busy,
        why=why,
        outside_modules=round(a.outside_us / (a.total_us or 1.0), 6),
    )
