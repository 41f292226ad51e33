"""[judge] How much of the GPU's memory a stage declares when it asks for room, and how much all may declare together.

A GPU stage (correctness, the benchmark, the reference's survey and baselines) asks for room before it
runs anything on the GPU (tools/gpu/lease.py) and is given it while every stage's declared bytes
fit the budget; it keeps it for the whole stage. The declaration is an upper estimate from
what the judge knows before anything runs: one trial's inputs and outputs, counted on the meta
device (tools/task_size.py), and what the reference keeps. Too high only costs sharing; too low
could cost an ``infra:gpu_busy`` (retried, never the candidate's: tools/classify.py's OOM-owner
rule), so each term errs high.

During a correctness stage the GPU holds, at most (docs/judge.md, "Memory"): in the reference
worker the trial's inputs and output, its float64 inputs and output while they are computed, the
input and the output arena, the first trial's input arena (kept for the in-place check), the
comparison's chunked float64 temporaries; in the candidate's worker its output and whatever forward
allocates beside it (counted as one more output); and the trials the reference caches for later
candidates (``reference_cache_gb`` at most, one cache per judge however many of its stages run).
Under ``--backward`` a trial carries gradients and a cotangent of the same sizes again, and
autograd's saved tensors: twice. 23_Softmax's 12 GiB trials declare 66.5 GiB: no other stage has
room beside its stages on an 80 GB GPU. On the H100 a first version that declared one trial at a
time let a second stage in beside Softmax's leftovers, and the GPU ran out (docs/judge.md).
"""

from __future__ import annotations

from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.task_size import TaskSize

GiB = 2**30
BUDGET_FRACTION = 0.85  # of the GPU's memory: the rest is CUDA contexts and what judges between stages keep
COMPARE_BYTES = GiB // 2  # the comparison's float64 chunks (compare.CHUNK elements, a few at a time)


def budget(gpu_props: dict | None) -> int | None:
    """What the shared holds on this GPU may declare together; None when its size is not known."""
    total = (gpu_props or {}).get("total_memory")
    return int(total * BUDGET_FRACTION) if total else None


def trial_working_set(size: TaskSize, config: JudgeConfig) -> int:
    """One evaluation's stage in flight, as the module's docstring counts it: the trial's inputs three
    times (the reference's, the arena, the first trial's arena kept for the in-place check), its output
    four times (the reference's, the arena, the candidate's and what forward allocates beside it), the
    float64 reference's inputs and output while it is computed, the comparison's chunks."""
    float64 = 2 * size.trial_bytes if config.float64_reference else 0
    one = 3 * size.input_bytes + 4 * size.output_bytes + float64 + COMPARE_BYTES
    return 2 * one if config.backward else one


def reference_cache(size: TaskSize, config: JudgeConfig, trials: int) -> int:
    """What the reference may keep of the trials for later candidates (a trial larger than the cache is never kept)."""
    cap = int(config.reference_cache_gb * GiB)
    per = size.trial_bytes + (2 * size.output_bytes if config.float64_reference else 0)
    if config.backward:
        per *= 2
    return 0 if per > cap else min(cap, trials * per)


def stage_need(size: TaskSize | None, config: JudgeConfig, trials: int) -> tuple[int, int] | None:
    """A GPU stage's declaration (correctness, the benchmark, the reference's survey): (bytes in all, of which
    the reference's cache); None when the size is unknown (the stage then has the GPU's memory to itself)."""
    if size is None:
        return None
    cache = reference_cache(size, config, trials)
    return trial_working_set(size, config) + cache, cache
