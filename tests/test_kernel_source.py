"""Reading a candidate's kernels for what the GPU tools cannot see (tools/kernel_source): races on global memory
(a read-modify-write without an atomic that several threads or programs reach) on their lines with their fixes,
and what an atomic is for, which picks the fix of a contended-atomics finding. The cases are real candidates
(tests/sanitizer/candidates: the races, judged on the GPU by tests/test_kernel_source_gpu.py; tests/feedback/candidates:
the atomics) and small Triton and CUDA kernels below; every other kernel the repository holds is a control that
must read as race-free."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sanitizer_support as sc

from kernelfix.tools.feedback import knowledge
from kernelfix.tools.feedback import verdict_text as feedback
from kernelfix.tools.kernel_source import atomics, cuda_text, races, triton_ast
from kernelfix.tools.profile import bottleneck, findings, ncu_csv, ncu_source
from kernelfix.tools.verdict import Category, CorrectnessReport, SanitizerReport, Timings, ToolRun, TrialReport, Verdict

ROOT = Path(__file__).resolve().parent.parent
FEEDBACK = ROOT / "tests" / "feedback" / "candidates"
RACES = [c for c in sc.cases() if c.defect == "global_race"]
REASON = {"row_sum_split_race_cuda": "blocks", "scatter_add_race_cuda": "data", "row_sum_split_race_triton": "programs"}

# Triton's three ways to accumulate, and its atomics, as fixtures of their own (the GPU cases are CUDA but one).
TRITON = """
import triton
import triton.language as tl

@triton.jit
def split_2d(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    part = tl.program_id(1)
    offs = part * BLOCK + tl.arange(0, BLOCK)
    s = tl.sum(tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=0.0), axis=0)
    tl.store(y_ptr + row, tl.load(y_ptr + row) + s)

@triton.jit
def scatter(src_ptr, idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    i = tl.load(idx_ptr + offs, mask=m)
    old = tl.load(out_ptr + i, mask=m)
    tl.store(out_ptr + i, old + tl.load(src_ptr + offs, mask=m), mask=m)

@triton.jit
def own_rows(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = 0.0
    for k in range(0, cols, BLOCK):
        offs = k + tl.arange(0, BLOCK)
        acc += tl.sum(tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=0.0), axis=0)
    tl.store(y_ptr + row, tl.load(y_ptr + row) + acc)

@triton.jit
def counter(x_ptr, y_ptr, next_ptr, n, BLOCK: tl.constexpr):
    start = tl.atomic_add(next_ptr, BLOCK)
    offs = start + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)

@triton.jit
def histogram(x_ptr, h_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    b = (tl.load(x_ptr + offs, mask=offs < n, other=0.0) * 256.0).to(tl.int32)
    tl.atomic_add(h_ptr + b, 1.0, mask=offs < n)

@triton.jit
def total(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0))
"""

CUDA = r'''
cuda_source = r"""
__global__ void every_thread(const float* x, float* y, int cols) {
    float v = x[blockIdx.x * cols + threadIdx.x];
    y[blockIdx.x] = y[blockIdx.x] + v;
}
__global__ void through_alias(const float* x, float* y, int cols) {
    float* out = y + blockIdx.x / 2;
    if (threadIdx.x == 0) *out += x[blockIdx.x];
}
__global__ void one_writer_per_warp(const float* x, float* y) {
    int lane = threadIdx.x % 32;
    int warp = threadIdx.x / 32;
    float v = x[blockIdx.x * blockDim.x + threadIdx.x];
    if (lane == 0) y[blockIdx.x * 8 + warp] += v;
}
__global__ void grid_stride(const float* x, float* y, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) y[i] += x[i];
}
__global__ void row_col(const float* x, float* y, int cols, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int r = i / cols, c = i % cols;
    if (i < n) y[r * cols + c] = y[r * cols + c] * 0.5f + x[i];
}
__global__ void chunked(const float* x, float* y, int* next, int n) {
    int base = atomicAdd(next, 1024);
    for (int k = 0; k < 1024; k++) if (base + k < n) y[base + k] = x[base + k];
}
"""
'''


def line_of(path: Path, text: str) -> int:
    return next(i + 1 for i, t in enumerate(path.read_text().splitlines()) if t.strip() == text)


# ------------------------------------------------------------------ races on global memory


@pytest.mark.parametrize("case", RACES, ids=lambda c: c.name)
def test_each_race_case_is_named_on_its_line_with_its_fix(case):
    found = races.find(case.path.read_text())
    assert len(found) == 1, found
    (r,) = found
    assert r.code == case.lines[0] and r.line == line_of(case.path, case.lines[0])
    assert r.reason == REASON[case.name]
    assert "without an atomic" in r.why
    assert ("atomicAdd(" if "cuda" in case.name else "tl.atomic_add(") in r.fix
    if r.reason != "data":  # partial sums: a second pass and one writer per element are the other two ways
        assert "second" in r.fix and "one writer per element" in r.fix


def test_the_reasons_say_which_part_of_the_position_the_index_lacks():
    split = races.find((sc.CANDIDATES / "row_sum_split_race_cuda.py").read_text())[0]
    assert "does not depend on blockIdx.x" in split.why and "several blocks" in split.why
    tri = races.find((sc.CANDIDATES / "row_sum_split_race_triton.py").read_text())[0]
    assert "keeps only part of tl.program_id(0)" in tri.why and "several programs" in tri.why
    scatter = races.find((sc.CANDIDATES / "scatter_add_race_cuda.py").read_text())[0]
    assert "read from memory" in scatter.why and "atomicAdd(&out[idx[i]], v)" in scatter.fix


def test_triton_programs_accumulating_and_a_scatter_add():
    by_kernel = {r.kernel: r for r in races.find(TRITON)}
    assert set(by_kernel) == {"split_2d", "scatter"}  # own_rows: one program per output, the load-add-store is its own
    assert (
        by_kernel["split_2d"].reason == "programs"
        and "does not depend on tl.program_id(1)" in by_kernel["split_2d"].why
    )
    assert (
        by_kernel["scatter"].reason == "data"
        and by_kernel["scatter"].code == "tl.store(out_ptr + i, old + tl.load(src_ptr + offs, mask=m), mask=m)"
    )
    assert "tl.atomic_add(out_ptr + i, v, mask=mask)" in by_kernel["scatter"].fix


def test_cuda_accumulations_that_race_and_those_with_one_writer():
    by_kernel = {r.kernel: r for r in races.find(CUDA)}
    assert set(by_kernel) == {"every_thread", "through_alias"}
    assert (
        by_kernel["every_thread"].reason == "threads"
        and "does not depend on threadIdx.x" in by_kernel["every_thread"].why
    )
    assert "if (threadIdx.x == 0)" in by_kernel["every_thread"].fix
    alias = by_kernel["through_alias"]  # a pointer computed from y, written through *
    assert alias.reason == "blocks" and alias.target == "*out" and "atomicAdd(out, v)" in alias.fix


def _controls() -> list[Path]:
    dirs = [
        "tests/feedback/candidates",
        "tests/sanitizer/candidates",
        "tests/corpus",
        "tests/profile_cases",
        "tests/hostile",
        "prompts/knowledge/exemplars",
        "bench/candidates",
        "bench/compile_candidates",
        "examples",
    ]
    files = [p for d in dirs for p in sorted((ROOT / d).rglob("*.py"))]
    return [p for p in files if p.stem not in REASON]


def test_no_other_kernel_of_the_repository_reads_as_a_race():
    files = _controls()
    kernels = [k for p in files for k in (cuda_text.kernels(p.read_text()) + triton_ast.kernels(p.read_text()))]
    assert len(kernels) >= 100  # the walk reads them (a reader that finds no kernel would pass this vacuously)
    flagged = [(p.relative_to(ROOT), r.line, r.code) for p in files for r in races.find(p.read_text())]
    assert not flagged, flagged


def test_unreadable_sources_give_nothing():
    assert races.find(None) == [] and races.find("def broken(:\n") == [] and atomics.uses("") == []
    assert races.find("__global__ void k(float* y) { y[0] +=") == []  # cut off mid-kernel


# ------------------------------------------------------------------ what an atomic is for


@pytest.mark.parametrize(
    "case,use",
    [
        ("scale_counter_atomic_cuda", "counter"),
        ("histogram_atomic_cuda", "data"),
        ("row_sum_atomic_cuda", "one_address"),
    ],
)
def test_each_atomic_case_reads_as_its_use(case, use):
    path = FEEDBACK / f"{case}.py"
    header = dict(re.findall(r"^# (task|defect|line): ?(.*)$", path.read_text(), re.M))
    (u,) = atomics.uses(path.read_text())
    assert u.use == use and u.line == line_of(path, header["line"].strip())


def test_triton_and_cuda_atomics_by_use():
    assert [(u.call, u.use) for u in atomics.uses(TRITON)] == [
        ("tl.atomic_add", "counter"),
        ("tl.atomic_add", "data"),
        ("tl.atomic_add", "one_address"),
    ]
    chunked = atomics.use_at(CUDA, None)
    assert (
        chunked is not None and chunked.use == "counter" and chunked.target == "next"
    )  # claims a chunk: still a counter


def test_the_fix_follows_the_use():
    fixes = {u.use: u.fix for u in atomics.uses(TRITON)}
    assert (
        "grid-stride loop" in fixes["counter"]
        and "claim a chunk per atomic" in fixes["counter"]
        and "privatize" not in fixes["counter"]
    )
    assert fixes["data"].startswith("privatize") and "tl.histogram" in fixes["data"]
    assert (
        "__shfl_down_sync" in fixes["one_address"]
        and "per block" in fixes["one_address"]
        and "privatize" not in fixes["one_address"]
    )


def _histogram_profile(source: str):
    """The H100 capture of the histogram kernel (64M atomicAdds onto 256 bins), read with ``source`` as the candidate's."""
    fx = ROOT / "tests" / "fixtures" / "ncu" / "feedback"
    kernels = ncu_csv.parse((fx / "histogram_atomic_cuda.details.csv").read_text()).kernels
    sources = ncu_source.parse((fx / "histogram_atomic_cuda.source.csv").read_text())
    ctx = findings.Context(min_bytes=64 * 2**20 * 4 + 1024, dtypes=["float32"], candidate_source=source)
    return bottleneck.from_ncu(
        kernels,
        timings=Timings(bytes_moved=64 * 2**20 * 4 + 1024),
        task_flops=None,
        max_launches=None,
        sources=sources,
        context=ctx,
    )


def test_contended_atomics_carries_the_fix_for_the_use_its_source_shows():
    hist = _histogram_profile((FEEDBACK / "histogram_atomic_cuda.py").read_text()).findings[0]
    assert (
        hist.kind == "contended_atomics"
        and hist.use == "data"
        and hist.fix.startswith("privatize")
        and "a histogram" in hist.what
    )
    # The same counters with the counter's source: the atomic ncu placed is the counter's line, and the fix is its own.
    counter = _histogram_profile((FEEDBACK / "scale_counter_atomic_cuda.py").read_text()).findings[0]
    assert counter.kind == "contended_atomics" and counter.use == "counter" and counter.where.candidate_line == 18
    assert (
        "grid-stride loop" in counter.fix
        and "privatize" not in counter.fix
        and "a counter handing out one element" in counter.what
    )
    one = _histogram_profile((FEEDBACK / "row_sum_atomic_cuda.py").read_text()).findings[0]
    assert one.use == "one_address" and "__shfl_down_sync" in one.fix


def test_the_notes_follow_the_use():
    def slugs(source: str) -> list[str]:
        return [n.slug for n in knowledge.for_profile(_histogram_profile(source))]

    assert "contended_atomics" in slugs((FEEDBACK / "histogram_atomic_cuda.py").read_text())
    counter = slugs((FEEDBACK / "scale_counter_atomic_cuda.py").read_text())
    assert (
        "contended_atomics" not in counter and "persistent_grid" in counter
    )  # the grid-stride loop's note, not privatization
    assert "warp_reductions" in slugs((FEEDBACK / "row_sum_atomic_cuda.py").read_text())


# ------------------------------------------------------------------ what the model reads


def _wrong(races_found, nondeterministic: str | None) -> Verdict:
    trial = TrialReport(
        trial=0,
        seed=1,
        ok=False,
        category=Category.NUMERICAL,
        problem="31 of 32 elements outside atol",
        max_abs_error=3e3,
        max_rel_error=0.7,
        mismatches=31,
        numel=32,
        worst_index=[3, 0],
        expected=4096.0,
        actual=1024.0,
    )
    san = SanitizerReport(
        why="correctness_error:numerical",
        inputs="x float32[32, 8192] (32 of 16384 rows)",
        reduced=True,
        reproduced=True,
        nondeterministic=nondeterministic,
        global_races=races_found,
        tools=[ToolRun(tool=t, seconds=5.0, errors=0) for t in ("memcheck", "racecheck", "synccheck", "initcheck")],
    )
    return Verdict(
        category=Category.NUMERICAL,
        task="row_sum",
        device="cuda",
        message="trial 0: wrong",
        sanitizer=san,
        correctness=CorrectnessReport(trials=[trial]),
    )


def test_feedback_names_the_race_the_tools_could_not():
    case = next(c for c in RACES if c.name == "row_sum_split_race_cuda")
    found = races.find(case.path.read_text())
    lines = feedback.render(
        _wrong(found, "32 of 32 elements of output 0 differ between two calls on the same inputs")
    ).splitlines()
    assert "found no hazard, but two calls on the same inputs gave different outputs" in lines[0]
    assert lines[1].startswith("Cause: your source reads, adds to and writes back global memory")
    assert f"line {found[0].line} of your source, in row_sum_split_kernel: `{case.lines[0]}`" in lines[2]
    assert lines[3].strip().startswith("Fix: Make the update atomic (atomicAdd(&y[blockIdx.y], v)")
    same = feedback.render(_wrong(found, None)).splitlines()  # lost updates that came out the same on both calls
    assert "racecheck sees shared memory only" in same[0] and case.lines[0] in same[1]


def test_feedback_says_what_was_looked_for_where_the_source_shows_nothing():
    text = feedback.render(_wrong([], "3 of 32 elements of output 0 differ between two calls on the same inputs"))
    assert (
        "Your source shows no read-modify-writes of global memory without an atomic" in text
        and "atomics on floats" in text
    )
    unread = feedback.render(
        _wrong(None, "3 of 32 elements differ")
    )  # not read (an older verdict): the tools' line alone
    assert "Your source shows" not in unread and "race on global memory" in unread
