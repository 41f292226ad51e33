"""How much of the GPU a shared hold of the lease declares, and how much all of them may declare together.

A shared hold (correctness trials, a warm-up, the reference's survey: tools/device_lease.py) runs
beside others while their declared bytes fit the budget. The declaration is an upper estimate from
what the judge knows before anything runs: one trial's inputs and outputs, counted on the meta
device (tools/task_size.py), and what the reference keeps. Too high only costs sharing; too low
could cost an ``infra:gpu_busy`` (retried, never the candidate's: tools/classify.py's OOM-owner
rule), so each term errs high.

During a correctness trial the GPU holds, at most (docs/judge.md, "Memory"): in the reference
worker the trial's inputs, its output, the float64 output (twice the output's bytes), the input
and the output arena, the comparison's chunked float64 temporaries; in the candidate's worker its
output and whatever forward allocates beside it (counted as one more output); and the trials the
reference caches for later candidates (``reference_cache_gb`` at most). Under ``--backward`` a trial
carries gradients and a cotangent of the same sizes again, and autograd's saved tensors: twice.
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
    """One trial in flight: both workers' tensors for it, as the module's docstring counts them."""
    out64 = 2 * size.output_bytes if config.float64_reference else 0
    one = 2 * size.input_bytes + 4 * size.output_bytes + out64 + COMPARE_BYTES
    return 2 * one if config.backward else one


def reference_cache(size: TaskSize, config: JudgeConfig, trials: int) -> int:
    """What the reference may keep of the trials for later candidates (a trial larger than the cache is never kept)."""
    cap = int(config.reference_cache_gb * GiB)
    per = size.trial_bytes + (2 * size.output_bytes if config.float64_reference else 0)
    if config.backward:
        per *= 2
    return 0 if per > cap else min(cap, trials * per)


def correctness_need(size: TaskSize | None, config: JudgeConfig, trials: int) -> int | None:
    """A correctness stage's (or the reference's survey's) declaration; None when the size is unknown."""
    if size is None:
        return None
    return trial_working_set(size, config) + reference_cache(size, config, trials)


def warmup_need(size: TaskSize | None, config: JudgeConfig) -> int | None:
    """A candidate's warm-up: inputs of its own, its output and what forward allocates beside it."""
    if size is None:
        return None
    one = size.input_bytes + 2 * size.output_bytes + COMPARE_BYTES // 2
    return 2 * one if config.backward else one
