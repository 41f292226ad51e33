"""Findings from real Nsight Compute captures (tests/fixtures/ncu/feedback: the kernels in
tests/feedback/candidates, profiled on the H100 by bench/feedback_capture.sh): each kernel, written
to be slow for one known reason, gets that reason named first, with its numbers, its line, and a fix
that matches it; the healthy controls get no defect; no advice contradicts the finding."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelfix.tools.profile import bottleneck, findings, ncu_csv, ncu_source
from kernelfix.tools.verdict import TimingStats, Timings

FIX = Path(__file__).parent / "fixtures" / "ncu" / "feedback"
CANDIDATES = Path(__file__).parent / "feedback" / "candidates"
N = 8192 * 8192 * 4
TASKS = {  # task: (matmul/conv FLOPs, inputs + outputs bytes, dtypes)
    "scale_2d": (None, 2 * N, ["float32"]),
    "transpose": (None, 2 * N, ["float32"]),
    "row_sum": (None, 16384 * 8192 * 4 + 16384 * 4, ["float32"]),
    "matmul_fp16": (2 * 4096**3, 3 * 4096 * 4096 * 2, ["float16"]),
    "kernelbench/level1/50_conv_standard_2D__square_input__square_kernel": (
        2 * 256 * 96 * 55 * 55 * 3 * 121, (256 * 3 * 224 * 224 + 256 * 96 * 55 * 55) * 4, ["float32"]),
}
# The forward's measured time where it matters: 8192 launches of a 3 us kernel take ~20 ms.
MEASURED_MS = {"scale_many_launches_cuda": 20.0}


def header(case: str) -> dict[str, str]:
    text = (CANDIDATES / f"{case}.py").read_text()
    return dict(re.findall(r"^# (task|defect|line): ?(.*)$", text, re.M))


def report(case: str):
    h = header(case)
    flops, nbytes, dtypes = TASKS[h["task"]]
    kernels = ncu_csv.parse((FIX / f"{case}.details.csv").read_text()).kernels
    sources = ncu_source.parse((FIX / f"{case}.source.csv").read_text())
    ms = MEASURED_MS.get(case)
    timings = Timings(candidate=TimingStats(median_ms=ms, mean_ms=ms, std_ms=0, p10_ms=ms, p90_ms=ms, min_ms=ms, runs=100), bytes_moved=nbytes) if ms else Timings(bytes_moved=nbytes)
    ctx = findings.Context(task_flops=flops, min_bytes=nbytes, dtypes=dtypes, candidate_source=(CANDIDATES / f"{case}.py").read_text())
    return bottleneck.from_ncu(kernels, timings=timings, task_flops=flops, max_launches=3 if "many_launches" in case else None, sources=sources, context=ctx)


CAPTURED = sorted(p.name.removesuffix(".details.csv") for p in FIX.glob("*.details.csv"))
DEFECTS = [c for c in CAPTURED if header(c)["defect"] not in ("none", "fairness")]
CONTROLS = [c for c in CAPTURED if header(c)["defect"] == "none"]
EXPECTED = {  # the defect each kernel was written with -> the finding kind that names it
    "uncoalesced": "uncoalesced", "divergence": "divergence", "local_memory": "local_memory", "occupancy_shared_memory": "occupancy",
    "small_grid": "small_grid", "tail_wave": "tail_wave", "launch_bound": "launch_bound", "bank_conflicts": "bank_conflicts",
    "no_reuse, tensor_cores_unused": "no_reuse", "no_reuse": "no_reuse",
}


@pytest.mark.parametrize("case", DEFECTS)
def test_each_defect_is_named_first_with_its_numbers_line_and_fix(case):
    h = header(case)
    r = report(case)
    assert r.findings, r.highlights
    first = r.findings[0]
    assert first.kind == EXPECTED[h["defect"]], [f.kind for f in r.findings]
    assert re.search(r"\d", first.what) and first.fix
    if h["line"] and first.kind not in ("launch_bound",):  # the line the defect is on, as the candidate has it
        assert first.where is not None and h["line"].strip() in first.where.code, first.where
        cand = (CANDIDATES / f"{case}.py").read_text().splitlines()
        assert h["line"].strip() in cand[first.where.candidate_line - 1]
    text = "\n".join(r.highlights)
    assert "Findings (most costly first):" in text and first.what in text and f"Fix: {first.fix}" in text


@pytest.mark.parametrize("case", DEFECTS + CONTROLS)
def test_no_advice_contradicts_the_finding(case):
    r = report(case)
    text = "\n".join(r.highlights).lower()
    kinds = {f.kind for f in r.findings}
    if "no_reuse" not in kinds:  # tiling for reuse is advice for a kernel that re-reads its operands, nothing else
        assert "larger tiles" not in text and "tile the work" not in text, text
    if "tensor_cores_unused" not in kinds:
        assert "tensor cores" not in text or "compute-bound" in text, text


@pytest.mark.parametrize("case", CONTROLS)
def test_healthy_kernels_get_no_defect(case):
    r = report(case)
    assert {f.kind for f in r.findings} <= {"memory_bound"}, [f.what for f in r.findings]


def test_occupancy_names_its_limiter_and_ncu_says_so_in_its_own_words():
    r = report("scale_smem_occupancy_cuda")
    f = r.findings[0]
    assert "limited by shared memory" in f.what and "160 KB" in f.what and "6.2% theoretical" in f.what
    assert "shared memory per block" in f.fix
    text = "\n".join(r.highlights)
    assert "Nsight Compute says:" in text and "limited by the required amount of shared memory" in text


def test_uncoalesced_triton_points_at_the_candidates_own_line_and_ratio():
    f = report("scale_uncoalesced_triton").findings[0]
    assert "8.0x the memory sectors" in f.what and f.where is not None and f.where.candidate_line == 18
    assert "consecutive threads" in f.fix and "larger tiles" not in f.fix


def test_bank_conflicts_say_how_many_ways():
    f = report("transpose_bank_conflicts_cuda").findings[0]
    assert "32-way" in f.what and "[32][33]" in f.fix


def test_the_tail_wave_says_how_full_the_last_wave_is():
    f = report("scale_tail_wave_cuda").findings[0]
    assert "1.06 waves" in f.what and "6%" in f.what


def test_a_direct_convolution_in_float32_is_told_about_tf32x3_not_plain_tf32():
    r = report("conv_direct_exact_cuda")
    kinds = [f.kind for f in r.findings]
    assert "no_reuse" in kinds and "tensor_cores_unused" in kinds
    tc = next(f for f in r.findings if f.kind == "tensor_cores_unused")
    assert "tf32x3" in tc.fix and "plain TF32 fails" in tc.fix


def test_source_page_keeps_the_first_launch_of_each_kernel():
    pages = ncu_source.parse((FIX / "scale_many_launches_cuda.source.csv").read_text())
    (name, rows), = pages.items()
    assert name.startswith("scale_row") and len({r.line for r in rows}) == len(rows)
    triton = ncu_source.parse((FIX / "matmul_naive_triton.source.csv").read_text())
    files = {Path(r.file).name for r in triton["matmul_kernel"]}
    assert "matmul_naive_triton.py" in files  # the candidate's own lines, beside Triton's library
