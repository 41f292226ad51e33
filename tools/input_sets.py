"""[any] Input sets: a task that is called at several shapes, each judged like get_inputs().

A task may define ``get_input_sets()``, a list of input lists, each one call at a
shape the module meets (another batch size, another sequence length). When it
does, every set gets its own trials, varied inputs, legality record and timing;
sets are numbered from 1 in what the judge says ("inputs set 2: x float32[7,
4096]"), and the speedup is per set plus their geometric mean, which is what
ranks candidates. ``get_inputs()`` stays the task's KernelBench face (the shape
block, the size count, tools that know one shape); captured tasks make it the
first set. A task without ``get_input_sets()`` is judged exactly as before.

The judge's process never imports the task: it learns the sets' count and
shapes from the reference worker (``ReferenceReady.input_sets``), which calls
``get_input_sets()`` under each trial's seed and keeps the one set it needs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from kernelfix.tools import trials as trial_plan
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.transport.protocol import TrialPlan
from kernelfix.tools.verdict import InputSetReport

if TYPE_CHECKING:
    from kernelfix.tools.verdict import TrialReport

FUNCTION = "get_input_sets"
MAX_SETS = 16  # each set is a full round of trials: more is a task that should be split


class InputSetsProblem(Exception):
    """get_input_sets() is malformed: the task's fault (raised in the reference worker as a task problem)."""


# ---------------------------------------------------------------- the judge's side


def plan(seed: int, config: JudgeConfig, count: int) -> list[TrialPlan]:
    """Every set's trials, as ``trials.plan`` makes them for one, with indices and seeds of their own."""
    if count <= 0:
        return trial_plan.plan(seed, config)
    out: list[TrialPlan] = []
    for s in range(count):
        base = trial_plan.plan(seed + 7919 * s, config)
        offset = len(out)
        for t in base:
            t.index += offset
            if t.variant_of is not None:
                t.variant_of += offset
            t.input_set = s + 1
        out += base
    return out


def sets_of(trials: list[TrialPlan]) -> list[int | None]:
    """The sets the trials cover, in order; [None] for a task without get_input_sets()."""
    seen: list[int | None] = []
    for t in trials:
        if t.input_set not in seen:
            seen.append(t.input_set)
    return seen or [None]


def label(shapes: list[str] | None, input_set: int | None) -> str:
    """ "inputs set 2: x float32[7, 4096]", or "" for a task without sets."""
    if input_set is None:
        return ""
    shape = shapes[input_set - 1] if shapes and 0 < input_set <= len(shapes) else "?"
    return f"inputs set {input_set}: {shape}"


def prefixed(shapes: list[str] | None, trial: "TrialReport", text: str) -> str:
    where = label(shapes, trial.input_set)
    return f"{where}: {text}" if where else text


def reports(shapes: list[str] | None, trials: list["TrialReport"]) -> list[InputSetReport]:
    """Each set's line of the verdict after correctness: its shapes, how many trials ran, whether all were right."""
    if not shapes:
        return []
    out = []
    for k, shape in enumerate(shapes, start=1):
        mine = [t for t in trials if t.input_set == k]
        out.append(
            InputSetReport(index=k, shapes=shape, trials=len(mine), ok=all(t.ok for t in mine) if mine else None)
        )
    return out


def geomean(values: list[float | None]) -> float | None:
    """The geometric mean of the speedups; None if any set has none (a set that was not timed ranks nothing)."""
    if not values or any(v is None or v <= 0 for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))  # type: ignore[arg-type]


# ---------------------------------------------------------------- the reference worker's side (imports torch)


def has_sets(task: Any) -> bool:
    return callable(getattr(task, FUNCTION, None))


def pick(task: Any, input_set: int | None) -> list:
    """The inputs of one set (1-based), drawn under the seed the caller set; get_inputs() for None."""
    if input_set is None:
        return task.get_inputs()
    sets = _all(task)
    if not 0 < input_set <= len(sets):
        raise InputSetsProblem(f"{FUNCTION}() returned {len(sets)} sets; set {input_set} was asked for")
    return list(sets[input_set - 1])


def _all(task: Any) -> list:
    sets = getattr(task, FUNCTION)()
    if not isinstance(sets, (list, tuple)) or not sets or not all(isinstance(s, (list, tuple)) for s in sets):
        raise InputSetsProblem(
            f"{FUNCTION}() must return a non-empty list of input lists (one per call), not {type(sets).__name__}"
        )
    if len(sets) > MAX_SETS:
        raise InputSetsProblem(f"{FUNCTION}() returned {len(sets)} sets; at most {MAX_SETS} are judged")
    return list(sets)


def describe_all(task: Any, seed: int) -> list[str] | None:
    """Each set's shapes in words (on the meta device: no memory, no random numbers), or None without sets."""
    import torch

    if not has_sets(task):
        return None
    from kernelfix.tools.task_size import without_dynamo

    def on_meta() -> list:
        torch.manual_seed(seed)
        with torch.device("meta"):
            return _all(task)

    try:
        sets = without_dynamo(on_meta)
    except InputSetsProblem:
        raise
    except Exception:  # code that cannot run on meta (.item(), .cuda()): the real draw, on the CPU
        torch.manual_seed(seed)
        sets = _all(task)
    names = forward_names(task)
    return [describe(list(s), names) for s in sets]


def forward_names(task: Any) -> list[str]:
    """Model.forward's parameter names, to name the inputs as the user does."""
    import inspect

    try:
        params = list(inspect.signature(task.Model.forward).parameters.values())[1:]
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def describe(inputs: list, names: list[str]) -> str:
    """ "x float32[7, 4096], mask bool[7]": each tensor input, by the forward's name for it."""
    import torch

    parts = []
    for i, v in enumerate(inputs):
        name = names[i] if i < len(names) else f"arg{i}"
        if isinstance(v, torch.Tensor):
            parts.append(f"{name} {str(v.dtype).removeprefix('torch.')}[{', '.join(map(str, v.shape))}]")
        elif isinstance(v, (list, tuple)):
            parts.append(f"{name} [{describe(list(v), [f'{name}[{k}]' for k in range(len(v))])}]")
        else:
            parts.append(f"{name}={v!r}"[:60])
    return ", ".join(parts) or "no inputs"
