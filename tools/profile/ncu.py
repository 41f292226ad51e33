"""[judge] Nsight Compute for the profile stage: where ncu is, the command line that
profiles one forward of the candidate, and what a run that produced no
profile means.

ncu runs the profile target (``kernelfix.tools.workers.profile_target``), which warms the candidate up and
then calls forward once inside the NVTX range ``NVTX_RANGE``; ``--nvtx-include``
keeps ncu to the kernels launched in that range, so input generation, warm-up,
autotuning and anything else in the process are not profiled. The CSV goes to
a file (``--log-file``): the child's own stdout cannot mix into it.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from kernelfix.sandbox import ChildOutcome
from kernelfix.tools.profile import ncu_csv
from kernelfix.tools.profile.ncu_csv import NcuOutput

NVTX_RANGE = "kernelfix_candidate"
BACKWARD_RANGE = ncu_csv.BACKWARD_RANGE  # a start/end range: no "/" in its filter
# Only the sections the findings read (tools/profile/kernel_counters.py, bottleneck.py), each with its title in
# the details page. SourceCounters gives the per-line counters (tools/profile/ncu_source.py) and the coalescing and
# divergence rules; WarpStateStats the active threads per warp and the stall rules; ComputeWorkloadAnalysis the
# busiest-pipe rule (the fallback where the pipe counters below are refused). InstructionStats and SchedulerStats
# are not collected: the findings read one counter of theirs (executed instructions, asked for by name below) and
# none of their rules, and they cost replay passes of their own (docs/feedback.md, "What the stage costs").
SECTION_TITLES = {
    "SpeedOfLight": "GPU Speed Of Light Throughput",
    "MemoryWorkloadAnalysis": "Memory Workload Analysis",
    "Occupancy": "Occupancy",
    "LaunchStats": "Launch Statistics",
    "WarpStateStats": "Warp State Statistics",
    "ComputeWorkloadAnalysis": "Compute Workload Analysis",
    "SourceCounters": "Source Counters",
}
SECTIONS = tuple(SECTION_TITLES)
# Stall reasons, FP instruction counts, and the counters the findings need (L2-to-SM bytes, local
# and global sectors, tensor-pipe activity, executed instructions), which those sections' CSV leaves out. As regular
# expressions, a name this ncu or GPU lacks matches nothing instead of failing the run.
EXTRA_METRICS = (
    r"regex:^smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active\.ratio$",
    r"regex:^smsp__sass_thread_inst_executed_op_[dhf](add|mul|fma)_pred_on\.sum$",
    r"regex:^l1tex__m_xbar2l1tex_read_bytes\.sum$",
    r"regex:^l1tex__t_sectors_pipe_lsu_mem_(local|global)_op_(ld|st)\.sum$",
    r"regex:^sm__pipe_tensor(_op_hmma|_op_gmma)?_cycles_active\.avg\.pct_of_peak_sustained_active$",
    r"regex:^dram__bytes_(read|write)\.sum$",
    r"regex:^smsp__inst_executed\.sum$",  # InstructionStats' "Executed Instructions", without its section
    # Each pipe's share of its peak (the busiest pipe of a compute-bound kernel: FP64, ALU, FMA, XU/MUFU, ...),
    # and the global atomics and reductions the L2 serializes (contended atomics).
    r"regex:^sm__(inst_executed_pipe_[a-z0-9_]+|pipe_[a-z0-9_]+_cycles_active)\.avg\.pct_of_peak_sustained_active$",
    r"regex:^(smsp__inst_executed_op_global_(red|atom)|lts__t_requests_op_(red|atom))\.sum$",
)
REPORT = "ncu-report"  # ncu adds .ncu-rep
PERMISSION_URL = "https://developer.nvidia.com/ERR_NVGPUCTRPERM"

ProblemKind = Literal["missing", "permission", "timeout", "no_kernels", "metrics", "target_failed", "failed"]


class NcuProblem(BaseModel):
    """Why a run produced no profile, in one line for the user and the model."""

    model_config = ConfigDict(extra="forbid")

    kind: ProblemKind
    message: str


def _candidates() -> list[str]:
    homes = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    paths = [str(Path(h) / "bin" / "ncu") for h in homes if h]
    paths += sorted(glob.glob("/usr/local/cuda*/bin/ncu"), reverse=True)
    paths += sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)
    return paths


def find(override: str | None = None) -> tuple[str | None, NcuProblem | None]:
    """The ncu executable to use, or why there is none."""
    if override:
        path = (
            shutil.which(override)
            if os.sep not in override
            else (override if os.access(override, os.X_OK) and Path(override).is_file() else None)
        )
        if path:
            return path, None
        return None, NcuProblem(kind="missing", message=f"ncu not found at {override} (judge setting ncu_path)")
    path = shutil.which("ncu") or next((p for p in _candidates() if os.access(p, os.X_OK)), None)
    if path:
        return path, None
    return None, NcuProblem(
        kind="missing",
        message="Nsight Compute (ncu) is not installed or not on PATH; set ncu_path in the judge settings",
    )


def command(
    ncu: str, report: Path, max_launches: int, *, extra_metrics: bool = True, backward: bool = False
) -> list[str]:
    """ncu's argv, to go in front of the profiled child's: the report (with the kernels' source, for
    the per-line counters) goes to ``report``.ncu-rep; ``import_command`` prints its pages."""
    argv = [ncu, "--export", str(report), "--force-overwrite", "--import-source", "yes"]
    for s in SECTIONS:
        argv += ["--section", s]
    if extra_metrics:
        argv += ["--metrics", ",".join(EXTRA_METRICS)]
    argv += ["--nvtx", "--nvtx-include", f"{NVTX_RANGE}/"] + (["--nvtx-include", BACKWARD_RANGE] if backward else [])
    argv += ["--target-processes", "all", "--launch-count", str(max_launches)]
    return argv


def import_command(ncu: str, report: Path, page: Literal["details", "source"]) -> list[str]:
    """Print one page of a report as CSV on stdout: ``details`` (metrics and rules per kernel) or
    ``source`` (counters per source line, with the SASS under each)."""
    argv = [ncu, "--import", str(report), "--csv", "--page", page]
    return argv + (["--print-units", "base"] if page == "details" else ["--print-source", "cuda,sass"])


_PERMISSION = re.compile(r"ERR_NVGPUCTRPERM|does not have permission to access NVIDIA GPU Performance Counters", re.I)
_METRIC_ERROR = re.compile(r"==ERROR==.*metric", re.I)
_NO_KERNELS = re.compile(r"No kernels were profiled", re.I)


def diagnose(outcome: ChildOutcome, parsed: NcuOutput, timeout_s: float) -> NcuProblem | None:
    """None when ncu profiled kernels; else why not."""
    text = "\n".join([*parsed.messages, outcome.stdout_tail, outcome.stderr_tail])
    if outcome.launch_error:
        return NcuProblem(kind="failed", message=f"ncu could not be started: {outcome.launch_error}")
    if _PERMISSION.search(text):
        return NcuProblem(
            kind="permission",
            message=f"this user may not read the GPU's performance counters (ERR_NVGPUCTRPERM; see {PERMISSION_URL})",
        )
    if outcome.timed_out:
        return NcuProblem(
            kind="timeout", message=f"ncu did not finish within {timeout_s:g} s (judge setting profile_timeout_s)"
        )
    if parsed.kernels:
        return None
    if _METRIC_ERROR.search(text):
        line = next((ln for ln in text.splitlines() if _METRIC_ERROR.search(ln)), "")
        return NcuProblem(kind="metrics", message=f"ncu refused a metric: {line.strip()[:300]}")
    err = outcome.last("error")
    if err is not None:
        return NcuProblem(
            kind="target_failed",
            message=f"the profiled run failed: {err.get('exc_type')}: {(err.get('message') or '').strip()[:300]}",
        )
    if _NO_KERNELS.search(text):
        return NcuProblem(
            kind="no_kernels", message=f"ncu saw no kernel launched inside forward (NVTX range {NVTX_RANGE})"
        )
    if outcome.memory_exceeded:
        return NcuProblem(kind="failed", message="ncu and the profiled run went over the memory limit")
    errors = [ln.strip() for ln in text.splitlines() if ln.startswith("==ERROR==")]
    if errors:
        return NcuProblem(kind="failed", message=errors[0][:300])
    last = next((ln.strip() for ln in reversed(outcome.stderr_tail.splitlines()) if ln.strip()), "")
    status = outcome.signal or f"exit code {outcome.returncode}"
    return NcuProblem(
        kind="failed", message=f"ncu produced no profile ({status})" + (f": {last[:300]}" if last else "")
    )
