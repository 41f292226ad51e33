"""Findings from real Nsight Compute captures (tests/fixtures/ncu/feedback: the kernels in
tests/feedback/candidates, profiled on the H100 by bench/feedback_capture.sh): each kernel, written
to be slow for one known reason, gets that reason named first, with its numbers, its line, and a fix
that matches it; the healthy controls get no defect; no advice contradicts the finding."""

from __future__ import annotations

import csv
import importlib.util
import io
import re
from pathlib import Path

import pytest

from kernelfix.tools.profile import bottleneck, findings, kernel_counters, memory_findings, ncu, ncu_csv, ncu_source
from kernelfix.tools.verdict import Timings, TimingStats

FIX = Path(__file__).parent / "fixtures" / "ncu" / "feedback"
CANDIDATES = Path(__file__).parent / "feedback" / "candidates"
N = 8192 * 8192 * 4
TASKS = {  # task: (matmul/conv FLOPs, inputs + outputs bytes, dtypes)
    "scale_2d": (None, 2 * N, ["float32"]),
    "transpose": (None, 2 * N, ["float32"]),
    "row_sum": (None, 16384 * 8192 * 4 + 16384 * 4, ["float32"]),
    "histogram": (None, 64 * 2**20 * 4 + 256 * 4, ["float32"]),
    "pow_mix": (None, 2 * N, ["float32"]),
    "channel_affine": (None, 2 * 16 * 64 * 256 * 256 * 4 + 2 * 64 * 4, ["float32"]),
    "matmul_fp16": (2 * 4096**3, 3 * 4096 * 4096 * 2, ["float16"]),
    "kernelbench/level1/50_conv_standard_2D__square_input__square_kernel": (
        2 * 256 * 96 * 55 * 55 * 3 * 121,
        (256 * 3 * 224 * 224 + 256 * 96 * 55 * 55) * 4,
        ["float32"],
    ),
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
    timings = (
        Timings(
            candidate=TimingStats(median_ms=ms, mean_ms=ms, std_ms=0, p10_ms=ms, p90_ms=ms, min_ms=ms, runs=100),
            bytes_moved=nbytes,
        )
        if ms
        else Timings(bytes_moved=nbytes)
    )
    ctx = findings.Context(
        task_flops=flops, min_bytes=nbytes, dtypes=dtypes, candidate_source=(CANDIDATES / f"{case}.py").read_text()
    )
    return bottleneck.from_ncu(
        kernels,
        timings=timings,
        task_flops=flops,
        max_launches=3 if "many_launches" in case else None,
        sources=sources,
        context=ctx,
    )


CAPTURED = sorted(p.name.removesuffix(".details.csv") for p in FIX.glob("*.details.csv"))
DEFECTS = [c for c in CAPTURED if header(c)["defect"] not in ("none", "fairness")]
CONTROLS = [c for c in CAPTURED if header(c)["defect"] == "none"]
# the defect each kernel was written with -> the finding kind that names it (the table the GPU proof uses)
_proof = importlib.util.spec_from_file_location(
    "feedback_proof", Path(__file__).parent.parent / "bench" / "feedback_proof.py"
)
EXPECTED = importlib.util.module_from_spec(_proof)
_proof.loader.exec_module(EXPECTED)
EXPECTED = EXPECTED.FIRST


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
    if not kinds & {"tensor_cores_unused", "mma_sync_on_hopper"}:
        assert "tensor cores" not in text or "compute-bound" in text, text
    if "uncoalesced" not in kinds:  # an atomic's scattered target, an FP64 pipe: no advice to reorder lanes
        assert "consecutive threads" not in text and "uncoalesced global" not in text, text


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
    ((name, rows),) = pages.items()
    assert name.startswith("scale_row") and len({r.line for r in rows}) == len(rows)
    triton = ncu_source.parse((FIX / "matmul_naive_triton.source.csv").read_text())
    files = {Path(r.file).name for r in triton["matmul_kernel"]}
    assert "matmul_naive_triton.py" in files  # the candidate's own lines, beside Triton's library


# --- issue 32: the defects the diagnosis misread -------------------------------------------------------


def test_contended_atomics_name_the_atomic_line_and_leave_the_uncoalesced_fix_out():
    r = report("histogram_atomic_cuda")
    assert [f.kind for f in r.findings] == ["contended_atomics"]  # the RED's sectors no longer read as uncoalesced
    f = r.findings[0]
    assert (
        "2.1M global atomic instructions" in f.what and "drain" in f.what and "one address one after another" in f.what
    )
    assert (
        f.where.candidate_line is not None and "atomicAdd(&hist[bin], 1.0f);" in f.where.code
    )  # the call, not the header line
    assert (
        "shared memory" in f.fix
        and "__match_any_sync" in f.fix
        and "tl.histogram" in f.fix
        and "distributed shared memory" in f.fix
    )
    text = "\n".join(r.highlights)
    assert (
        "uncoalesced" not in text.lower() and "Nsight Compute says" not in text
    )  # ncu's rule counts the atomics as uncoalesced


def test_fp64_by_accident_names_the_double_line_and_the_float_fix():
    f = report("pow_fp64_cuda").findings[0]
    assert f.kind == "compute_pipe" and f.what.startswith("FP64 arithmetic") and "FP64 69%" in f.what
    assert "DFMA" in f.what and "F2F.F64 conversions" in f.what
    assert f.where.code == "y[i] = pow(fabs(x[i]) + 1.0, 2.5);"  # not the closing brace the inlined pow's body sits on
    assert "1.0f" in f.fix and "powf" in f.fix and "32-bit precision" in (f.ncu_rule or "")


def test_integer_division_names_its_line_and_the_grid_fix():
    f = report("affine_divmod_cuda").findings[0]
    assert f.kind == "compute_pipe" and f.what.startswith("integer division and modulo") and "XU 50%" in f.what
    assert "on 3 lines" in f.what and "%" in f.where.code and "/" in f.where.code
    assert "2-D or 3-D grid" in f.fix and "fastdiv" in f.fix
    assert "should not be a bottleneck" not in (f.ncu_rule or "")  # ncu's pipe rule, without its verdict


def test_mma_sync_on_hopper_points_at_the_mma_and_wgmma_not_at_plain_tensor_cores():
    r = report("matmul_wmma_cuda")
    assert [f.kind for f in r.findings] == ["mma_sync_on_hopper"]
    f = r.findings[0]
    assert "46.1M HMMA" in f.what and "no HGMMA" in f.what and "37% busy" in f.what
    assert "wmma::mma_sync(" in f.where.code and f.where.candidate_line is not None
    assert "num_warps=4 or 8" in f.fix and "TMA" in f.fix
    # the wgmma control (Triton tl.dot with 8 warps: HGMMA in its SASS) gets no such finding
    assert not report("matmul_dot_triton").findings


def test_one_block_per_sm_is_a_small_grid_in_resident_blocks():
    f = report("scale_one_block_per_sm_cuda").findings[0]
    assert (
        f.kind == "small_grid"
        and "132 blocks for 1056 resident-block slots (132 SMs x 8)" in f.what
        and "0.12 waves" in f.what
    )
    assert "132 x 8 = 1056" in f.fix and "cudaOccupancyMaxActiveBlocksPerMultiprocessor" in f.fix


def test_memory_bound_says_roofline_only_near_the_limit():
    f = report("row_sum_tree_cuda").findings[0]  # 92% of peak DRAM
    assert (
        f.kind == "memory_bound" and f.what.startswith("at the memory roofline") and "near the bandwidth limit" in f.fix
    )
    k = ncu_csv.parse((FIX / "scale_coalesced_cuda.details.csv").read_text()).kernels
    below = bottleneck.condense(k[0]).model_copy(update={"dram_pct": 70.0})
    x = kernel_counters.KernelCounters(k[0], below, 100.0, [])
    f = memory_findings.memory_bound(x, findings.Context(min_bytes=2 * N))
    assert f.what.startswith("DRAM-bound at 70% of peak") and "roofline" not in f.what and "16-byte" in f.fix


def _sync_ctx(case: str, ms: float, blocked: bool = True):
    from kernelfix.tools.profile.host_sync import HostSync, SyncReport

    h = header(case)
    flops, nbytes, dtypes = TASKS[h["task"]]
    syncs = SyncReport(
        syncs=[HostSync(kind="stream", line=38, code="scale = m.item()")],
        blocked=blocked,
        sleep_ms=20.0,
        plain_ms=0.1,
        waited_ms=20.1,
    )
    timings = Timings(
        candidate=TimingStats(median_ms=ms, mean_ms=ms, std_ms=0, p10_ms=ms, p90_ms=ms, min_ms=ms, runs=100),
        bytes_moved=nbytes,
    )
    return timings, findings.Context(task_flops=flops, min_bytes=nbytes, dtypes=dtypes, host_syncs=syncs)


def test_a_host_sync_is_named_first_instead_of_launch_bound_with_a_fusion_fix():
    timings, ctx = _sync_ctx("scale_coalesced_cuda", 0.5)  # one 0.17 ms kernel in a 0.5 ms forward
    kernels = ncu_csv.parse((FIX / "scale_coalesced_cuda.details.csv").read_text()).kernels
    r = bottleneck.from_ncu(kernels, timings=timings, task_flops=None, sources={}, context=ctx)
    assert r.bottleneck == "launch-bound" and r.findings[0].kind == "host_sync"
    assert "launch_bound" not in {f.kind for f in r.findings}  # the sync explains the idle GPU
    f = r.findings[0]
    assert "line 38: `scale = m.item()`" in f.what and "20 ms of GPU work queued ahead" in f.what and "35%" in f.what
    assert f.where.candidate_line == 38 and ".item()" in f.fix and "torch.cuda.synchronize()" in f.fix
    text = "\n".join(r.highlights)
    assert "as few launches as possible" not in text and "Nsight Compute says" not in text


def test_a_host_sync_among_many_launches_keeps_both_findings():
    timings, ctx = _sync_ctx("scale_many_launches_cuda", 20.0)
    kernels = ncu_csv.parse((FIX / "scale_many_launches_cuda.details.csv").read_text()).kernels
    r = bottleneck.from_ncu(kernels, timings=timings, task_flops=None, max_launches=3, sources={}, context=ctx)
    assert [f.kind for f in r.findings][:2] == ["host_sync", "launch_bound"]


def test_the_torch_profiler_fallback_names_a_host_sync_too():
    timings, ctx = _sync_ctx("scale_coalesced_cuda", 0.5, blocked=False)
    r = bottleneck.from_kernel_list(
        [{"name": "scale_kernel", "calls": 2, "total_ms": 0.1}],
        timings=timings,
        task_flops=None,
        note="ncu missing",
        context=ctx,
    )
    assert [f.kind for f in r.findings] == ["host_sync"] and "queued ahead" not in r.findings[0].what
    assert any("scale = m.item()" in line for line in r.highlights)


def test_sync_calls_keep_the_candidates_innermost_frame(tmp_path):
    from kernelfix.tools.profile.host_sync import sync_calls

    cand = tmp_path / "cand.py"
    cand.write_text("".join(f"line {i}\n" for i in range(1, 41)))
    judge = "/judge/target.py"
    events = [
        ("stream", [(judge, 10), (str(cand), 30), (str(cand), 38), ("/torch/_tensor.py", 5)]),
        ("stream", [(judge, 10), (str(cand), 30), (str(cand), 38)]),
        ("device", [(judge, 10), (str(cand), 12)]),
        ("device", [(judge, 99)]),  # the judge's own sync: not the candidate's
    ]
    got = sync_calls(events, str(cand))
    assert [(s.kind, s.line, s.count, s.code) for s in got] == [
        ("device", 12, 1, "line 12"),
        ("stream", 38, 2, "line 38"),
    ]


# --- the profile stage collects only what the findings read ----------------------------------------------------

# The sections the judge collected before (ncu.SECTIONS was these nine): InstructionStats and SchedulerStats are gone.
_BEFORE = (
    "SpeedOfLight",
    "MemoryWorkloadAnalysis",
    "Occupancy",
    "LaunchStats",
    "WarpStateStats",
    "ComputeWorkloadAnalysis",
    "SourceCounters",
    "InstructionStats",
    "SchedulerStats",
)
_TITLES = {**ncu.SECTION_TITLES, "InstructionStats": "Instruction Statistics", "SchedulerStats": "Scheduler Statistics"}


def _as_collected(text: str, sections: tuple[str, ...]) -> list:
    """A full-set capture's details page cut to what a judge collecting ``sections`` (plus its named counters) prints:
    each metric by its section's title, each rule by its section's identifier; InstructionStats' "Executed
    Instructions" becomes the counter the judge now names, smsp__inst_executed.sum, where that section is gone."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.reader(lines[start:]))
    head, keep = rows[0], [rows[0]]
    sec, name, rule = head.index("Section Name"), head.index("Metric Name"), head.index("Rule Name")
    titles = {_TITLES[s] for s in sections} | {"Command line profiler metrics"}
    for row in rows[1:]:
        if row[rule]:
            if row[sec] in sections:
                keep.append(row)
        elif row[sec] in titles:
            keep.append(row)
        elif row[name] == "Executed Instructions" and "InstructionStats" not in sections:
            keep.append([*row[:sec], "Command line profiler metrics", "smsp__inst_executed.sum", *row[sec + 2 :]])
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(keep)
    return ncu_csv.parse(out.getvalue()).kernels


@pytest.mark.parametrize("case", DEFECTS + CONTROLS)
def test_the_fewer_sections_give_the_same_findings(case):
    text = (FIX / f"{case}.details.csv").read_text()
    before, after = (bottleneck.from_ncu(_as_collected(text, s), **_inputs(case)) for s in (_BEFORE, ncu.SECTIONS))
    assert [(f.kind, f.what, f.fix, f.where) for f in after.findings] == [
        (f.kind, f.what, f.fix, f.where) for f in before.findings
    ]
    assert after.bottleneck == before.bottleneck and after.highlights == before.highlights


def _inputs(case: str) -> dict:
    h = header(case)
    flops, nbytes, dtypes = TASKS[h["task"]]
    ms = MEASURED_MS.get(case)
    timings = (
        Timings(
            candidate=TimingStats(median_ms=ms, mean_ms=ms, std_ms=0, p10_ms=ms, p90_ms=ms, min_ms=ms, runs=100),
            bytes_moved=nbytes,
        )
        if ms
        else Timings(bytes_moved=nbytes)
    )
    ctx = findings.Context(
        task_flops=flops, min_bytes=nbytes, dtypes=dtypes, candidate_source=(CANDIDATES / f"{case}.py").read_text()
    )
    return dict(
        timings=timings,
        task_flops=flops,
        max_launches=3 if "many_launches" in case else None,
        sources=ncu_source.parse((FIX / f"{case}.source.csv").read_text()),
        context=ctx,
    )


def test_the_gpu_at_hand_is_named():
    from kernelfix.tools.gpu import specs

    case = "pow_fp64_cuda"
    args = _inputs(case)
    kernels = ncu_csv.parse((FIX / f"{case}.details.csv").read_text()).kernels
    for name, says in (
        ("NVIDIA H200", "The NVIDIA H200 runs FP64 at half the FP32 rate"),
        ("NVIDIA L4", "The NVIDIA L4 runs FP64 at 1/64 of"),
    ):
        args["context"] = args["context"].model_copy(update={"gpu": specs.measured({"name": name})})
        fix = bottleneck.from_ncu(kernels, **args).findings[0].fix
        assert says in fix and "H100" not in fix, fix
    args["context"] = args["context"].model_copy(update={"gpu": None})
    assert "H100" not in bottleneck.from_ncu(kernels, **args).findings[0].fix.split("(A100, H100, H200)")[1]
    wmma = _inputs("matmul_wmma_cuda")
    wmma["context"] = wmma["context"].model_copy(update={"gpu": specs.measured({"name": "NVIDIA H200"})})
    f = bottleneck.from_ncu(ncu_csv.parse((FIX / "matmul_wmma_cuda.details.csv").read_text()).kernels, **wmma).findings[
        0
    ]
    assert "on the NVIDIA H200 (sm_90) only wgmma" in f.what
