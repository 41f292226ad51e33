"""[judge] One profiled kernel's counters as the findings read them (:class:`KernelCounters`), what the
findings know beyond them (:class:`Context`), the thresholds they use, and how a finding names the
candidate's line (tools/profile/findings.py lists the kinds)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from kernelfix.tools.gpu.specs import GpuSpec
from kernelfix.tools.profile.host_sync import SyncReport
from kernelfix.tools.profile.ncu_csv import NcuKernel, NcuRule
from kernelfix.tools.profile.ncu_source import SourceRow
from kernelfix.tools.verdict import CodeLine, KernelProfile

L2_FLOPS_PER_BYTE = 32.0  # below this, a matmul/conv kernel is not reusing its tiles on chip
TENSOR_PIPE = re.compile(r"sm__pipe_tensor(_op_hmma|_op_gmma)?_cycles_active\.avg\.pct_of_peak_sustained_active")
# Each SM pipe's share of its peak: by issued instructions, and by cycles active (the larger counts).
PIPE = re.compile(
    r"sm__(?:inst_executed_pipe_(?P<a>[a-z0-9_]+)|pipe_(?P<b>[a-z0-9_]+)_cycles_active)\.avg\.pct_of_peak_sustained_active"
)
# Pipes a compute-bound kernel can be bound by, with what runs on them; "shared" (FP64 + tensor),
# "uniform", "cbu" (branches), "adu" (address divergence) and "lsu" (memory) are left to other findings.
COMPUTE_PIPES = {
    "fp64": "FP64 (double-precision arithmetic)",
    "alu": "ALU (integer, logic, comparisons, conversions)",
    "fma": "FMA (FP32 multiply-add, integer multiply)",
    "fmaheavy": "FMA-heavy (FP32 and integer multiply-add)",
    "xu": "XU (special functions: MUFU exp/log/sin/rcp, and int/float conversions)",
    "fp16": "FP16 (half-precision arithmetic)",
}
HIGH_PIPE = re.compile(r"(?P<pipe>[\w-]+) is the highest-utilized pipeline \((?P<pct>[\d.]+)%\)")
ROOFLINE_PCT = (
    80.0  # DRAM share of peak a streaming kernel reaches on the H100 (83-92% measured by ncu): "at the roofline"
)
ATOMIC_SHARE = 0.02  # global atomics at least this share of a kernel's warp instructions, with nothing busy: contended
BUSY_FOR_CONTENTION = 60.0  # ... and neither memory nor the SM this busy
PIPE_BUSY_PCT = 60.0  # a compute-bound kernel's busiest pipe this busy is named even without a cause in its SASS
SMALL_WAVES = 0.5  # a grid filling under this share of the resident-block slots (blocks per SM x SMs) is small
FP64_OPS = (
    "DFMA",
    "DADD",
    "DMUL",
    "DSETP",
    "DMNMX",
    "F2F.F64",
    "F2F.F32.F64",
    "MUFU.RCP64H",
    "MUFU.RSQ64H",
    "I2F.F64",
    "F2I.F64",
)
DIV_OPS = ("I2F.U32.RP", "I2F.U64.RP", "I2F.RP")  # the start of the integer-division sequence (then MUFU.RCP, IMAD.HI)
# CUDA's own headers, where inlined intrinsics (atomicAdd, wmma::mma_sync) put their instructions
CUDA_HEADER = re.compile(r"(^|/)(include|crt)/|\.hpp$|/cuda[^/]*/targets/")


class Context(BaseModel):
    """What the findings need beyond the counters: the task's size and work, its dtypes, the
    measured forward, and the candidate's source (to name its lines)."""

    model_config = ConfigDict(extra="forbid")

    task_flops: float | None = None  # matmul/conv FLOPs of the reference forward
    min_bytes: float | None = None  # inputs + outputs
    dtypes: list[str] = []  # floating dtypes of the task's tensors ("float16", ...)
    candidate_ms: float | None = None
    candidate_source: str | None = None
    launch_reason: str | None = None  # set when the forward is launch-bound (bottleneck._launch_bound)
    launch_many: bool = False  # that reason is many short launches (not only a forward longer than its kernels)
    host_syncs: SyncReport | None = None  # what the profile target saw of host syncs in the forward
    gpu: GpuSpec | None = None  # the GPU the kernel ran on (tools/gpu/specs.py): what a finding says of "the GPU"

    def gpu_name(self, otherwise: str) -> str:
        """The GPU at hand for a sentence ("the NVIDIA H200"), or ``otherwise`` where it is not known."""
        return f"the {self.gpu.name}" if self.gpu is not None and self.gpu.name else otherwise

    @property
    def intensity(self) -> float | None:
        """The task's FLOPs per byte it must move: high for matmul and conv, ~0 for elementwise."""
        if not self.task_flops or not self.min_bytes:
            return None
        return self.task_flops / self.min_bytes


def fmt_num(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.3g}"


def fmt_bytes(n: float) -> str:
    return f"{n / 1e9:.3g} GB" if n >= 1e9 else f"{n / 1e6:.3g} MB" if n >= 1e6 else f"{n / 1e3:.3g} KB"


def rule_of(k: NcuKernel, *names: str, contains: str | None = None) -> NcuRule | None:
    """The matching rule with the largest estimated speedup."""
    found = [r for r in k.rules if r.name in names and (contains is None or contains in r.description)]
    return max(found, key=lambda r: r.speedup_pct or 0.0, default=None)


def rule_text(r: NcuRule, sentences: int = 2, limit: int = 320) -> str:
    parts = re.split(r"(?<=[.!?])\s+", " ".join(r.description.split()))
    text = " ".join(parts[:sentences])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def line_at(rows: Sequence[SourceRow], metric: str, ctx: Context, *, lowest: bool = False) -> CodeLine | None:
    """The line the counter ``metric`` puts the most on (the least with ``lowest``), with its line
    in the candidate's own source when the text occurs there once."""
    scored = [(r.number(metric), r) for r in rows if r.metrics.get(metric, "-") not in ("-", "")]
    scored = [(v, r) for v, r in scored if (v > 0 if not lowest else True)]
    if not scored:
        return None
    _, row = (min if lowest else max)(scored, key=lambda vr: vr[0])
    return code_line(row, ctx)


def code_line(row: SourceRow, ctx: Context) -> CodeLine:
    found = None
    if ctx.candidate_source and row.code:
        hits = [i + 1 for i, text in enumerate(ctx.candidate_source.splitlines()) if text.strip() == row.code.strip()]
        found = hits[0] if len(hits) == 1 else None
    return CodeLine(file=row.file, line=row.line, code=row.code[:200], candidate_line=found)


def call_line(row: SourceRow, ctx: Context, calls: str) -> CodeLine:
    """``code_line``, except for a row in one of CUDA's headers (the inlined body of ``atomicAdd`` or
    ``wmma::mma_sync``): there, the candidate's own first line that makes the call (``calls``, a regular
    expression), outside comments."""
    line = code_line(row, ctx)
    if not CUDA_HEADER.search(row.file) or not ctx.candidate_source:
        return line
    prose = _docstring_lines(ctx.candidate_source)
    for i, text in enumerate(ctx.candidate_source.splitlines()):
        code = text.strip()
        if code and i + 1 not in prose and not code.startswith(("//", "#", "*")) and re.search(calls, code):
            return CodeLine(file=row.file, line=row.line, code=code[:200], candidate_line=i + 1)
    return line


def _docstring_lines(source: str) -> set[int]:
    """The lines of the candidate's docstrings (a header that names the call in prose is not the call)."""
    import ast

    from kernelfix.tools import pysource

    try:
        tree = pysource.parse(source)
    except SyntaxError:
        return set()
    return {
        n
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
    }


def atomics_of(row: SourceRow) -> float:
    """Warp instructions of the line that are global (or generic) atomics and reductions: REDG/ATOMG, RED/ATOM;
    not ATOMS, shared memory's, which a privatized histogram is made of."""
    return sum(
        n
        for op, n in row.sass.items()
        if op.startswith(("RED", "ATOMG")) or (op.startswith("ATOM") and not op.startswith("ATOMS"))
    )


def is_atomic(row: SourceRow) -> bool:
    """The line issues global atomics or reductions, by its SASS or ncu's access column."""
    op = row.metrics.get("Access Operation", "")
    return atomics_of(row) > 0 or "Atom" in op or "Red" in op


def lines_with(rows: Sequence[SourceRow], column: str, needle: str) -> list[SourceRow]:
    return [r for r in rows if needle in r.metrics.get(column, "")]


class KernelCounters:
    """One kernel's counters, read once."""

    def __init__(self, k: NcuKernel, p: KernelProfile, share: float, rows: list[SourceRow]):
        self.k, self.p, self.share, self.rows = k, p, share, rows
        g = k.get
        self.sms = g("# SMs") or g("launch__sm_count")
        self.grid = g("Grid Size") or g("launch__grid_size")
        self.block = g("Block Size") or g("launch__block_size")
        self.waves = g("Waves Per SM") or g("launch__waves_per_multiprocessor")
        self.theoretical = g("Theoretical Occupancy")
        self.achieved = g("Achieved Occupancy")
        self.limits = {
            "registers": g("Block Limit Registers"),
            "shared memory": g("Block Limit Shared Mem"),
            "warps": g("Block Limit Warps"),
            "blocks per SM": g("Block Limit SM"),
            "barriers": g("Block Limit Barriers"),
        }
        self.active_threads = g("Avg. Active Threads Per Warp")
        self.branch_efficiency = g("Branch Efficiency")
        self.divergent = g("Avg. Divergent Branches")
        self.spill_requests = g("Local Memory Spilling Requests")
        self.local_sectors = sum(
            v for n, v in k.matching(re.compile(r"l1tex__t_sectors_pipe_lsu_mem_local_op_(ld|st)\.sum")).items()
        )
        self.global_sectors = sum(
            v for n, v in k.matching(re.compile(r"l1tex__t_sectors_pipe_lsu_mem_global_op_(ld|st)\.sum")).items()
        )
        self.l2_read = g("l1tex__m_xbar2l1tex_read_bytes.sum")
        tensor = k.matching(TENSOR_PIPE)
        self.tensor_pct = max(tensor.values()) if tensor else None
        self.cc = k.cc or ""
        self.pipes: dict[str, float] = {}  # each pipe's busiest measure, % of its peak
        self.issued: dict[str, float] = {}  # by issued instructions alone (tells HMMA from HGMMA)
        for name, v in k.matching(PIPE).items():
            m = PIPE.fullmatch(name)
            if m:
                pipe = m.group("a") or m.group("b")
                self.pipes[pipe] = max(self.pipes.get(pipe, 0.0), v)
                if m.group("a"):
                    self.issued[pipe] = v
        self.atomics = sum(k.matching(re.compile(r"smsp__inst_executed_op_global_(red|atom)\.sum")).values())
        self.instructions = g("Executed Instructions") or g("smsp__inst_executed.sum")
        limits = [v for v in self.limits.values() if v is not None]
        self.per_sm = min(limits) if limits else None  # blocks one SM holds at once

    @property
    def busy(self) -> float:
        return max(self.p.memory_pct or 0.0, self.p.compute_pct or 0.0)


def excess_of(
    x: KernelCounters, total: str, excess: str, rule: NcuRule | None, unit: str, rows: Sequence[SourceRow] | None = None
) -> tuple[float, float]:
    """(total, excessive) of a counter pair summed over the source lines (``rows``, or all the kernel's),
    or, without line counters (no line information), from the totals ncu's rule states ("... a total of
    N excessive UNIT (P% of the total T UNIT)")."""
    rows = [r for r in (x.rows if rows is None else rows) if r.number(total) > 0]
    count, extra = sum(r.number(total) for r in rows), sum(r.number(excess) for r in rows)
    if count <= 0 and rule is not None:
        m = re.search(rf"total of ([\d,]+) excessive {unit} \((\d+)% of the total ([\d,]+) {unit}\)", rule.description)
        if m:
            extra, count = float(m.group(1).replace(",", "")), float(m.group(3).replace(",", ""))
    return count, extra
