"""Every candidate in tests/corpus/candidates gets the category its header names.

Headers: ``# expect: CATEGORY`` (or ``expect-cpu`` / ``expect-cuda``), optionally
``# devices: cuda``, ``# task: NAME``, ``# config: {json JudgeConfig fields}``,
``# warns: precision`` (a warning it must raise; every other correct candidate must raise none).
CPU cases run in CI (Triton under the interpreter; CUDA sources compiled and linked
but not run), but for the load_inline ones, whose builds against the torch headers (and their PCH) put them in the
slow tier (``slow``); CUDA cases are marked ``gpu`` and run on the device.
"""

from __future__ import annotations

import pytest
from conftest import load_cases

from kernelfix.tools.verdict import Category

CASES = load_cases()


def _params():
    for case in CASES:
        for device in case.devices:
            marks = []
            if device == "cuda":
                marks.append(pytest.mark.gpu)
            if case.uses_nvcc:  # load_inline: nvcc, and a binding TU against the torch headers
                marks += [pytest.mark.nvcc, pytest.mark.torch_build]
                if device == "cpu":  # a build (and the run's PCH) for a verdict without a GPU: the slow tier
                    marks.append(pytest.mark.slow)
            yield pytest.param(case, device, id=f"{device}-{case.id}", marks=marks)


@pytest.mark.parametrize("case,device", list(_params()))
def test_candidate_gets_its_category(case, device, verdicts):
    verdict = verdicts(case, device)
    expected = Category(case.expect[device])
    print(f"\n[{device}] {case.id}: {verdict.category.value} (expected {expected.value}): {verdict.message}")
    assert verdict.category == expected, (
        f"{case.id}: got {verdict.category.value}: {verdict.message}\n{verdict.feedback}"
    )
    assert verdict.feedback.strip()
    precision_warning = verdict.correctness.precision_warning if verdict.correctness else None
    if "precision" in case.warns:
        assert precision_warning and any(w.startswith("precision:") for w in verdict.warnings), (
            f"{case.id}: no precision warning"
        )
        assert "float64" in verdict.feedback
    elif expected == Category.OK:
        assert precision_warning is None, f"{case.id}: false alarm: {precision_warning}"
    if expected == Category.OK:
        assert verdict.compiled and verdict.correct and verdict.legal
        assert verdict.correctness is not None and verdict.correctness.passed >= 5
        if device == "cuda":
            t = verdict.timings
            assert t is not None and t.candidate is not None and t.eager is not None
            assert t.candidate.runs >= 100 and verdict.speedup_eager and verdict.speedup_eager > 0
            print(
                f"\n{case.id} on {t.gpu}: candidate {t.candidate.median_ms:.4f} ms, eager {t.eager.median_ms:.4f} ms, "
                f"compile {t.compiled.median_ms if t.compiled else None}, speedup {verdict.speedup_eager:.2f}x / {verdict.speedup_compile}"
            )
    else:
        assert verdict.message, "a failing verdict says what failed"
        assert verdict.speedup_eager is None and verdict.speedup_compile is None
    if expected.family.value == "cheating":
        assert verdict.legal is False
    if expected.family.value == "correctness_error":
        assert verdict.correct is False
        assert verdict.correctness.trials and not all(t.ok for t in verdict.correctness.trials)
    for line in verdict.feedback.splitlines():  # what the correctness checks saw, for the device run's log
        if line.startswith(("Checks:", "  - precision:")):
            print(f"    {line.strip()}")


def test_corpus_covers_every_category_the_issue_names():
    named = {
        "ok",
        "compile_error:syntax",
        "compile_error:nvcc",
        "correctness_error:numerical",
        "correctness_error:shape",
        "runtime_error:timeout",
        "runtime_error:crash",
        "cheating:disallowed_aten",
        "cheating:fallback",
        "cheating:side_stream",
        "cheating:output_caching",
        "cheating:input_mutation",
        "correctness_error:input_dependent",
    }
    covered = {c.expect.get("cpu") for c in CASES} | {c.expect.get("cuda") for c in CASES}
    assert named <= covered, named - covered
