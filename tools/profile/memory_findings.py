"""[judge] The findings of memory: uncoalesced and contended global access, bank conflicts, local memory,
no reuse and idle tensor cores, a kernel already at the memory roofline (tools/profile/findings.py lists the kinds)."""

from __future__ import annotations

from kernelfix.tools.kernel_source import atomics
from kernelfix.tools.profile.kernel_counters import (
    ATOMIC_SHARE,
    BUSY_FOR_CONTENTION,
    L2_FLOPS_PER_BYTE,
    ROOFLINE_PCT,
    Context,
    KernelCounters,
    atomics_of,
    call_line,
    code_line,
    excess_of,
    fmt_bytes,
    fmt_num,
    is_atomic,
    line_at,
    lines_with,
    rule_of,
    rule_text,
)
from kernelfix.tools.verdict import Finding


def uncoalesced(x: KernelCounters, ctx: Context) -> Finding | None:
    rule = rule_of(x.k, "UncoalescedGlobalAccess")
    atomic = [r for r in x.rows if is_atomic(r)]
    plain = [r for r in x.rows if not is_atomic(r)]
    if atomic:  # an atomic's address is where its update goes: its sectors are contention, not layout
        rule = None  # ncu's totals count the atomics too
    sectors, excessive = excess_of(
        x, "L2 Theoretical Sectors Global", "L2 Theoretical Sectors Global Excessive", rule, "sectors", plain
    )
    ideal = sectors - excessive
    if sectors <= 0 or excessive / sectors < 0.3:
        return None
    ratio = sectors / max(ideal, 1.0)
    where = line_at(plain, "L2 Theoretical Sectors Global Excessive", ctx)
    return Finding(
        kind="uncoalesced",
        kernel=x.k.name,
        share_pct=x.share,
        what=(
            f"uncoalesced global access: {ratio:.1f}x the memory sectors a coalesced access needs "
            f"({fmt_num(sectors)} sectors where {fmt_num(ideal)} would do; {100 * excessive / sectors:.0f}% excessive): "
            "the 32 threads of a warp touch addresses far apart, so each load or store fetches many 32-byte sectors to use 4 bytes of each"
        ),
        fix=(
            "make consecutive threads (lanes) touch consecutive addresses: index the contiguous, last dimension with threadIdx.x "
            "(Triton: the tl.arange of a block runs along the contiguous axis, offsets = row * stride + col); where the data must be "
            "read across rows (a transpose, a column walk), load coalesced tiles into shared memory and write them out from there; "
            "then use 16-byte accesses (float4, or BLOCK sizes that let Triton vectorize)"
        ),
        where=where,
        gain_pct=rule.speedup_pct if rule else None,
        ncu_rule=rule_text(rule) if rule else None,
    )


def bank_conflicts(x: KernelCounters, ctx: Context) -> Finding | None:
    rule = rule_of(x.k, "SharedMemoryConflicts", "UncoalescedSharedAccess")
    wavefronts, excessive = excess_of(x, "L1 Wavefronts Shared", "L1 Wavefronts Shared Excessive", rule, "wavefronts")
    rows = [r for r in x.rows if r.number("L1 Wavefronts Shared") > 0]
    if wavefronts <= 0 or excessive / wavefronts < 0.3:
        return None
    worst = max(rows, key=lambda r: r.number("L1 Wavefronts Shared Excessive"), default=None)
    ways = None
    if worst is not None:
        w, e = worst.number("L1 Wavefronts Shared"), worst.number("L1 Wavefronts Shared Excessive")
        ways = w / max(w - e, 1.0)
    where = code_line(worst, ctx) if worst is not None and worst.number("L1 Wavefronts Shared Excessive") > 0 else None
    way_text = f"{ways:.0f}-way at the worst line; " if ways and ways >= 2 else ""
    return Finding(
        kind="bank_conflicts",
        kernel=x.k.name,
        share_pct=x.share,
        what=(
            f"shared-memory bank conflicts: {way_text}{fmt_num(wavefronts)} shared-memory wavefronts where "
            f"{fmt_num(wavefronts - excessive)} would do ({100 * excessive / wavefronts:.0f}% excessive): lanes of a warp hit the same bank, "
            "so the access is split into one pass per conflicting lane"
        ),
        fix=(
            "give the 32 lanes 32 different banks: pad each row of the shared tile by one element (`__shared__ float tile[32][33]`) "
            "or swizzle the column index (col ^ row); read and write the tile along rows where you can. In Triton, express the "
            "transpose or reduction with tl.trans / tl.sum / tl.dot and let the compiler pick a conflict-free layout"
        ),
        where=where,
        gain_pct=rule.speedup_pct if rule else None,
        ncu_rule=rule_text(rule) if rule else None,
    )


def local_memory(x: KernelCounters, ctx: Context) -> Finding | None:
    local_rows = lines_with(x.rows, "Address Space", "Local")
    spills = (x.spill_requests or 0) > 0
    if not local_rows and not spills and x.local_sectors <= 0.05 * max(x.global_sectors, 1.0):
        return None
    busiest = max(local_rows, key=lambda r: r.number("Instructions Executed"), default=None)
    why = (
        "register spills (the compiler ran out of registers)"
        if spills
        else "a per-thread array the compiler could not keep in registers (indexed with values known only at run time)"
    )
    traffic = (
        f"{fmt_bytes(32 * x.local_sectors)} of local loads and stores" if x.local_sectors else "local loads and stores"
    )
    share = (
        f", {100 * x.local_sectors / (x.local_sectors + x.global_sectors):.0f}% of the kernel's L1 sectors"
        if x.local_sectors and x.global_sectors
        else ""
    )
    return Finding(
        kind="local_memory",
        kernel=x.k.name,
        share_pct=x.share,
        what=f"local memory: {traffic}{share}, from {why}; local memory is DRAM behind the L1 cache, per thread",
        fix=(
            "keep per-thread values in registers: index per-thread arrays only with compile-time constants (fully unroll the loops "
            "that index them, #pragma unroll / tl.static_range), keep them small, or stage shared data in shared memory; for spills, "
            "cut live values (smaller per-thread tiles) or relax __launch_bounds__ / maxrregcount"
        ),
        where=code_line(busiest, ctx) if busiest else None,
        gain_pct=None,
    )


def contended_atomics(x: KernelCounters, ctx: Context) -> Finding | None:
    """Global atomics a large share of the work while nothing is busy: they wait on each other in L2."""
    atomic_rows = [r for r in x.rows if is_atomic(r)]
    count = max(x.atomics, sum(atomics_of(r) for r in atomic_rows))
    if count <= 0 or not x.instructions or count / x.instructions < ATOMIC_SHARE or x.busy >= BUSY_FOR_CONTENTION:
        return None
    hot = max(atomic_rows, key=lambda r: atomics_of(r) or r.number("Instructions Executed"), default=None)
    where = call_line(hot, ctx, r"\batomic[A-Z]\w*\s*\(|\btl\.atomic_\w+\s*\(") if hot is not None else None
    threads = (x.active_threads or 32.0) * count
    stalls = ", ".join(f"{s.reason} {s.share_pct:.0f}%" for s in x.p.stalls[:2])
    use = atomics.use_at(ctx.candidate_source, where.candidate_line if where else None)
    used = f"; {_USE_WORDS[use.use]}" if use is not None else ""
    return Finding(
        kind="contended_atomics",
        kernel=x.k.name,
        share_pct=x.share,
        what=(
            f"contended atomics: {fmt_num(count)} global atomic instructions ({fmt_num(threads)} atomic updates, "
            f"{100 * count / x.instructions:.1f}% of the kernel's instructions) while memory is {x.p.memory_pct or 0:.0f}% and "
            f"the SM {x.p.compute_pct or 0:.0f}% busy"
            + (f"; warps stall on {stalls}" if stalls else "")
            + ": the L2 performs atomics on one address one after another, so threads updating the same few addresses "
            "wait for each other, however the addresses are laid out" + used
        ),
        fix=use.fix if use is not None else _ATOMICS_FIX,
        where=where,
        gain_pct=100.0 - x.busy,
        use=use.use if use is not None else None,
    )


# What the source shows the atomic is for (tools/kernel_source/atomics.py), said in the finding beside its numbers.
_USE_WORDS = {
    "counter": "its returned value indexes the work: a counter handing out one element per atomic",
    "data": "its address is computed from the data: a histogram",
    "one_address": "the threads accumulate into one address",
}
# Where the source does not show what the atomic is for: the fix for each use, short.
_ATOMICS_FIX = (
    "fewer atomics on the same addresses: a histogram (addresses from the data) privatizes per block in shared memory and adds "
    "each bin once per block (Triton: tl.histogram, one tl.atomic_add per program); a sum into one address reduces per warp "
    "(__shfl_down_sync) and per block first and adds once per block (Triton: tl.sum, one tl.atomic_add per program); a counter "
    "that hands out work becomes a grid-stride loop, or claims a chunk of work per atomic"
)


def reuse_and_tensor(x: KernelCounters, ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    intensity = ctx.intensity
    heavy = intensity is not None and intensity >= 16.0  # matmul/conv-like: the task's bytes feed many FLOPs each
    # A tiled kernel does a few dozen FLOPs or more per byte it reads from L2 (a 128 x 128 tile of a
    # GEMM: ~64 on the H100); one that fetches its operands for every product does a handful.
    per_byte = (ctx.task_flops or 0.0) * x.share / 100.0 / x.l2_read if x.l2_read else None
    if heavy and ctx.min_bytes and per_byte is not None and per_byte < L2_FLOPS_PER_BYTE:
        hot = line_at(x.rows, "Warp Stall Sampling (All Samples)", ctx)
        out.append(
            Finding(
                kind="no_reuse",
                kernel=x.k.name,
                share_pct=x.share,
                what=(
                    f"no on-chip reuse: the SMs read {fmt_bytes(x.l2_read)} from L2 for {fmt_bytes(ctx.min_bytes)} of inputs and outputs "
                    f"({x.l2_read / ctx.min_bytes:.0f}x; {per_byte:.1f} FLOP per byte read, where a tiled kernel does {L2_FLOPS_PER_BYTE:.0f} or more): "
                    "operands are fetched again for each output they feed"
                ),
                fix=(
                    "tile the work: each block loads a BLOCK_M x BLOCK_K tile of one operand and a BLOCK_K x BLOCK_N tile of the other "
                    "into shared memory (Triton: 2-D tl.load blocks in a loop over K, then tl.dot) and reuses them for the whole output "
                    "tile; larger tiles (64-256) cut the traffic in proportion; order the blocks (a program-id swizzle) so neighbours share L2"
                ),
                where=hot,
                gain_pct=None,
            )
        )
    half = any(d in ("float16", "bfloat16") for d in ctx.dtypes)
    if heavy and x.tensor_pct is not None and x.tensor_pct < 1.0 and (ctx.dtypes or half):
        precision = (
            "on fp16/bf16 tiles with a float32 accumulator (Triton tl.dot; CUDA mma.sync / wmma, WGMMA on Hopper)"
            if half
            else 'in a float32 task as three TF32 products (Triton tl.dot(a, b, input_precision="tf32x3")): float32-accurate, and the '
            "fastest float32 product the judge accepted where it was measured (an H100, 4096-8192: 1.25-1.28x the same kernel on FP32 FMAs, "
            "1.04-1.08x cuBLAS FP32; tiles 128 x 64 x 32, 4 warps, 4 stages); plain TF32 fails the judge's precision check. First make sure "
            "the operands are reused from shared memory"
        )
        achieved = ""
        if ctx.task_flops and ctx.candidate_ms:
            achieved = f" ({ctx.task_flops / (ctx.candidate_ms * 1e-3) / 1e12:.3g} TFLOP/s over the measured forward)"
        out.append(
            Finding(
                kind="tensor_cores_unused",
                kernel=x.k.name,
                share_pct=x.share,
                what=f"tensor cores unused: the tensor pipes are {x.tensor_pct:.1f}% busy on a matmul/conv task{achieved}; its products run on the FMA pipes",
                fix=f"do the products on the tensor cores, {precision}",
                gain_pct=None,
            )
        )
    return out


def memory_bound(x: KernelCounters, ctx: Context) -> Finding | None:
    p = x.p
    if (p.dram_pct or 0.0) < 60.0 or p.memory_unit != "DRAM":
        return None
    moved = (
        f", moving {p.dram_bytes / ctx.min_bytes:.2f}x the task's inputs + outputs"
        if p.dram_bytes and ctx.min_bytes
        else ""
    )
    if p.dram_pct >= ROOFLINE_PCT:
        return Finding(
            kind="memory_bound",
            kernel=x.k.name,
            share_pct=x.share,
            what=f"at the memory roofline: limited by DRAM bandwidth, {p.dram_pct:.0f}% of peak ({p.dram_gbps or 0:,.0f} GB/s){moved}",
            fix=(
                "only moving fewer bytes makes it faster: fuse the passes before and after it into this kernel, read each input once, "
                "keep intermediates on chip; the kernel itself is already streaming near the bandwidth limit"
            ),
        )
    return Finding(
        kind="memory_bound",
        kernel=x.k.name,
        share_pct=x.share,
        what=(
            f"DRAM-bound at {p.dram_pct:.0f}% of peak ({p.dram_gbps or 0:,.0f} GB/s){moved}, below the {ROOFLINE_PCT:.0f}-90% a "
            "streaming kernel reaches"
        ),
        fix=(
            "move fewer bytes first (fuse passes, read each input once, keep intermediates on chip), then keep more bytes in flight: "
            "16-byte vector accesses, several independent loads per thread before their first use, enough blocks to fill every SM"
        ),
        gain_pct=ROOFLINE_PCT + 10.0 - p.dram_pct,
    )
