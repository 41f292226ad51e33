"""[judge] The findings of the SM: divergence, occupancy, the grid, the busiest compute pipe and its cause,
Ampere's mma.sync on Hopper, and latency (tools/profile/findings.py lists the kinds)."""

from __future__ import annotations

import math
import re

from kernelfix.tools.profile.kernel_counters import (
    COMPUTE_PIPES,
    DIV_OPS,
    FP64_OPS,
    HIGH_PIPE,
    PIPE_BUSY_PCT,
    SMALL_WAVES,
    Context,
    KernelCounters,
    call_line,
    code_line,
    fmt_num,
    line_at,
    rule_of,
    rule_text,
)
from kernelfix.tools.profile.ncu_source import SourceRow
from kernelfix.tools.verdict import CodeLine, Finding


def divergence(x: KernelCounters, ctx: Context) -> Finding | None:
    rule = rule_of(x.k, "ThreadDivergence")
    active = x.active_threads
    if active is None or active >= 24:
        return None
    if not ((x.divergent or 0) > 0 or rule is not None):
        return None  # partial warps at the edges, not branches
    where = line_at(x.rows, "Divergent Branches", ctx)
    eff = f"; branch efficiency {x.branch_efficiency:.0f}%" if x.branch_efficiency is not None else ""
    return Finding(
        kind="divergence",
        kernel=x.k.name,
        share_pct=x.share,
        what=(
            f"warp divergence: {active:.0f} of 32 threads active per instruction on average{eff}: lanes of one warp take different "
            "paths, and the warp runs each path with the other lanes idle"
        ),
        fix=(
            "make branches uniform across a warp: branch on the warp index (threadIdx.x / 32) or on data grouped so all 32 lanes "
            "take one path; where both sides are short, compute both and select (no branch); move rare slow paths out of the hot loop"
        ),
        where=where,
        gain_pct=rule.speedup_pct if rule else None,
        ncu_rule=rule_text(rule) if rule else None,
    )


def occupancy(x: KernelCounters, ctx: Context) -> Finding | None:
    theo = x.theoretical
    if theo is None or theo >= 50.0 or x.busy >= 60.0:
        return None  # ample occupancy, or a unit is busy already: occupancy is not what limits it
    known = {name: v for name, v in x.limits.items() if v is not None}
    if not known:
        return None
    low = min(known.values())
    limiters = [name for name, v in known.items() if v == low]
    block = int(x.block) if x.block else None
    warps_per_sm = round(64 * theo / 100)
    p = x.p
    detail = {
        "shared memory": f"{(p.shared_mem_per_block or 0) / 1024:.0f} KB of shared memory per block lets {low:.0f} block(s) fit an SM",
        "registers": f"{p.registers_per_thread} registers per thread let {low:.0f} block(s) of {block} threads fit an SM",
        "warps": f"blocks of {block} threads: {low:.0f} of them reach the SM's warp limit",
        "blocks per SM": f"at most {low:.0f} blocks per SM, of only {block} threads each",
        "barriers": f"{low:.0f} blocks per SM by the number of barriers",
    }
    fixes = {
        "shared memory": "use less shared memory per block: smaller tiles or fewer pipeline stages (Triton: smaller BLOCK, num_stages), only what the block really needs",
        "registers": "use fewer registers per thread: fewer live values, smaller per-thread tiles, __launch_bounds__(threads, minBlocksPerSM) (Triton: fewer elements per thread, num_warps)",
        "warps": "the block size sets the limit: blocks of 128-256 threads let more blocks share an SM",
        "blocks per SM": "make blocks larger (128-512 threads), so the per-SM block limit does not cap the warps",
        "barriers": "use fewer named barriers per block",
    }
    name = limiters[0]
    rule = rule_of(x.k, "TheoreticalOccupancy")
    achieved = f", {x.achieved:.0f}% achieved" if x.achieved is not None else ""
    return Finding(
        kind="occupancy",
        kernel=x.k.name,
        share_pct=x.share,
        what=(
            f"low occupancy: {theo:.1f}% theoretical ({warps_per_sm} of 64 warps per SM){achieved}, limited by {name}: {detail[name]}; "
            f"with so few warps nothing hides memory latency (memory {p.memory_pct or 0:.0f}%, SM {p.compute_pct or 0:.0f}% of peak)"
        ),
        fix=fixes[name],
        gain_pct=rule.speedup_pct if rule else None,
        ncu_rule=rule_text(rule) if rule else None,
    )


def grid(x: KernelCounters, ctx: Context) -> Finding | None:
    if not x.sms or not x.grid:
        return None
    rule = rule_of(x.k, "LaunchConfiguration")
    gain = rule.speedup_pct if rule else None
    # An SM runs several blocks at once (the least of its block limits: warps, registers, shared memory):
    # the grid fills the GPU once at SMs x that many blocks, and a grid-stride loop wants at least that.
    slots = x.sms * x.per_sm if x.per_sm else None
    holds = (
        f"; an SM holds {x.per_sm:.0f} blocks of {x.block:.0f} threads at once, so {slots:.0f} blocks would fill the GPU once"
        if slots and x.block
        else ""
    )
    per_sm_text = f"{x.sms:.0f} x {x.per_sm:.0f} = {slots:.0f}" if slots else f"4 x {x.sms:.0f}"
    fix = (
        f"launch enough blocks to fill every SM: for a grid-stride loop, grid = SMs x resident blocks per SM ({per_sm_text}; "
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor gives the second), or more; otherwise give each block less work "
        "(Triton: a smaller BLOCK, more programs; split the reduction dimension)"
    )
    if x.grid < x.sms:
        idle = x.sms - x.grid
        return Finding(
            kind="small_grid",
            kernel=x.k.name,
            share_pct=x.share,
            what=f"grid too small: {x.grid:.0f} blocks for {x.sms:.0f} SMs, so {idle:.0f} SMs ({100 * idle / x.sms:.0f}%) do nothing{holds}",
            fix=fix,
            gain_pct=gain if gain is not None else 100 * idle / x.sms,
            ncu_rule=rule_text(rule) if rule else None,
        )
    if slots and x.grid < SMALL_WAVES * slots and x.busy < 60.0:
        used = x.grid / slots
        return Finding(
            kind="small_grid",
            kernel=x.k.name,
            share_pct=x.share,
            what=(
                f"grid too small: {x.grid:.0f} blocks for {slots:.0f} resident-block slots ({x.sms:.0f} SMs x {x.per_sm:.0f}): "
                f"{used:.2f} waves, so {100 * used:.0f}% of the GPU's warp slots hold a warp (achieved occupancy "
                f"{x.achieved or 0:.0f}%) and too few loads are in flight to cover memory latency (memory {x.p.memory_pct or 0:.0f}% of peak)"
            ),
            fix=fix,
            gain_pct=gain if gain is not None else 100 * (1.0 - used),
            ncu_rule=rule_text(rule) if rule else None,
        )
    waves = x.waves
    if waves is None or waves < 1.0 or waves > 8.0:
        return None
    last = waves - math.floor(waves)
    if last == 0.0 or last >= 0.5:
        return None
    idle = (1.0 - last) / math.ceil(waves)  # share of the kernel's SM time the partial wave leaves idle
    if idle < 0.1:
        return None
    per_wave = x.grid / waves
    return Finding(
        kind="tail_wave",
        kernel=x.k.name,
        share_pct=x.share,
        what=(
            f"tail wave: {x.grid:.0f} blocks make {waves:.2f} waves of {per_wave:.0f} blocks; the last wave fills {100 * last:.0f}% "
            f"of the GPU, so about {100 * idle:.0f}% of the kernel's SM time is idle waiting for it"
        ),
        fix=(
            f"size the work to whole waves: a block count that is a multiple of {per_wave:.0f} ({x.sms:.0f} SMs x blocks per SM), "
            "or many more, smaller blocks so the last wave is short, or a persistent kernel with one block per SM slot looping over the work"
        ),
        gain_pct=gain if gain is not None else 100 * idle,
        ncu_rule=rule_text(rule) if rule else None,
    )


def _fp64_rate(ctx: Context) -> str:
    """What FP64 costs on the GPU at hand, from the specs table; without it, what the common GPUs do."""
    rate = ctx.gpu.fp64_rate() if ctx.gpu is not None else None
    if rate is None:
        return "Data-center GPUs (A100, H100, H200) run FP64 at half the FP32 rate, consumer and L-series GPUs at 1/64 of it"
    name = ctx.gpu_name("the GPU")
    return f"{name[0].upper()}{name[1:]} runs FP64 at {rate} the FP32 rate"


def pipe_cause(x: KernelCounters, ctx: Context) -> tuple[str, str, CodeLine | None, str] | None:
    """(cause, numbers, where, fix) for the busiest pipe of a compute-bound kernel, from its SASS (and
    the FP64 instruction counters): FP64 arithmetic, integer division, or special functions."""
    fp64_rows = [r for r in x.rows if r.ops(*FP64_OPS) > 0]
    fp64 = sum(
        v
        for n, v in x.k.matching(re.compile(r"smsp__sass_thread_inst_executed_op_d(add|mul|fma)_pred_on\.sum")).items()
    )
    fp64_warp = sum(r.ops(*FP64_OPS) for r in fp64_rows)
    busiest = max(x.pipes.get(p, 0.0) for p in COMPUTE_PIPES) if x.pipes else 0.0
    fp64_busiest = x.pipes.get("fp64", 0.0) > 0 and x.pipes.get("fp64", 0.0) >= busiest
    fp64_share = fp64_warp / x.instructions if x.instructions else 0.0
    if (fp64_warp > 0 or fp64 > 0) and (fp64_busiest or fp64_share >= 0.1):
        named = [r for r in fp64_rows if r.code.strip("{}; \t")]  # a closing brace can carry an inlined pow's body
        hot = max(named or fp64_rows, key=lambda r: r.ops(*FP64_OPS), default=None)
        convert = sum(r.ops("F2F.F64") for r in fp64_rows)
        ops = {op: sum(r.ops(op) for r in fp64_rows) for op in ("DFMA", "DADD", "DMUL")}
        counted = (
            ", ".join(f"{fmt_num(n)} {op}" for op, n in ops.items() if n) or f"{fmt_num(fp64)} FP64 thread instructions"
        )
        widened = f"; {fmt_num(convert)} F2F.F64 conversions: float values widened to double" if convert else ""
        return (
            "FP64 arithmetic in float code",
            f"{counted} warp instructions{widened}",
            code_line(hot, ctx) if hot is not None else None,
            "keep float math in float: float literals (1.0f, 0.5f, 2.5f), the float functions (powf, expf, exp2f, logf, sqrtf, "
            f"fabsf, fmaxf) and float accumulators; no double temporaries. {_fp64_rate(ctx)}; in float the kernel is limited by "
            "memory instead",
        )
    div_rows = [r for r in x.rows if r.ops(*DIV_OPS) > 0]
    if div_rows:

        def written(r: SourceRow) -> bool:  # the division is in the line's own text (the compiler moves some elsewhere)
            return bool(re.search(r"[^/*]/[^/*=]|%", r.code.split("//")[0]))

        hot = max(div_rows, key=lambda r: (written(r), r.ops(*DIV_OPS)))
        n = sum(r.ops(*DIV_OPS) for r in div_rows)
        return (
            "integer division and modulo in the index math",
            f"{fmt_num(n)} integer divisions (the I2F.RP, MUFU.RCP, IMAD.HI sequence, dozens of instructions each) on {len(div_rows)} "
            f"line{'s' if len(div_rows) != 1 else ''}",
            code_line(hot, ctx),
            "index without dividing per element: a 2-D or 3-D grid (blockIdx.y over batch x channel, blockIdx.x and threadIdx.x along "
            "the contiguous dimension), so each coordinate comes from the grid; or divide once per block or row and step from there; "
            "32-bit indices where the sizes allow; divisors known at compile time (powers of two become shifts), or a precomputed "
            "magic-number reciprocal (fastdiv: __umulhi(i, magic) >> shift). Triton: a program id per outer dimension, tl.arange along the last",
        )
    mufu_rows = [r for r in x.rows if r.ops("MUFU") > 0]
    compute = {p: v for p, v in x.pipes.items() if p in COMPUTE_PIPES}
    if mufu_rows and compute and max(compute, key=lambda p: compute[p]) == "xu":
        hot = max(mufu_rows, key=lambda r: r.ops("MUFU"))
        return (
            "special functions (MUFU: exp, log, sin, rcp, rsqrt)",
            f"{fmt_num(sum(r.ops('MUFU') for r in mufu_rows))} MUFU warp instructions",
            code_line(hot, ctx),
            "call fewer transcendentals: hoist invariant ones out of loops, compute exp once and reuse it, exp2f with log2(e) folded "
            "into a constant, one reciprocal per value instead of a division per use; fast intrinsics (__expf, __logf) only where "
            "their error stays inside the task's tolerance",
        )
    return None


def compute_pipe(x: KernelCounters, ctx: Context) -> Finding | None:
    """A compute-bound kernel on a pipe other than the tensor cores, with its cause where the SASS shows one."""
    if x.p.bottleneck != "compute-bound":
        return None
    pipes = {p: v for p, v in x.pipes.items() if p in COMPUTE_PIPES}
    if pipes:
        pipe, pct = max(pipes.items(), key=lambda pv: pv[1])
    else:  # no per-pipe counters: ncu's own rule names the busiest pipe
        rule = rule_of(x.k, "HighPipeUtilization")
        m = HIGH_PIPE.search(rule.description) if rule else None
        if not m or m.group("pipe").lower() not in COMPUTE_PIPES:
            return None
        pipe, pct = m.group("pipe").lower(), float(m.group("pct"))
    if x.tensor_pct is not None and x.tensor_pct >= pct:
        return None  # a tensor-core kernel: its pipe is the one to keep busy
    cause = pipe_cause(x, ctx)
    if cause is None and pct < PIPE_BUSY_PCT:
        return None
    busy = sorted(((p, v) for p, v in (pipes or {pipe: pct}).items() if v >= 20.0 or p == pipe), key=lambda pv: -pv[1])[
        :3
    ]
    head = (
        f"compute-bound (SM {x.p.compute_pct or 0:.0f}%, memory {x.p.memory_pct or 0:.0f}% of peak), busiest pipes "
        + ", ".join(f"{p.upper()} {v:.0f}%" for p, v in busy)
    )
    if cause is None:
        return Finding(
            kind="compute_pipe",
            kernel=x.k.name,
            share_pct=x.share,
            what=f"{head}: {pipe.upper()} runs {COMPUTE_PIPES[pipe].split(' (', 1)[1].rstrip(')')}",
            fix=(
                "do less work per output on that pipe: hoist loop-invariant arithmetic, reuse computed values, fold constants, "
                "fuse multiply and add, and keep index math out of the inner loop"
            ),
            where=line_at(x.rows, "Warp Stall Sampling (All Samples)", ctx),
            gain_pct=None,
        )
    what, numbers, where, fix = cause
    # ncu's own words: its FP64 roofline rule for double precision (its advice is the third sentence), else the
    # sentences of its pipe rule that name the busiest pipe (not its verdict on whether that pipe limits)
    fp64_rule = rule_of(x.k, "SOLFPRoofline", contains="FP64 bound") if what.startswith("FP64") else None
    rule = fp64_rule or rule_of(x.k, "HighPipeUtilization")
    return Finding(
        kind="compute_pipe",
        kernel=x.k.name,
        share_pct=x.share,
        what=f"{what}: {head}; {numbers}",
        fix=fix,
        where=where,
        gain_pct=rule.speedup_pct if rule and rule.speedup_pct else None,
        ncu_rule=rule_text(rule, sentences=3 if fp64_rule else 2, limit=420) if rule else None,
    )


def mma_sync_on_hopper(x: KernelCounters, ctx: Context) -> Finding | None:
    """An sm_90 matmul/conv kernel on Ampere's mma.sync (HMMA) and none of Hopper's wgmma (HGMMA)."""
    heavy = ctx.intensity is not None and ctx.intensity >= 16.0
    if not heavy or not x.cc.startswith("9."):
        return None
    hmma_rows = [r for r in x.rows if r.ops("HMMA") > 0]
    hmma = sum(r.ops("HMMA") for r in hmma_rows)
    hgmma = sum(r.ops("HGMMA") for r in x.rows)
    uses_hmma = hmma > 0 or x.issued.get("tensor_op_hmma", 0.0) > 0
    uses_gmma = hgmma > 0 or x.issued.get("tensor_op_gmma", 0.0) > 0
    if not uses_hmma or uses_gmma or not (hmma_rows or x.rows == []):
        return None
    hot = max(hmma_rows, key=lambda r: r.ops("HMMA"), default=None)
    where = call_line(hot, ctx, r"\bmma_sync\s*\(|\"mma\.sync|\btl\.dot\s*\(") if hot is not None else None
    busy = f"; the tensor pipe is {x.tensor_pct:.0f}% busy" if x.tensor_pct is not None else ""
    achieved = ""
    if ctx.task_flops and ctx.candidate_ms:
        achieved = f", {ctx.task_flops / (ctx.candidate_ms * 1e-3) / 1e12:.3g} TFLOP/s over the measured forward"
    counted = f"{fmt_num(hmma)} HMMA warp instructions, no HGMMA" if hmma else "HMMA instructions, no HGMMA"
    return Finding(
        kind="mma_sync_on_hopper",
        kernel=x.k.name,
        share_pct=x.share,
        what=(
            f"mma.sync on Hopper: the tensor cores are fed Ampere's warp-synchronous mma.sync ({counted}){busy}{achieved}; "
            f"on {ctx.gpu_name('a Hopper GPU')} (sm_90) only wgmma, asynchronous warpgroup MMA with operands from shared memory, "
            "reaches the tensor-core peak"
        ),
        fix=(
            "use wgmma: in Triton, tl.dot with num_warps=4 or 8 (whole warpgroups) and BLOCK_M >= 64 compiles to wgmma on sm_90; load the "
            "tiles through tensor descriptors (TMA) and pipeline the K loop with num_stages=3-4; by hand, wgmma.mma_async needs sm_90a, "
            "TMA descriptors and mbarriers (CUTLASS 3 / CuTe): write the GEMM in Triton"
        ),
        where=where,
        gain_pct=max(100.0 - (x.tensor_pct or 0.0), 0.0),
    )


def latency_bound(x: KernelCounters, ctx: Context) -> Finding | None:
    if x.p.bottleneck != "latency-bound":
        return None
    stalls = ", ".join(f"{s.reason} {s.share_pct:.0f}%" for s in x.p.stalls[:2])
    return Finding(
        kind="latency_bound",
        kernel=x.k.name,
        share_pct=x.share,
        what=f"latency-bound: memory {x.p.memory_pct or 0:.0f}% and SM {x.p.compute_pct or 0:.0f}% of peak"
        + (f"; top stalls {stalls}" if stalls else ""),
        fix=(
            "give each SM more independent work: more blocks and warps in flight, more loads per thread before their first use "
            "(unroll, 16-byte vector loads), fewer dependent steps in the inner loop"
        ),
    )
