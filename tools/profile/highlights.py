"""[judge] The profile's highlights: the lines of ``ProfileReport.highlights`` the feedback quotes (the bottleneck,
the longest kernels with their numbers, the floors, the findings with their fixes), built from the report."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kernelfix.tools.verdict import KernelProfile, ProfileReport, StallReason

# Said only where no finding (tools/profile/findings.py) names the cause: then the class is all the
# counters tell, and the advice stays with what the class itself implies.
_ADVICE: dict[str, str] = {
    "launch-bound": "Most of the time goes to launching kernels: fuse them into fewer, larger kernels (one launch per forward if you can).",
    "memory-bound:DRAM": "It is limited by DRAM bandwidth: only moving fewer bytes makes it faster (fuse passes, read each input once, keep reused data on chip, use coalesced, vectorized accesses).",
    "memory-bound": "It is limited by cache bandwidth (L1/L2): the usual causes are accesses that waste cache lines (adjacent threads far apart) and data read again instead of kept in registers or shared memory.",
    "compute-bound": "The SM's busiest pipeline is near peak: do less work per output (fewer instructions, cheaper math) or, if it is not there already, move the math to tensor cores in the task's precision.",
    "latency-bound": "Neither memory nor compute is busy: give each SM more independent work (more blocks and warps, more loads in flight per thread).",
}


def pct_text(x: float | None) -> str:
    return "?" if x is None else f"{x:.1f}%"


def stall_text(stalls: Sequence[StallReason]) -> str:
    return ", ".join(f"{s.reason} {s.share_pct:.0f}%" for s in stalls)


def total_ms(p: KernelProfile) -> float:
    return (p.duration_ms or 0.0) * p.calls


def fmt_bytes(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} KB"


def _part_lines(kernels: list[KernelProfile]) -> list[str]:
    """Under --backward: the forward's and the backward's share of the kernel time, and their longest kernels."""
    if not any(k.part == "backward" for k in kernels):
        return []
    parts = []
    for part in ("forward", "backward"):
        mine = [k for k in kernels if k.part == part]
        ms = sum(total_ms(k) for k in mine)
        top = max(mine, key=total_ms, default=None)
        parts.append(
            f"{part} {sum(k.calls for k in mine)} launch{'es' if sum(k.calls for k in mine) != 1 else ''}, {ms:.4g} ms"
            + (f" (longest: {_short(top.name)})" if top is not None else "")
        )
    return ["Forward and backward (one of each profiled): " + "; ".join(parts) + "."]


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."


def _kernel_line(p: KernelProfile) -> str:
    calls = f" x{p.calls}" if p.calls > 1 else ""
    dur = f"{p.duration_ms:.4g} ms" if p.duration_ms is not None else "?"
    part = f"[{p.part}] " if p.part == "backward" else ""
    bits = [f"{part}{p.name}{calls} (grid {p.grid or '?'}, block {p.block or '?'}): {dur}"]
    if p.bottleneck:
        bits.append(f"{p.bottleneck}: {p.why}")
    res = []
    if p.achieved_occupancy_pct is not None and p.bottleneck != "latency-bound":
        res.append(
            f"occupancy {pct_text(p.achieved_occupancy_pct)}"
            + (f" of {pct_text(p.theoretical_occupancy_pct)}" if p.theoretical_occupancy_pct is not None else "")
        )
    if p.registers_per_thread is not None:
        res.append(f"{p.registers_per_thread} regs/thread")
    if p.shared_mem_per_block is not None:
        res.append(f"{p.shared_mem_per_block:,} B shared/block")
    if p.stalls and p.bottleneck != "latency-bound":
        res.append("top stalls " + stall_text(p.stalls))
    if res:
        bits.append(", ".join(res))
    return "; ".join(bits)


def _floor_lines(r: ProfileReport) -> list[str]:
    lines = []
    if (
        r.bottleneck in ("memory-bound", "compute-bound")
        and r.dram_bytes
        and r.memory_floor_ms is not None
        and r.kernel_ms
    ):
        line = f"DRAM traffic {fmt_bytes(r.dram_bytes)}"
        if r.min_bytes:
            ratio = r.dram_bytes / r.min_bytes
            line += (
                f" ({ratio:.1f}x the {fmt_bytes(r.min_bytes)} of inputs + outputs"
                + ("; data is moved more than once" if ratio > 1.5 else "")
                + ")"
            )
        line += f"; at peak bandwidth that takes {r.memory_floor_ms:.4g} ms, the kernels take {r.kernel_ms:.4g} ms"
        if r.compute_floor_ms is not None:
            line += f"; their busiest SM units at peak would take {r.compute_floor_ms:.4g} ms"
        lines.append(line + ".")
    if r.task_flops and r.achieved_tflops is not None:
        over = "the measured runtime" if r.candidate_ms else "the kernels' time"
        lines.append(
            f"The reference does {r.task_flops / 1e9:.4g} GFLOP of matmul/conv work: {r.achieved_tflops:.4g} TFLOP/s over {over}."
        )
    return lines


def _finding_lines(r: ProfileReport, rule: str | None) -> list[str]:
    """The findings, most costly first: what, where, the fix; then ncu's own words for the top one."""
    lines = ["Findings (most costly first):"]
    for i, f in enumerate(r.findings, 1):
        where = ""
        if f.where is not None:
            at = (
                f"line {f.where.candidate_line} of your code"
                if f.where.candidate_line
                else f"{Path(f.where.file).name}:{f.where.line}"
            )
            where = f" At {at}: `{f.where.code}`."
        one = len({(g.kernel, g.part) for g in r.findings}) == 1
        part = " (backward)" if f.part == "backward" else ""
        kernel = (
            ""
            if f.kind in ("launch_bound", "host_sync") or one
            else f" [{f.kernel.split('(')[0]}{part}, {f.share_pct:.0f}% of kernel time]"
        )
        lines.append(f"{i}. {f.what}.{kernel}{where}")
        lines.append(f"   Fix: {f.fix}.")
    if rule:
        lines.append(f"Nsight Compute says: {rule}")
    return lines


def highlights(r: ProfileReport, kernels: list[KernelProfile], source: str, rule: str | None = None) -> list[str]:
    if not kernels:
        return [f"Profile ({source}): {r.summary}"] if r.summary else []
    head = f"Profile ({source}, {r.launches} kernel launch{'es' if r.launches != 1 else ''}"
    head += ", more not profiled" if r.launches_capped else ""
    if r.bottleneck == "launch-bound" or r.bottleneck is None:
        head += f"): {r.summary or 'no clear bottleneck'}."
    else:  # the kernel lines below carry the numbers
        head += f"): {r.bottleneck}."
    lines = [head, *_part_lines(kernels)]
    lines += [_kernel_line(p) for p in [k for k in kernels if k.duration_ms is not None][:2]]
    lines += _floor_lines(r)
    if r.findings:
        lines += _finding_lines(r, rule)
    elif r.bottleneck:
        dram = (
            r.bottleneck == "memory-bound"
            and kernels
            and next((p.memory_unit for p in kernels if p.bottleneck == "memory-bound"), None) == "DRAM"
        )
        lines.append(_ADVICE["memory-bound:DRAM" if dram else r.bottleneck])
    return lines
