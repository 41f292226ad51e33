"""Output comparison: structure, shape, dtype, non-finite values, then numbers."""

import math

import torch

from kernelfix.tools.correctness.compare import compare, inputs_mutated
from kernelfix.tools.verdict import Category


def cmp(ref, out, atol=1e-2, rtol=1e-2):
    return compare(ref, out, atol=atol, rtol=rtol, trial=3, seed=99)


def test_identical_outputs_pass_with_zero_error():
    r = torch.randn(4, 5)
    rep = cmp(r, r.clone())
    assert rep.ok and rep.max_abs_error == 0 and rep.mismatches == 0 and rep.numel == 20


def test_numerical_error_reports_worst_index_and_values():
    r = torch.zeros(3, 4)
    o = r.clone()
    o[1, 2] = 0.5
    o[2, 3] = 0.02
    rep = cmp(r, o)
    assert not rep.ok and rep.category == Category.NUMERICAL
    assert rep.worst_index == [1, 2] and rep.expected == 0.0 and rep.actual == 0.5
    assert rep.mismatches == 2 and math.isclose(rep.max_abs_error, 0.5)
    assert rep.trial == 3 and rep.seed == 99


def test_within_tolerance_passes():
    r = torch.full((10,), 100.0)
    assert cmp(r, r + 0.9).ok  # rtol 1e-2 of 100 = 1.0
    assert not cmp(r, r + 1.2).ok


def test_shape_then_dtype_are_checked_before_values():
    r = torch.randn(2, 3)
    assert cmp(r, r.reshape(3, 2)).category == Category.SHAPE
    rep = cmp(r, r.double())
    assert rep.category == Category.DTYPE and "float64" in rep.problem


def test_nan_where_reference_is_finite():
    r = torch.randn(5)
    o = r.clone()
    o[4] = float("nan")
    rep = cmp(r, o)
    assert rep.category == Category.NON_FINITE and rep.worst_index == [4]


def test_matching_nan_and_inf_are_fine():
    r = torch.tensor([float("nan"), float("inf"), 1.0])
    assert cmp(r, r.clone()).ok
    assert not cmp(r, torch.tensor([float("nan"), -float("inf"), 1.0])).ok


def test_structure_mismatch():
    r = torch.randn(3)
    assert cmp(r, (r,)).category == Category.OUTPUT_STRUCTURE
    assert cmp((r, r), (r,)).category == Category.OUTPUT_STRUCTURE
    assert cmp([r, r], (r.clone(), r.clone())).ok  # list vs tuple is the same structure
    assert cmp(r, 3.0).category == Category.OUTPUT_STRUCTURE


def test_tuple_outputs_report_which_output():
    a, b = torch.randn(3), torch.randn(3)
    bad = b.clone()
    bad[0] += 1
    rep = cmp((a, b), (a, bad))
    assert rep.worst_output == 1 and "output[1]" in rep.problem


def test_integer_outputs_compare_exactly():
    r = torch.arange(6)
    assert cmp(r, r.clone()).ok
    o = r.clone()
    o[5] = 4
    rep = cmp(r, o)
    assert not rep.ok and rep.worst_index == [5]


def test_scalar_outputs():
    assert cmp(1.0, 1.001).ok
    assert cmp(1.0, 2.0).category == Category.NUMERICAL


def test_input_mutation_detection():
    x, y = torch.randn(3), torch.randn(3)
    assert inputs_mutated([x, y, 5], [x.clone(), y.clone(), 5]) == []
    z = y.clone()
    z[0] = 7
    assert inputs_mutated([x, y], [x.clone(), z]) == [1]
