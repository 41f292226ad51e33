"""The profile stage on a GPU, end to end through the Judge: Nsight Compute on a
memory-bound and a compute-bound candidate, each classified rightly; and, with
ncu out of reach, the torch.profiler fallback.

On the device: ``bash bench/device_run.sh profile`` (or ``python -m pytest -q -s -m gpu
tests/test_profile_gpu.py``). With PROFILE_ARTIFACTS set, each case's ncu CSV, verdict
JSON and logs go to $PROFILE_ARTIFACTS/<case>/ (the CSVs are captures of the judge's
own ncu command line, for tests/fixtures/ncu).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.judge import Judge
from kernelfix.tools.verdict import Category, Verdict

CASES = Path(__file__).parent / "profile_cases"
# Large tensors: fewer trials, no varied inputs and no float64 reference keep the judge's disk traffic and
# time down; neither they nor torch.compile's baseline are what is tested here.
CONFIG = {
    "device": "cuda",
    "profile": True,
    "trials": 2,
    "input_variants": [],
    "float64_reference": False,
    "time_torch_compile": False,
}


def judge_case(tmp_path: Path, label: str, task: str, candidate: str, **config) -> Verdict:
    with Judge(CASES / f"{task}.py", JudgeConfig(**{**CONFIG, **config}), workdir=tmp_path / "judge") as judge:
        v = judge.evaluate((CASES / candidate).read_text(), filename=candidate)
        keep(v, label)
    return v


def keep(v: Verdict, name: str) -> None:
    out = os.environ.get("PROFILE_ARTIFACTS")
    if not out:
        return
    dest = Path(out) / name
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "verdict.json").write_text(v.model_dump_json(indent=2))
    if v.profile and v.profile.log_path and Path(v.profile.log_path).exists():
        shutil.copy(v.profile.log_path, dest / "ncu_details.csv")
    if v.logs_dir and Path(v.logs_dir).is_dir():
        shutil.copytree(v.logs_dir, dest / "logs", dirs_exist_ok=True)


def show(v: Verdict) -> None:
    p = v.profile
    print(f"\n[cuda] {v.task}: {v.category.value}, {p.source if p else None}, bottleneck {p.bottleneck if p else None}")
    print(f"  summary: {p.summary if p else None}\n  warnings: {v.warnings}\n--- feedback ---\n{v.feedback}")


@pytest.mark.gpu
@pytest.mark.parametrize(
    "task,candidate,expected",
    [("relu_large", "relu_large_triton.py", "memory-bound"), ("matmul_fp16", "matmul_fp16_triton.py", "compute-bound")],
)
def test_ncu_profile_classifies_the_bottleneck(tmp_path, task, candidate, expected):
    v = judge_case(tmp_path, task, task, candidate)
    show(v)
    assert v.category == Category.OK, v.message
    p = v.profile
    assert p is not None and p.source == "ncu", f"no ncu profile: {v.warnings} {p.note if p else None}"
    assert not any("Nsight Compute" in w for w in v.warnings)
    assert p.bottleneck == expected and p.kernels[0].bottleneck == expected, p.summary
    k = p.kernels[0]
    assert k.duration_ms and k.duration_ms > 0 and k.compute_pct is not None and k.dram_pct is not None
    assert k.registers_per_thread and k.achieved_occupancy_pct and k.stalls
    assert p.launches >= 1 and p.candidate_ms and p.min_bytes
    assert any(line.startswith("Profile (Nsight Compute") for line in v.feedback.splitlines())
    if expected == "memory-bound":
        assert (
            k.memory_unit == "DRAM" and p.dram_bytes and p.dram_bytes >= 0.5 * p.min_bytes
        )  # written data still in L2 at the end is not counted
    else:
        assert p.task_flops == pytest.approx(2 * 4096**3) and p.achieved_tflops and p.achieved_tflops > 50


@pytest.mark.gpu
def test_without_ncu_the_kernel_list_comes_from_torch_profiler(tmp_path):
    v = judge_case(tmp_path, "relu_large-fallback", "relu_large", "relu_large_triton.py", ncu_path="/nonexistent/ncu")
    show(v)
    assert v.category == Category.OK
    assert sum("no Nsight Compute profile: ncu not found at /nonexistent/ncu" in w for w in v.warnings) == 1
    p = v.profile
    assert p is not None and p.source == "torch_profiler", p
    assert any("relu_kernel" in k.name for k in p.kernels) and p.kernel_ms and p.kernel_ms > 0
    assert p.bottleneck == "memory-bound", p.summary
