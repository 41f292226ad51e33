"""The source reading on the GPU, through the Judge (docs/sanitizer.md, docs/feedback.md): each race on global memory
of tests/sanitizer/candidates (partial sums from several blocks, a scatter-add with repeated indices, Triton
programs accumulating into one output) keeps its category, gets no hazard from compute-sanitizer, and is named on
its line with its fix from the source; each contended-atomics case of tests/feedback/candidates (a counter handing
out work, a histogram, one address per row) gets contended_atomics first, on its line, with the fix for its use.

On the device: ``bash bench/device_run.sh kernel-source-gpu``. With KERNEL_SOURCE_ARTIFACTS set, each case's verdict
JSON goes to $KERNEL_SOURCE_ARTIFACTS/<case>.json.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import sanitizer_support as sc

from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.judge import Judge
from kernelfix.tools.verdict import Verdict

CONFIG = {
    "device": "cuda",
    "trials": 2,
    "input_variants": [],
    "float64_reference": False,
    "time_torch_compile": False,
    "timing_runs": 10,
}
FEEDBACK = Path(__file__).parent / "feedback"
RACES = [c.name for c in sc.cases() if c.defect == "global_race"]
ATOMICS = {
    "scale_counter_atomic_cuda": "counter",
    "histogram_atomic_cuda": "data",
    "row_sum_atomic_cuda": "one_address",
}


def judge(tmp_path: Path, task: Path, candidate: Path, name: str, **config) -> Verdict:
    with Judge(task, JudgeConfig(**{**CONFIG, **config}), workdir=tmp_path / "judge") as j:
        v = j.evaluate(candidate.read_text(), filename=candidate.name)
    out = os.environ.get("KERNEL_SOURCE_ARTIFACTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.json").write_text(v.model_dump_json(indent=2))
    print(f"\n[cuda] {name}: {v.category.value}; stages {v.stage_seconds}\n--- feedback ---\n{v.feedback}")
    return v


@pytest.mark.gpu
@pytest.mark.parametrize("name", RACES)
def test_each_global_race_is_named_on_its_line(tmp_path, name):
    case = sc.load(sc.CANDIDATES / f"{name}.py")
    v = judge(tmp_path, case.task, case.path, name)
    assert v.category.value == case.expect
    r = v.sanitizer
    assert r is not None and r.tools and not r.causes, r
    print(f"  reproduced {r.reproduced}; nondeterministic {r.nondeterministic}; inputs {r.inputs}")
    assert r.global_races and r.global_races[0].code == case.lines[0], r.global_races
    assert r.global_races[0].line in case.line_numbers()
    text = v.feedback
    assert f"line {r.global_races[0].line} of your source" in text and case.lines[0] in text and "Fix:" in text


@pytest.mark.gpu
@pytest.mark.parametrize("name,use", ATOMICS.items())
def test_contended_atomics_get_the_fix_for_their_use(tmp_path, name, use):
    path = FEEDBACK / "candidates" / f"{name}.py"
    head = dict(re.findall(r"^# (task|defect|line): ?(.*)$", path.read_text(), re.M))
    v = judge(tmp_path, FEEDBACK / "tasks" / f"{head['task']}.py", path, name, profile=True)
    assert v.category.value == "ok", v.message
    first = v.profile.findings[0] if v.profile and v.profile.findings else None
    assert first is not None and first.kind == "contended_atomics", v.profile
    assert first.use == use and first.where is not None and head["line"].strip() in first.where.code
    want = {"counter": "grid-stride loop", "data": "privatize", "one_address": "__shfl_down_sync"}[use]
    assert want in first.fix and f"Fix: {first.fix}" in v.feedback
