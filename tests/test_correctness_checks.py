"""Correctness that no shortcut satisfies (issue 10): the relative error norm beside
atol/rtol, vacuous tolerances, varied inputs, and the float64 reference.

The comparison tests run in-process on hand-made tensors; the judge tests reuse the
corpus verdicts (tests/corpus/candidates, judged once per session) or compute only a
reference (one child process each).
"""

from __future__ import annotations

import textwrap

import pytest
import torch
from conftest import case_named

from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.correctness import input_variants
from kernelfix.tools.correctness.chunked import relative_error, vacuous_tolerance
from kernelfix.tools.correctness.compare import compare
from kernelfix.tools.judge import Judge
from kernelfix.tools.verdict import Category

TOL = {"atol": 1e-2, "rtol": 1e-2, "trial": 0, "seed": 0}


# --------------------------------------------------------------------------- comparison


def test_zeros_for_tiny_outputs_pass_allclose_but_not_the_relative_norm():
    ref = torch.softmax(torch.randn(8, 8192, generator=torch.Generator().manual_seed(0)), dim=1)
    zeros = torch.zeros_like(ref)
    assert torch.allclose(zeros, ref, atol=1e-2, rtol=1e-2)  # the shortcut
    assert "all-zeros" in vacuous_tolerance(ref, atol=1e-2, rtol=1e-2)
    rep = compare(ref, zeros, rel_error_tol=1e-2, **TOL)
    assert not rep.ok and rep.category == Category.NUMERICAL and rep.mismatches == 0
    assert rep.rel_error_norm > 1 and "relative error norm" in rep.problem
    assert compare(ref, zeros, **TOL).ok  # without the norm (rel_error_tol=None) the old check passes it


def test_a_constant_at_the_mean_of_a_near_constant_output_is_caught():
    # Row means of rand: 0.5 +- 0.002. The distribution's expected value passes atol/rtol on every row.
    ref = torch.rand(64, 16384, generator=torch.Generator().manual_seed(1)).mean(dim=1)
    guess = torch.full_like(ref, 0.5)
    assert "constant output equal to the reference's mean" in vacuous_tolerance(ref, atol=1e-2, rtol=1e-2)
    assert torch.allclose(guess, ref, atol=1e-2, rtol=1e-2)
    rep = compare(ref, guess, rel_error_tol=1e-2, **TOL)
    assert not rep.ok and rep.rel_error_norm > 0.5


def test_correct_fp32_reorderings_pass_the_relative_norm():
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(64, 4096, generator=g), torch.randn(4096, 64, generator=g)
    blocked = sum((a[:, k : k + 256] @ b[k : k + 256] for k in range(0, 4096, 256)), torch.zeros(64, 64))
    rep = compare(a @ b, blocked, rel_error_tol=1e-2, **TOL)
    assert rep.ok and rep.rel_error_norm < 1e-5
    assert vacuous_tolerance(a @ b, atol=1e-2, rtol=1e-2) is None


def test_the_threshold_never_asks_for_more_than_the_output_dtype_resolves():
    # bf16 values 4 +- 0.01: one bf16 ulp (0.03) is larger than the spread, so rounding alone is ~1 in norm units.
    exact = 4 + 0.01 * torch.randn(4096, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    ref, out = exact.to(torch.bfloat16), (exact + 0.004).to(torch.bfloat16)  # a correct kernel, rounded differently
    rep = compare(ref, out, rel_error_tol=1e-2, **TOL)
    assert rep.ok, rep.problem
    assert rep.rel_error_tol > 1e-2


def test_the_threshold_allows_the_float32_references_own_error():
    ref = torch.randn(1000, generator=torch.Generator().manual_seed(4))
    out = ref + 0.02 * torch.randn(1000, generator=torch.Generator().manual_seed(5))
    assert not compare(ref, out, rel_error_tol=1e-2, **{**TOL, "atol": 0.1}).ok
    assert compare(ref, out, rel_error_tol=1e-2, noise=0.01, **{**TOL, "atol": 0.1}).ok


def test_an_all_zero_reference_has_no_relative_norm_and_is_not_vacuous():
    ref = torch.zeros(16, 16)
    rep = compare(ref, torch.zeros(16, 16), rel_error_tol=1e-2, **TOL)
    assert rep.ok and rep.rel_error_norm is None
    assert vacuous_tolerance(ref, atol=1e-2, rtol=1e-2) is None  # zeros are the answer there, not a guess


def test_relative_error_against_float64():
    ref64 = torch.randn(256, 256, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    assert relative_error(ref64, ref64.float()) < 1e-7
    assert 1e-4 < relative_error(ref64, ref64.half().float()) < 1e-3
    assert relative_error(ref64, ref64[:10].float()) is None
    assert relative_error((ref64, torch.arange(3)), (ref64.float(), torch.arange(3))) < 1e-7  # integer outputs left out


# --------------------------------------------------------------------------- input variants


def test_variants_change_floating_tensors_only_and_are_seeded():
    x, idx = torch.rand(4, 1000), torch.randint(0, 10, (7,))
    for variant in ("scaled", "shifted", "heavy_tailed"):
        (vx, vidx, scalar), changed = input_variants.apply([x, idx, 3.5], variant, seed=11)
        assert changed and vx.shape == x.shape and vx.dtype == x.dtype and not torch.equal(vx, x)
        assert vidx is idx and scalar == 3.5
        again, _ = input_variants.apply([x, idx, 3.5], variant, seed=11)
        assert torch.equal(again[0], vx)
    shifted, _ = input_variants.apply([x], "shifted", seed=0)
    assert bool((shifted[0] < 0).all())  # rand moved wholly negative
    heavy, _ = input_variants.apply([torch.randn(100_000)], "heavy_tailed", seed=0)
    z = (heavy[0] - heavy[0].mean()) / heavy[0].std()
    assert float(z.pow(4).mean()) > 6  # kurtosis far above a normal's 3
    _, changed = input_variants.apply([idx], "scaled", seed=0)
    assert not changed


# --------------------------------------------------------------------------- the judge


def _write_task(tmp_path, name: str, forward: str, inputs: str):
    path = tmp_path / f"{name}.py"
    path.write_text(
        textwrap.dedent(f"""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return {forward}

        def get_inputs():
            return [{inputs}]

        def get_init_inputs():
            return []
    """)
    )
    return path


def test_variants_run_only_where_the_reference_stays_finite(tmp_path):
    task = _write_task(tmp_path, "log_rand", "torch.log(x)", "torch.rand(8, 64) + 0.1")
    with Judge(task, JudgeConfig(device="cpu", trials=2, run_timeout_s=120), workdir=tmp_path / "j") as judge:
        ref = judge.reference()
        kept = [t.variant for t in ref.trials if t.purpose == "varied"]
        assert kept == ["scaled"]
        assert set(ref.skipped_variants) == {"shifted", "heavy_tailed"}
        assert "not finite" in ref.skipped_variants["shifted"]
        assert ref.float64_note is None and ref.noise[0] < 1e-6  # trial 0 has its float64 reference


@pytest.mark.parametrize(
    "forward,inputs,why",
    [
        ("x * 2", "torch.randint(0, 5, (16,))", "no floating-point"),  # nothing to vary either
        ("x * 2", "torch.randn(16).double()", "not float32 or half precision"),  # float64 has no finer truth
        ("(x.half() * 2).float()", "torch.randn(16)", "casts"),
    ],
)
def test_no_float64_comparison_says_why(tmp_path, forward, inputs, why):
    task = _write_task(tmp_path, "t", forward, inputs)
    with Judge(task, JudgeConfig(device="cpu", trials=1, run_timeout_s=120), workdir=tmp_path / "j") as judge:
        ref = judge.reference()
        assert why in (ref.float64_note or ""), ref.float64_note
        assert 0 not in ref.noise  # no float64 reference, so no noise figure
        if why == "no floating-point":
            assert set(ref.skipped_variants) == {"scaled", "shifted", "heavy_tailed"}


def test_zeros_verdict_names_the_vacuous_tolerance_and_the_norm(verdicts):
    v = verdicts(case_named("softmax_zeros.py"), "cpu")
    assert v.category == Category.NUMERICAL
    first = next(t for t in v.correctness.trials if not t.ok)
    assert first.mismatches == 0 and first.rel_error_norm > 1  # every element within atol: the norm caught it
    assert v.correctness.vacuous_tolerance and "all-zeros" in v.correctness.vacuous_tolerance
    assert (
        f"trial {first.trial}" in v.feedback and "relative error norm" in v.feedback and "prove nothing" in v.feedback
    )


@pytest.mark.parametrize("name", ["loss_expected_value.py", "standardize_hardcoded.py"])
def test_distribution_statistics_are_input_dependent(verdicts, name):
    v = verdicts(case_named(name), "cpu")
    assert v.category == Category.INPUT_DEPENDENT
    own = [t for t in v.correctness.trials if t.variant is None]
    assert own and all(t.ok for t in own)  # the shortcut holds on the task's own distribution
    broke = next(t for t in v.correctness.trials if not t.ok)
    assert broke.variant in input_variants.DESCRIPTIONS
    assert input_variants.describe(broke.variant, broke.variant_of) in v.message
    assert f"trial {broke.trial}" in v.feedback.splitlines()[0]


def test_fp16_inside_fp32_warns_by_default(verdicts):
    v = verdicts(case_named("linear_fp16.py"), "cpu")
    assert v.category == Category.OK
    t = next(t for t in v.correctness.trials if t.error_vs_float64 is not None)
    assert t.error_vs_float64 > 100 * t.reference_error_vs_float64
    assert f"trial {t.trial}" in v.correctness.precision_warning
    ok = verdicts(case_named("linear_ok.py"), "cpu")
    assert ok.category == Category.OK and ok.correctness.precision_warning is None


def test_fp16_inside_fp32_fails_when_configured(judges):
    case = case_named("linear_fp16.py")
    v = judges(case.task, "cpu", {**case.config, "precision": "fail"}).evaluate(
        case.path.read_text(), filename=case.path.name
    )
    assert v.category == Category.PRECISION and v.correct is False
    bad = [t for t in v.correctness.trials if not t.ok]
    assert bad and bad[0].category == Category.PRECISION
    assert f"trial {bad[0].trial}" in v.feedback and "float64" in v.feedback


def test_each_trial_run_knows_the_one_after_it_whatever_runs_are_skipped():
    """Before a trial whose float64 truth is computed, the run before it empties the candidate's allocator: the next
    run is looked up by (trial, in-place rerun), so a rerun that does not happen shifts nothing after it."""
    from kernelfix.tools.stages.correctness import _after
    from kernelfix.tools.transport.protocol import TrialPlan

    own = [TrialPlan(index=i, seed=i, purpose="correctness", float64=i == 0) for i in range(4)]
    varied = [
        TrialPlan(index=5 + k, seed=9, purpose="varied", variant=v, variant_of=k, float64=True)
        for k, v in enumerate(["scaled", "shifted"])
    ]
    after = {k: t.index for k, t in _after([*own, TrialPlan(index=4, seed=4, purpose="fresh"), *varied]).items()}
    assert after == {(0, False): 1, (1, False): 1, (1, True): 2, (2, False): 3, (3, False): 5, (5, False): 6}
