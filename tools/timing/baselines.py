"""[judge] The reference's eager and torch.compile timings, measured once per task and kept on disk.

torch.compile of a KernelBench task takes seconds to tens of seconds; every
candidate of a session, of a batch and of later ``kernelfix eval`` runs reuses
the first measurement. The key holds what changes the number: the task's
source, torch's version, the GPU (name and compute capability), the timing
settings and how inputs are drawn. The judge's seed is in the key only when the
user fixed it: a drawn seed changes the inputs' values, not their shapes or
distribution, and a key that never repeated would cache nothing. The files live
in the judge's own cache directory, which no candidate can read or write.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import ConfigDict, ValidationError

from kernelfix.base import atomic
from kernelfix.base.cache_dir import judge_cache
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.task import Task
from kernelfix.tools.transport.protocol import BaselineTimes, ReferenceReady

VERSION = 1  # bump when what a baseline measures changes


class Baseline(BaselineTimes):
    """The reference worker's ``baseline`` reply as the judge keeps it (in memory and in the disk cache)."""

    model_config = ConfigDict(extra="ignore")  # a cache file of an older version still reads

    cached: bool = False  # read from the disk cache, not measured by this judge


def timing_settings(config: JudgeConfig) -> dict[str, Any]:
    return {
        "timing_runs": config.timing_runs,
        "timing_settle_s": config.timing_settle_s,
        "timing_precision": config.timing_precision,
        "warmup_ms": config.warmup_ms,
        "timing_budget_s": config.timing_budget_s,
        "time_torch_compile": config.time_torch_compile,
        "flush_l2": config.flush_l2,
    } | ({"backward": True} if config.backward else {})  # forward-only keys stay as they were


def key(task: Task, config: JudgeConfig, ready: ReferenceReady) -> str:
    parts = {
        "v": VERSION,
        "task": task.sha1,
        "torch": ready.torch,
        "gpu": ready.gpu,
        "capability": ready.capability,
        "timing": timing_settings(config),
        "inputs_on_device": config.inputs_on_device,
        "seed": config.seed,  # None unless the user fixed it
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def load(k: str) -> Baseline | None:
    path = judge_cache() / "baselines" / f"{k}.json"
    try:
        b = Baseline.model_validate_json(path.read_text())
    except (OSError, ValidationError, ValueError):
        return None
    return b.model_copy(update={"cached": True})


def save(k: str, b: Baseline) -> None:
    try:
        atomic.write_json(judge_cache() / "baselines" / f"{k}.json", b)
    except OSError:  # a full disk costs a re-measurement next time, nothing more
        pass


# A 256 MB copy on an idle GPU reaches 89% of the H100's DRAM peak (2,980 of 3,350 GB/s, docs/judge.md). Far less
# means something else had the GPU while it ran (a process outside the lease, a test with a lease of its own); a
# floor from that would call honest kernels cheats (the GPU suite at -n 8 measured 1,130 GB/s and flagged a 0.20 ms
# kernel against a 0.48 ms floor). So the floor's bandwidth is never below this share of the peak.
FLOOR_PEAK_SHARE = 0.75


def floor_bandwidth(measured_gbps: float, peak_gbps: float | None) -> float:
    """The bandwidth the memory floor is computed at: the copy's, or ``FLOOR_PEAK_SHARE`` of the GPU's DRAM peak
    (tools/gpu/specs.py) where a copy under contention measured less. Unknown peak: the copy's."""
    return max(measured_gbps, FLOOR_PEAK_SHARE * peak_gbps) if peak_gbps else measured_gbps
