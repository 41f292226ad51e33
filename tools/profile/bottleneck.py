"""[judge] From profiler numbers to a diagnosis: per kernel the numbers that matter,
the bottleneck with the numbers behind it, the floors the bytes and FLOPs
imply, and a few lines for the model.

A kernel is memory-bound when its busiest memory unit (DRAM, L2 or L1) runs
at >= 60% of peak and above the SM's busiest unit, compute-bound when the SM
side is the higher one and >= 60%, and latency-bound when neither reaches 60%
(too little parallelism or long stalls keep both idle). The forward is
launch-bound when it is many short kernels, or when its kernels are busy for
less than half of the time the benchmark measured for it. Otherwise the
forward's bottleneck is the class that holds most of its kernel time.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

from kernelfix.tools.profile import findings
from kernelfix.tools.profile.highlights import fmt_bytes, highlights, pct_text, stall_text, total_ms
from kernelfix.tools.profile.ncu_csv import NcuKernel
from kernelfix.tools.profile.ncu_source import SourceRow
from kernelfix.tools.verdict import Bottleneck, KernelProfile, ProfileReport, StallReason, Timings

BUSY_PCT = 60.0  # of peak: a unit this busy is what limits the kernel
LAUNCH_MANY = 8  # launches in one forward, each shorter than SHORT_MS: launch-bound
SHORT_MS = 0.010
BUSY_FRACTION = 0.5  # kernels busy for less than this share of the measured forward: launch-bound
TOP_STALLS = 3
TOP_KERNELS = 10

_SOL = "GPU Speed Of Light Throughput"
_MEM = "Memory Workload Analysis"
_OCC = "Occupancy"
_LAUNCH = "Launch Statistics"

_STALL_METRIC = re.compile(r"smsp__average_warps_issue_stalled_(?P<reason>\w+?)_per_issue_active\.ratio")
_FLOP_METRIC = re.compile(r"smsp__sass_thread_inst_executed_op_(?P<prec>[dhf])(?P<op>add|mul|fma)_pred_on\.sum")
# ncu's CPIStall rules, where the stall metrics were not collected: "each warp ... spends 166.6 cycles
# being stalled waiting for ... This stall type represents about 75.0% of the total ..."
_STALL_RULE = re.compile(
    r"spends (?P<cycles>[\d.]+) cycles being stalled (?P<what>.+?)\..*?represents about (?P<pct>[\d.]+)%", re.S
)
_STALL_PHRASES = [
    ("scoreboard dependency on a L1TEX", "long_scoreboard"),
    ("scoreboard dependency on a MIO", "short_scoreboard"),
    ("CTA barrier", "barrier"),
    ("MIO", "mio_throttle"),
    ("L1 instruction queue for local and global", "lg_throttle"),
    ("execution pipe to be available", "math_pipe_throttle"),
    ("fixed latency execution dependency", "wait"),
    ("memory barrier", "membar"),
    ("branch target", "branch_resolving"),
    ("dispatch", "dispatch_stall"),
    ("sleep", "sleeping"),
    ("TEX", "tex_throttle"),
    ("immediate constant cache", "imc_miss"),
    ("instruction fetch", "no_instruction"),
    ("drain", "drain"),
    ("GMMA", "gmma"),
]


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def _stalls(k: NcuKernel) -> list[StallReason]:
    counted = {
        m.group("reason"): v for name, v in k.matching(_STALL_METRIC).items() if (m := _STALL_METRIC.fullmatch(name))
    }
    if counted:
        total = sum(counted.values()) or 1.0
        ranked = sorted(((r, v) for r, v in counted.items() if r != "selected"), key=lambda rv: -rv[1])
        return [
            StallReason(reason=r, cycles=round(v, 2), share_pct=round(100 * v / total, 1))
            for r, v in ranked[:TOP_STALLS]
            if v > 0
        ]
    found = []
    for rule in k.rules:
        m = _STALL_RULE.search(rule.description) if rule.name.startswith("CPIStall") else None
        if m:
            what = m.group("what")
            reason = next(
                (r for phrase, r in _STALL_PHRASES if phrase in what), what.removeprefix("waiting for ").strip()[:60]
            )
            found.append(StallReason(reason=reason, cycles=float(m.group("cycles")), share_pct=float(m.group("pct"))))
    return sorted(found, key=lambda s: -s.share_pct)[:TOP_STALLS]


def _flops(k: NcuKernel) -> float | None:
    counted = k.matching(_FLOP_METRIC)
    if not counted:
        return None
    return sum(v * (2 if name.endswith("fma_pred_on.sum") else 1) for name, v in counted.items())


def _advice(k: NcuKernel) -> list[str]:
    opt = sorted((r for r in k.rules if r.kind == "OPT" and r.speedup_pct), key=lambda r: -(r.speedup_pct or 0))
    out = []
    for r in opt[:2]:
        sentences = re.split(r"(?<=[.!?])\s+", r.description.strip())
        text = " ".join(sentences[:2])  # what ncu saw and, mostly, why
        text = text if len(text) <= 320 else text[:317] + "..."
        out.append(f"{text} (ncu estimates up to {r.speedup_pct:.0f}% less time)")
    return out


def condense(k: NcuKernel) -> KernelProfile:
    """One ncu kernel (details or raw page) as the numbers that matter, classified."""
    duration = _first(k.get("Duration", _SOL), k.get("gpu__time_duration.sum"))
    dram = _first(k.get("DRAM Throughput", _SOL), k.get("dram__throughput.avg.pct_of_peak_sustained_elapsed"))
    l2, l1 = k.get("L2 Cache Throughput", _SOL), k.get("L1/TEX Cache Throughput", _SOL)
    rate = _first(k.get("Memory Throughput", _MEM), k.get("dram__bytes.sum.per_second"))
    nbytes = _first(k.get("dram__bytes.sum"), rate * duration if rate is not None and duration is not None else None)
    if rate is None and nbytes is not None and duration:
        rate = nbytes / duration
    units = [(name, v) for name, v in (("DRAM", dram), ("L2", l2), ("L1", l1)) if v is not None]
    # SOL's "Memory Throughput" is ncu's own figure for the memory side; of the three units
    # it names, the one nearest that figure is the one it comes from
    memory = _first(k.get("Memory Throughput", _SOL), max((v for _, v in units), default=None))
    unit = min(units, key=lambda nv: abs(nv[1] - memory))[0] if units and memory is not None else None
    static = _first(k.get("Static Shared Memory Per Block", _LAUNCH), k.get("launch__shared_mem_per_block_static"))
    dynamic = _first(k.get("Dynamic Shared Memory Per Block", _LAUNCH), k.get("launch__shared_mem_per_block_dynamic"))
    regs = _first(k.get("Registers Per Thread", _LAUNCH), k.get("launch__registers_per_thread"))
    p = KernelProfile(
        name=k.name,
        grid=k.grid,
        block=k.block,
        duration_ms=duration * 1e3 if duration is not None else None,
        dram_pct=dram,
        dram_gbps=rate / 1e9 if rate is not None else None,
        dram_bytes=nbytes,
        memory_pct=memory,
        memory_unit=unit,
        compute_pct=_first(
            k.get("Compute (SM) Throughput", _SOL), k.get("sm__throughput.avg.pct_of_peak_sustained_elapsed")
        ),
        achieved_occupancy_pct=_first(
            k.get("Achieved Occupancy", _OCC), k.get("sm__warps_active.avg.pct_of_peak_sustained_active")
        ),
        theoretical_occupancy_pct=k.get("Theoretical Occupancy", _OCC),
        registers_per_thread=int(regs) if regs is not None else None,
        shared_mem_per_block=int((static or 0) + (dynamic or 0)) if static is not None or dynamic is not None else None,
        waves_per_sm=_first(k.get("Waves Per SM", _LAUNCH), k.get("launch__waves_per_multiprocessor")),
        flops=_flops(k),
        stalls=_stalls(k),
        ncu_advice=_advice(k),
    )
    p.bottleneck, p.why = classify_kernel(p)
    return p


def classify_kernel(p: KernelProfile) -> tuple[Bottleneck | None, str]:
    mem, sm = p.memory_pct, p.compute_pct
    if mem is None and sm is None:
        return None, "no throughput counters"
    mem_v, sm_v = mem or 0.0, sm or 0.0
    if max(mem_v, sm_v) >= BUSY_PCT:
        if sm_v > mem_v:
            return "compute-bound", f"SM {pct_text(sm)} of peak, memory {pct_text(mem)} ({p.memory_unit})"
        bw = f", {p.dram_gbps:,.0f} GB/s" if p.dram_gbps is not None and p.memory_unit == "DRAM" else ""
        return "memory-bound", f"{p.memory_unit} {pct_text(mem)} of peak{bw}, SM {pct_text(sm)}"
    bits = [f"memory {pct_text(mem)} and SM {pct_text(sm)} of peak"]
    if p.achieved_occupancy_pct is not None:
        theo = (
            f" of {pct_text(p.theoretical_occupancy_pct)} theoretical"
            if p.theoretical_occupancy_pct is not None
            else ""
        )
        bits.append(f"occupancy {pct_text(p.achieved_occupancy_pct)}{theo}")
    if p.waves_per_sm is not None and p.waves_per_sm < 1:
        bits.append(f"{p.waves_per_sm:.2f} waves: the grid does not fill the GPU")
    if p.stalls:
        bits.append("stalls " + stall_text(p.stalls[:2]))
    return "latency-bound", "; ".join(bits)


def _merge(profiles: list[KernelProfile]) -> list[KernelProfile]:
    """Launches of the same kernel with the same grid as one entry: per-call means, weighted by time."""
    groups: dict[tuple[str, str | None, str | None, str | None], list[KernelProfile]] = {}
    for p in profiles:
        groups.setdefault((p.name, p.grid, p.block, p.part), []).append(p)
    out = []
    for group in groups.values():
        first = group[0].model_copy(deep=True)
        n = sum(p.calls for p in group)
        durations = [p.duration_ms or 0.0 for p in group]
        total = sum(durations)
        if len(group) > 1:

            def mean(attr: str) -> float | None:
                vals = [(getattr(p, attr), d) for p, d in zip(group, durations) if getattr(p, attr) is not None]
                if not vals:
                    return None
                w = sum(d for _, d in vals)
                return sum(v * d for v, d in vals) / w if w > 0 else statistics.fmean(v for v, _ in vals)

            for attr in ("dram_pct", "dram_gbps", "memory_pct", "compute_pct", "achieved_occupancy_pct"):
                setattr(first, attr, mean(attr))
            first.dram_bytes = sum(p.dram_bytes or 0.0 for p in group) / n if any(p.dram_bytes for p in group) else None
            first.flops = sum(p.flops or 0.0 for p in group) / n if any(p.flops for p in group) else None
            first.duration_ms = total / n
            first.calls = n
            first.bottleneck, first.why = classify_kernel(first)
        out.append(first)
    return sorted(out, key=lambda p: -(p.duration_ms or 0.0) * p.calls)


def _launch_bound(
    launches: int,
    per_call_ms: list[float],
    kernel_ms: float,
    candidate_ms: float | None,
    capped: bool,
    call: str = "one forward",
) -> str | None:
    """Why the forward is launch-bound, or None. ``call``: what was profiled and timed ("one forward and
    its backward" under --backward)."""
    if launches >= LAUNCH_MANY and per_call_ms and statistics.median(per_call_ms) < SHORT_MS:
        more = " (or more)" if capped else ""
        return f"{launches}{more} kernel launches in {call}, median {statistics.median(per_call_ms) * 1e3:.1f} us each"
    if capped and per_call_ms and candidate_ms and statistics.median(per_call_ms) < SHORT_MS:
        each = statistics.median(per_call_ms)
        if (
            each > 0 and candidate_ms > LAUNCH_MANY * launches * each
        ):  # (no duration read: nothing to compare with)  # the forward takes far longer than the launches ncu saw
            return (
                f"{launches} or more kernel launches (ncu stopped counting at {launches}) of about {each * 1e3:.1f} us each, "
                f"in a forward that takes {candidate_ms:.4g} ms: on the order of {candidate_ms / each:,.0f} launches' worth"
            )
    if candidate_ms and not capped and kernel_ms < BUSY_FRACTION * candidate_ms:
        return (
            f"its {launches} kernel launch{'es' if launches != 1 else ''} run{'' if launches != 1 else 's'} {kernel_ms:.4g} ms "
            f"of the {candidate_ms:.4g} ms {call} takes ({100 * kernel_ms / candidate_ms:.0f}%): the rest is launch and host overhead"
        )
    return None


def _finish(
    r: ProfileReport, kernels: list[KernelProfile], timings: Timings | None, task_flops: float | None
) -> ProfileReport:
    r.kernels = kernels[:TOP_KERNELS]
    r.kernel_ms = sum(total_ms(p) for p in kernels) if kernels else None
    r.candidate_ms = timings.candidate.median_ms if timings and timings.candidate else None
    r.min_bytes = timings.bytes_moved if timings else None
    r.task_flops = task_flops or None
    if r.task_flops:
        ms = r.candidate_ms or r.kernel_ms
        r.achieved_tflops = r.task_flops / (ms * 1e-3) / 1e12 if ms else None
    per_call = [p.duration_ms for p in kernels for _ in range(p.calls) if p.duration_ms is not None]
    call = "one forward and its backward" if any(k.part == "backward" for k in kernels) else "one forward"
    launch = (
        _launch_bound(r.launches, per_call, r.kernel_ms or 0.0, r.candidate_ms, r.launches_capped, call)
        if kernels
        else None
    )
    if launch:
        r.bottleneck, r.summary = "launch-bound", f"launch-bound: {launch}"
    else:
        by_class: dict[str, float] = {}
        for p in kernels:
            if p.bottleneck:
                by_class[p.bottleneck] = by_class.get(p.bottleneck, 0.0) + total_ms(p)
        if by_class:
            r.bottleneck = max(by_class, key=lambda c: by_class[c])  # type: ignore[assignment]
            lead = next(p for p in kernels if p.bottleneck == r.bottleneck)
            share = by_class[r.bottleneck] / r.kernel_ms * 100 if r.kernel_ms else 100.0
            where = f"{lead.name}" + (f" and others, {share:.0f}% of kernel time" if len(kernels) > 1 else "")
            r.summary = f"{r.bottleneck} ({where}): {lead.why}"
    return r


def from_ncu(
    ncu_kernels: Sequence[NcuKernel],
    *,
    timings: Timings | None,
    task_flops: float | None,
    max_launches: int | None = None,
    sources: dict[str, list[SourceRow]] | None = None,
    context: findings.Context | None = None,
) -> ProfileReport:
    """The report for the kernels ncu profiled in one forward: numbers, bottleneck, and findings
    (from the details page's counters and rules, and the source page's per-line counters)."""
    profiles = [condense(k) for k in ncu_kernels]
    if any(k.in_backward for k in ncu_kernels):  # --backward: each kernel's pass
        for p, k in zip(profiles, ncu_kernels):
            p.part = "backward" if k.in_backward else "forward"
    r = ProfileReport(
        source="ncu", launches=len(profiles), launches_capped=max_launches is not None and len(profiles) >= max_launches
    )
    r.dram_bytes = sum(p.dram_bytes for p in profiles if p.dram_bytes is not None) or None
    floors = [
        p.duration_ms * p.dram_pct / 100 for p in profiles if p.duration_ms is not None and p.dram_pct is not None
    ]
    r.memory_floor_ms = sum(floors) if floors else None
    cfloors = [
        p.duration_ms * p.compute_pct / 100 for p in profiles if p.duration_ms is not None and p.compute_pct is not None
    ]
    r.compute_floor_ms = sum(cfloors) if cfloors else None
    kernels = _merge(profiles)
    _finish(r, kernels, timings, task_flops)
    reason = r.summary.removeprefix("launch-bound: ") if r.bottleneck == "launch-bound" else None
    # "its N kernel launches run X ms of the Y ms forward": the forward is longer than its kernels; otherwise many short launches
    ctx = (context or findings.Context()).model_copy(
        update={"launch_reason": reason, "launch_many": bool(reason) and not reason.startswith("its ")}
    )
    if ctx.task_flops is None:
        ctx.task_flops = task_flops
    if ctx.min_bytes is None and timings is not None:
        ctx.min_bytes = timings.bytes_moved
    r.findings = findings.find(ncu_kernels, kernels, sources or {}, ctx)
    top = r.findings[0] if r.findings else None
    if top is not None and top.ncu_rule:  # ncu's own words for the costliest finding
        rule = f"{top.ncu_rule} (ncu estimates up to {top.gain_pct:.0f}% less time)" if top.gain_pct else top.ncu_rule
    elif top is None or top.kind in (
        "memory_bound",
        "contended_atomics",
        "mma_sync_on_hopper",
        "host_sync",
        "compute_pipe",
    ):
        rule = None  # ncu's largest rule is about something else (at the roofline; an atomic's sectors read as uncoalesced)
    else:
        rule = findings.top_rule(ncu_kernels, r.findings)
    r.highlights = highlights(r, kernels, "Nsight Compute", rule)
    return r


def from_kernel_list(
    entries: Sequence[dict],
    *,
    timings: Timings | None,
    task_flops: float | None,
    note: str,
    context: findings.Context | None = None,
) -> ProfileReport:
    """The report from torch.profiler's kernel list (names, launches, CUDA time): no counters, so
    only launch-bound and, against the measured bandwidth, memory-bound can be told; and a host sync
    the profile target saw (``context.host_syncs``) is still a finding."""
    kernels = [
        KernelProfile(
            name=str(e["name"]),
            calls=max(1, int(e["calls"])),
            duration_ms=float(e["total_ms"]) / max(1, int(e["calls"])),
            part=e.get("part"),
        )
        for e in entries
    ]
    kernels.sort(key=lambda p: -total_ms(p))
    r = ProfileReport(source="torch_profiler", launches=sum(p.calls for p in kernels), note=note)
    _finish(r, kernels, timings, task_flops)
    if r.bottleneck is None and r.kernel_ms and timings and timings.bytes_moved and timings.bandwidth_gbps:
        gbps = timings.bytes_moved / (r.kernel_ms * 1e-3) / 1e9
        pct = 100 * gbps / timings.bandwidth_gbps
        what = f"inputs + outputs ({fmt_bytes(timings.bytes_moved)}) in {r.kernel_ms:.4g} ms of kernel time: {gbps:,.0f} GB/s, {pct:.0f}% of the {timings.bandwidth_gbps:,.0f} GB/s a copy reaches"
        if pct >= BUSY_PCT:
            r.bottleneck, r.summary = "memory-bound", f"memory-bound: {what}"
        else:
            r.summary = f"no counters to tell compute from latency; {what}"
    if context is not None:
        reason = r.summary.removeprefix("launch-bound: ") if r.bottleneck == "launch-bound" else None
        sync = findings.host_sync(
            context.model_copy(
                update={"launch_reason": reason, "launch_many": bool(reason) and not reason.startswith("its ")}
            )
        )
        r.findings = [sync] if sync is not None else []
    r.highlights = highlights(r, kernels, "torch.profiler, no hardware counters")
    return r
