"""[judge] From Nsight Compute's counters to named defects: each finding says what is wrong, with the
numbers that show it, where (the candidate's line, when the source counters can place it), and
the fix that matches it.

A bottleneck class (memory-, compute-, latency-, launch-bound) says where time goes; a finding
says why. Each kind below is decided from the counters that measure it, never from the class
alone, and carries its own fix: "larger tiles" belongs to a matmul that re-reads its operands
(no_reuse), not to an elementwise kernel whose warps stride across rows (uncoalesced).

Kinds, and the counters behind them:

- uncoalesced: global sectors fetched against the sectors a coalesced access needs (source
  counters "L2 Theoretical Sectors Global" / "... Ideal"; ncu's UncoalescedGlobalAccess rule).
- bank_conflicts: shared-memory wavefronts against the ideal (source counters "L1 Wavefronts
  Shared" / "... Excessive"; rules SharedMemoryConflicts, UncoalescedSharedAccess).
- occupancy: theoretical occupancy and its limiter (Occupancy's block limits: registers, shared
  memory, warps, blocks per SM), where neither memory nor compute is busy.
- small_grid / tail_wave: blocks against SMs, and the fraction of the last wave (LaunchStats).
- launch_bound: many short launches, or kernels busy for a small part of the measured forward.
- no_reuse: bytes the SMs read from L2 (or DRAM) against the task's inputs + outputs, on a
  task with matmul/conv FLOPs to reuse them for.
- tensor_cores_unused: a matmul/conv task whose kernels leave the tensor pipes idle.
- local_memory: local-memory sectors (register spills, or arrays indexed at run time).
- divergence: active threads per warp instruction, with divergent branches.
- memory_bound: DRAM near peak while moving about the bytes the task needs: only fewer bytes help.
- latency_bound: nothing busy and none of the above explains it.
- contended_atomics: global atomics (SASS RED/ATOM) a large share of the kernel's instructions while
  neither memory nor compute is busy: the L2 performs atomics on one address one after another.
  Their sectors are left out of the uncoalesced count: an atomic's scattered address is its target,
  not a layout to coalesce.
- compute_pipe: a compute-bound kernel whose busiest SM pipe is not the tensor pipe (each pipe's
  share of its peak), with the cause its SASS shows: FP64 instructions (DFMA, F2F.F64), the integer
  division sequence (I2F.U32.RP, MUFU.RCP, IMAD.HI), special functions (MUFU).
- mma_sync_on_hopper: a matmul/conv kernel on an sm_90 GPU whose tensor work is Ampere's mma.sync
  (HMMA) and none Hopper's wgmma (HGMMA).
- host_sync: the forward made the host wait for the GPU (tools/profile/host_sync.py: the call and
  its line), which a profile alone reads as launch-bound.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from kernelfix.tools.profile.compute_findings import (
    compute_pipe,
    divergence,
    grid,
    latency_bound,
    mma_sync_on_hopper,
    occupancy,
)
from kernelfix.tools.profile.kernel_counters import Context, KernelCounters, rule_text
from kernelfix.tools.profile.memory_findings import (
    bank_conflicts,
    contended_atomics,
    local_memory,
    memory_bound,
    reuse_and_tensor,
    uncoalesced,
)
from kernelfix.tools.profile.ncu_csv import NcuKernel
from kernelfix.tools.profile.ncu_source import SourceRow, rows_for
from kernelfix.tools.verdict import CodeLine, Finding, KernelProfile

MIN_SHARE = 10.0  # % of kernel time: a kernel below this is not worth a finding
MAX_FINDINGS = 4
# ncu rules whose advice is beside the point for a kernel's author (compression of L2 lines, the
# sampling interval) or restates a symptom without a cause ("all pipelines under-utilized").
NOISE_RULES = {"MemoryL2Compression", "PMSamplingData", "HighPipeUtilization", "SOLBottleneck", "IssueSlotUtilization"}
TORCH_KERNEL = re.compile(r"^(void )?(at::|c10::)|\bat::native::")  # kernels PyTorch launched, by their demangled names


def host_sync(ctx: Context) -> Finding | None:
    """The forward made the host wait for the GPU: the calls and lines torch saw, or the wait alone
    (a sync in compiled code), with what it costs where the profile measured it."""
    report = ctx.host_syncs
    if report is None or not (report.syncs or report.blocked):
        return None
    kinds = {
        "device": "a device synchronize",
        "stream": "a stream sync (.item(), .cpu(), .tolist(), a blocking copy)",
        "event": "an event synchronize",
    }
    if report.syncs:
        calls = "; ".join(
            f"line {s.line}: `{s.code}`" + (f" (x{s.count})" if s.count > 1 else "") + f", {kinds[s.kind]}"
            for s in report.syncs[:3]
        )
        n = sum(s.count for s in report.syncs)
        what = f"host sync in forward: {n} call{'s' if n != 1 else ''} made the host wait for the GPU ({calls})"
    else:
        what = (
            "host sync in forward: torch saw no synchronizing call from Python, but the forward waited for the GPU, so compiled "
            "code does (cudaDeviceSynchronize, cudaStreamSynchronize, a cudaMemcpy that is not Async), or over a thousand "
            "launches filled the queue"
        )
    if report.blocked and report.sleep_ms:
        what += f"; it returned only after the {report.sleep_ms:.0f} ms of GPU work queued ahead of it had finished"
    if ctx.launch_reason and not ctx.launch_many:
        what += f"; meanwhile the GPU idles: {ctx.launch_reason}"
    first = report.syncs[0] if report.syncs else None
    where = (
        CodeLine(file="candidate", line=first.line, code=first.code, candidate_line=first.line)
        if first and first.line
        else None
    )
    return Finding(
        kind="host_sync",
        kernel="(the forward)",
        share_pct=100.0,
        what=what,
        fix=(
            "keep values on the GPU and let the stream order the work: pass the tensor to the next kernel and read it there "
            "(tl.load(m_ptr) in Triton, a pointer in CUDA) instead of .item(), .cpu() or .tolist(); no torch.cuda.synchronize() or "
            "cudaDeviceSynchronize() in forward (kernels on one stream already run in order); take shapes and grids from tensor "
            "sizes, never from tensor values"
        ),
        where=where,
        gain_pct=95.0,
    )


def find(
    ncu_kernels: Sequence[NcuKernel],
    merged: Sequence[KernelProfile],
    sources: dict[str, list[SourceRow]],
    ctx: Context,
) -> list[Finding]:
    """The findings of one profiled forward, most costly first (at most ``MAX_FINDINGS``)."""
    total = sum((p.duration_ms or 0.0) * p.calls for p in merged) or 1.0
    out: list[Finding] = []
    sync = host_sync(ctx)
    if sync is not None:
        out.append(sync)
    # A forward longer than its kernels, where a host sync explains the gap, is that sync's finding, not a fusion one.
    if ctx.launch_reason and (sync is None or ctx.launch_many):
        passes = (
            "the forward and the backward" if any(p.part == "backward" for p in merged) else "the forward"
        )  # --backward profiles both
        out.append(
            Finding(
                kind="launch_bound",
                kernel=f"({passes})",
                share_pct=100.0,
                what=f"launch-bound: {ctx.launch_reason}",
                fix=(
                    f"do {passes} in as few launches as possible: one kernel over all rows and elements (a 2-D grid, or a loop inside "
                    "the kernel) instead of a launch per row or step, and fuse consecutive elementwise steps into it"
                ),
                gain_pct=90.0,
            )
        )
    for p in merged:
        share = 100.0 * (p.duration_ms or 0.0) * p.calls / total
        if share < MIN_SHARE:
            continue
        # The pass too: under --backward one kernel (same name, grid and block) may run in both.
        k = next(
            (
                k
                for k in ncu_kernels
                if k.name == p.name
                and k.grid == p.grid
                and k.block == p.block
                and k.in_backward == (p.part == "backward")
            ),
            None,
        )
        if k is None:
            continue
        x = KernelCounters(k, p, share, rows_for(k.name, sources))
        # PyTorch's own kernels (a fill behind torch.zeros, a copy behind .contiguous()) have launch settings the
        # candidate cannot change: no grid or occupancy advice for them.
        own = not TORCH_KERNEL.search(k.name)
        specific = [
            f
            for f in (
                contended_atomics(x, ctx),
                uncoalesced(x, ctx),
                bank_conflicts(x, ctx),
                local_memory(x, ctx),
                divergence(x, ctx),
                occupancy(x, ctx) if own else None,
                grid(x, ctx) if own else None,
                compute_pipe(x, ctx),
                mma_sync_on_hopper(x, ctx),
            )
            if f is not None
        ]
        specific += reuse_and_tensor(x, ctx)
        if not specific:
            general = memory_bound(x, ctx) or latency_bound(x, ctx)
            if general is not None:
                specific.append(general)
        out += [f.model_copy(update={"part": p.part}) for f in specific]
    out.sort(key=lambda f: -(f.share_pct / 100.0) * (f.gain_pct if f.gain_pct is not None else _DEFAULT_GAIN[f.kind]))
    return out[:MAX_FINDINGS]


# What fixing each kind saves, where no ncu rule estimated it: a ranking, not a promise.
_DEFAULT_GAIN = {
    "uncoalesced": 60.0,
    "bank_conflicts": 40.0,
    "occupancy": 40.0,
    "small_grid": 50.0,
    "tail_wave": 20.0,
    "launch_bound": 90.0,
    "no_reuse": 80.0,
    "tensor_cores_unused": 70.0,
    "local_memory": 40.0,
    "divergence": 30.0,
    "memory_bound": 5.0,
    "latency_bound": 20.0,
    "contended_atomics": 90.0,
    "compute_pipe": 50.0,
    "mma_sync_on_hopper": 50.0,
    "host_sync": 95.0,
}


def top_rule(ncu_kernels: Sequence[NcuKernel], findings: Sequence[Finding]) -> str | None:
    """ncu's own advice with the largest estimated gain, among its rules that are about the kernel's
    code (not the profiler's settings or L2 compression), for the longest kernel found wanting."""
    if not ncu_kernels:
        return None
    kernel = findings[0].kernel if findings else ncu_kernels[0].name
    rules = [
        r
        for k in ncu_kernels
        if k.name == kernel
        for r in k.rules
        if r.kind in ("OPT", "WRN") and r.speedup_pct and r.name not in NOISE_RULES
    ]
    if not rules:
        return None
    best = max(rules, key=lambda r: r.speedup_pct or 0.0)
    return f"{rule_text(best)} (ncu {best.name}: up to {best.speedup_pct:.0f}% less time)"
