"""The sanitizer stage on the GPU, through the Judge (docs/sanitizer.md): the racing reduction of
issue 32 keeps its category and gets its race on its line; an honest reduction gets none under
--sanitize; a correct kernel that writes out of bounds is caught only with --sanitize; and every
defect kernel of tests/sanitizer gets its hazard, on its line, first.

On the device: ``bash bench/device_run.sh sanitizer-capture`` (or ``python -m pytest -q -s -m gpu
tests/test_sanitizer_gpu.py``). With SANITIZER_ARTIFACTS set, each case's verdict JSON and the
judge's logs (the sanitizer's own reports among them) go to $SANITIZER_ARTIFACTS/<case>/.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import sanitizer_support as sc

from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.judge import Judge
from kernelfix.tools.verdict import Category, Verdict

# Two trials and no varied inputs or float64 reference: the judge's other checks are not what is tested here.
CONFIG = {
    "device": "cuda",
    "trials": 2,
    "input_variants": [],
    "float64_reference": False,
    "time_torch_compile": False,
    "timing_runs": 10,
}


def judge_case(tmp_path: Path, case: sc.SanitizerCase, **config) -> Verdict:
    with Judge(case.task, JudgeConfig(**{**CONFIG, **config}), workdir=tmp_path / "judge") as judge:
        v = judge.evaluate(case.path.read_text(), filename=case.path.name)
    keep(v, case.name + ("" if not config.get("sanitize") else "-sanitize"))
    show(v)
    return v


def keep(v: Verdict, name: str) -> None:
    out = os.environ.get("SANITIZER_ARTIFACTS")
    if not out:
        return
    dest = Path(out) / name
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "verdict.json").write_text(v.model_dump_json(indent=2))
    if v.logs_dir and Path(v.logs_dir).is_dir():
        shutil.copytree(v.logs_dir, dest / "logs", dirs_exist_ok=True)


def show(v: Verdict) -> None:
    r = v.sanitizer
    parts = {k.removeprefix("sanitize."): x for k, x in v.breakdown.items() if k.startswith("sanitize.")}
    print(
        f"\n[cuda] {v.candidate_sha1 and v.task}: {v.category.value}; sanitize {v.stage_seconds.get('sanitize')} s {parts}"
    )
    if r is not None:
        print(
            f"  inputs {r.inputs}; reproduced {r.reproduced}; tools {[(t.tool, t.seconds, t.errors, t.finished, t.problem) for t in r.tools]}"
        )
        print(f"  note: {r.note}; version {r.version}")
    print(f"--- feedback ---\n{v.feedback}")


def assert_names(v: Verdict, case: sc.SanitizerCase) -> None:
    """The case's hazard is the first the feedback gives, on one of its lines, with its fix."""
    r = v.sanitizer
    assert r is not None and r.tools, r
    causes = r.causes
    assert causes, f"no hazard in the candidate's kernels: {r.model_dump_json(indent=1)[:3000]}"
    first = causes[0]
    assert first.kind == case.defect, [(h.kind, h.where) for h in causes]
    places = [s for s in (first.where, first.other) if s is not None]
    assert any(s.code in case.lines for s in places), (case.lines, places)
    assert any(s.candidate_line in case.line_numbers() for s in places), (case.line_numbers(), places)
    first_line = v.feedback.splitlines()[0]
    assert "compute-sanitizer" in first_line, v.feedback
    assert "Fix:" in v.feedback.splitlines()[2], v.feedback


@pytest.mark.gpu
def test_racing_reduction_keeps_its_category_and_names_the_race(tmp_path):
    case = sc.load(sc.CANDIDATES / "row_sum_warp_race_cuda.py")
    v = judge_case(tmp_path, case)  # no --sanitize: the failure alone calls the sanitizer
    assert v.category.value == case.expect
    assert v.sanitizer is not None and v.sanitizer.why == case.expect
    assert_names(v, case)
    assert v.sanitizer.seconds is not None and v.sanitizer.seconds <= JudgeConfig().sanitizer_timeout_s + 15


@pytest.mark.gpu
def test_honest_reduction_gets_no_hazard_under_sanitize(tmp_path):
    case = sc.honest()
    v = judge_case(tmp_path, case, sanitize=True)
    assert v.category == Category.OK
    r = v.sanitizer
    assert (
        r is not None
        and r.why == "--sanitize"
        and {t.tool for t in r.tools} == {"memcheck", "racecheck", "synccheck", "initcheck"}
    )
    assert all(t.problem is None and t.finished for t in r.tools), r.tools
    assert not r.causes, r.hazards
    assert "found no out-of-bounds" in v.feedback


@pytest.mark.gpu
def test_correct_kernel_is_not_sanitized_without_the_flag(tmp_path):
    case = sc.load(sc.CANDIDATES / "scale_oob_write_cuda.py")
    v = judge_case(tmp_path, case)
    assert v.category == Category.OK and v.sanitizer is None and "sanitize" not in v.stage_seconds


@pytest.mark.gpu
@pytest.mark.parametrize(
    "name",
    [
        c.name
        for c in sc.cases()
        if c.defect not in ("uninitialized_shared", "global_race") and c.name != "row_sum_warp_race_cuda"
    ],
)
def test_each_defect_is_named_on_its_line(tmp_path, name):
    case = sc.load(sc.CANDIDATES / f"{name}.py")
    v = judge_case(tmp_path, case, sanitize=True)
    if case.expect:
        assert v.category.value == case.expect
    assert_names(v, case)
