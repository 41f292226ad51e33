"""The fused comparison kernels (tools/correctness/fused.py) against the torch passes they replace for large outputs.

On the CPU the kernels run in Triton's interpreter on small tensors (tests/fused_cases.py, in a child process:
the interpreter must be chosen before Triton is imported), with chunks of two blocks so that the per-chunk
rules (max_rel_error's NaN rule, the first of equal maxima across chunks) are exercised; on the GPU
(``-m gpu``) compiled, on tensors past ``FUSED_MIN`` and on elements sitting exactly on the tolerance.
Counts, indices, maxima and every decision must be the torch passes' own; the sums behind the error norms
may differ in their last bits (another order of addition)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelfix.tools.correctness import fused
from kernelfix.tools.correctness.chunked import vacuous_tolerance
from kernelfix.tools.correctness.compare import compare
from kernelfix.tools.correctness.truth import truth_check

HERE = Path(__file__).resolve().parent
SUMS = {
    "rel_error_norm",
    "rel_error_tol",
    "error_norm",
    "reference_error_norm",
    "relative_error",
    "why",
}  # from sums added in another order


def both_ways(monkeypatch, fn):
    """(torch passes' result, fused kernels' result) of ``fn()``."""
    monkeypatch.setattr(fused, "FUSED_MIN", 1 << 62)
    old = fn()
    monkeypatch.setattr(fused, "FUSED_MIN", 0)
    return old, fn()


def same(a: dict, b: dict) -> None:
    """Equal but for the sums' last bits (``why`` quotes them, to three digits)."""
    a, b = dict(a), dict(b)
    for key in SUMS & set(a):
        x, y = a.pop(key), b.pop(key)
        if key == "why":
            assert (x is None) == (y is None)
        elif x is None or y is None:
            assert x is None and y is None, key
        else:
            assert y == pytest.approx(x, rel=1e-9, abs=1e-300, nan_ok=True), key
    assert json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


@pytest.fixture(scope="module")
def interpreted() -> dict:
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONWARNINGS": "ignore"}
    run = subprocess.run(
        [sys.executable, str(HERE / "fused_cases.py")], capture_output=True, text=True, env=env, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


def test_every_case_ran_fused(interpreted):
    assert interpreted["fused_used"] and len(interpreted["cases"]) >= 25


def test_the_interpreter_swaps_the_language_once_per_launch_not_per_device_call(interpreted):
    """The candidate worker's interpreter (interpreter.patch_once) gave every case above: the launch's own swap, and
    one more where a device function (tl.sum, ...) names triton.language.core; not one per device call (10,627 here
    before, for 100 launches)."""
    counts = interpreted["interpreter"]
    assert counts["patched"] == 1 and counts["launches"] >= 50
    assert counts["launches"] <= counts["swaps"] <= 2 * counts["launches"]


@pytest.mark.parametrize(
    "name",
    [
        "close",
        "nan_and_inf_in_output",
        "nonfinite_reference",
        "signed_zeros",
        "tied_worst",
        "tolerance_edge",
        "tolerance_edge_rtol",
        "wrong_everywhere",
        "constant_reference",
        "zero_reference",
        "float16",
        "bfloat16",
        "float64_overflow",
        "complex64",
        "int64",
    ],
)
def test_compare_reports_the_same(interpreted, name):
    old, new = interpreted["cases"][f"compare/{name}"]
    same(old, new)


def test_truth_check_relative_error_and_vacuous_agree(interpreted):
    names = [k for k in interpreted["cases"] if k.split("/")[0] in ("truth", "relative_error", "vacuous")]
    assert len(names) >= 13
    for k in names:
        old, new = interpreted["cases"][k]
        same(old, new)


def test_varied_inputs_are_the_same_bytes_through_the_variant_kernels(interpreted):
    """Scaled and shifted inputs (float32 and float64, overflow, denormals, NaN, signed zero) made by the variant
    kernels are the torch loop's bytes; heavy-tailed ones are torch's CUDA arithmetic's (the GPU test compares them
    with torch's own there): a varied trial's inputs, and so its verdict, do not change."""
    names = [k for k in interpreted["cases"] if k.startswith("variant/")]
    assert len(names) == 11
    for k in names:
        old, new = interpreted["cases"][k]
        assert old == new, k


def test_a_variant_kernel_that_fails_leaves_the_torch_loop_to_make_the_input(monkeypatch):
    """A Triton that cannot compile the variant kernels costs a varied trial nothing: the same bytes, tried once."""
    from kernelfix.tools.correctness import input_variants

    monkeypatch.setattr(fused, "failed", None)
    monkeypatch.setattr(fused, "varies", lambda x: True)
    tries = []

    def broken():
        tries.append(1)
        raise RuntimeError("PTX assembly failed")

    monkeypatch.setattr(fused, "_vary_kernels", broken)
    from kernelfix.tools.correctness import chunked

    monkeypatch.setattr(chunked, "CHUNK", 512)  # two chunks: the second must not try the kernel again
    x = torch.linspace(-3, 3, 1001)
    for variant in ("scaled", "shifted", "heavy_tailed"):
        monkeypatch.setattr(fused, "failed", None)
        got = input_variants._vary(x, variant, torch.Generator().manual_seed(1), (0.5, 2.0))
        monkeypatch.setattr(fused, "varies", lambda x: False)
        want = input_variants._vary(x, variant, torch.Generator().manual_seed(1), (0.5, 2.0))
        monkeypatch.setattr(fused, "varies", lambda x: True)
        assert torch.equal(got.view(torch.int32), want.view(torch.int32)), variant
    assert len(tries) == 3 and fused.failed is not None and "PTX" in fused.failed


def test_small_or_cpu_tensors_take_the_torch_passes():
    assert not fused.usable(torch.zeros(16))  # too small, and on the CPU
    assert not fused.usable(torch.zeros(fused.FUSED_MIN, dtype=torch.int32, device="meta"))


@pytest.mark.gpu
def test_fused_on_the_gpu_matches_the_torch_passes(monkeypatch):
    """Compiled (fp fusion off): elements exactly on atol + rtol * |ref| must be counted as torch counts them."""
    n = fused.FUSED_MIN + 12345
    g = torch.Generator(device="cuda").manual_seed(11)
    r = torch.randn(n, device="cuda", generator=g)
    r64 = r.double()
    edge = (r64 + (1e-4 + 1e-4 * r64.abs())).float()  # rounded to float32: each lands just inside or outside
    o = torch.where(
        torch.rand(n, device="cuda", generator=g) < 0.01, edge, r + 1e-6 * torch.randn(n, device="cuda", generator=g)
    )
    o[[17, n - 3]] = float("nan")
    for out in (o, r + 1e-6, r * 1.5):
        old, new = both_ways(monkeypatch, lambda: compare(r, out, trial=0, seed=0, rel_error_tol=1e-2))
        same(old.model_dump(mode="json"), new.model_dump(mode="json"))
        assert old.mismatches == new.mismatches and old.worst_index == new.worst_index
    # float64 outputs exactly on atol + rtol * |ref| as torch rounds it (two roundings): a fused multiply-add
    # would round once and move about half of them across the line
    on_line = r64 + (1e-4 + 1e-4 * r64.abs())
    for out in (on_line, torch.nextafter(on_line, on_line + 1)):
        old, new = both_ways(monkeypatch, lambda: compare(r64, out, trial=0, seed=0, rel_error_tol=1e-2))
        assert (old.ok, old.mismatches, old.worst_index, old.max_abs_error) == (
            new.ok,
            new.mismatches,
            new.worst_index,
            new.max_abs_error,
        )
    truth = r64 + 1e-8 * torch.randn(n, device="cuda", generator=g, dtype=torch.float64)
    for out in (o, r + 1e-6):
        old, new = both_ways(monkeypatch, lambda: truth_check(r, truth, out, factor=8.0, rel_error_tol=1e-2))
        assert (old.passed, old.error_max, old.reference_error_max) == (
            new.passed,
            new.error_max,
            new.reference_error_max,
        )
        assert math.isclose(old.error_norm, new.error_norm, rel_tol=1e-9)
    old, new = both_ways(monkeypatch, lambda: vacuous_tolerance(1e-7 * r))
    assert old == new and new is not None
    assert fused.usable(r, o)  # what ran above was the kernel, compiled


def test_a_kernel_that_fails_hands_every_comparison_to_the_torch_passes(monkeypatch):
    """A Triton that cannot compile the kernels must not cost a verdict: the torch passes judge, now and after."""
    monkeypatch.setattr(fused, "failed", None)
    monkeypatch.setattr(fused, "FUSED_MIN", 0)
    monkeypatch.setattr(fused, "usable", lambda *t, **k: fused.failed is None)
    monkeypatch.setattr(fused, "_kernels", lambda: ("pair", "truth", "vacuous"))  # Triton stays unimported here

    def broken(*args, **kwargs):
        raise RuntimeError("PTX assembly failed")

    monkeypatch.setattr(fused, "_launch", broken)
    r = torch.linspace(-1, 1, 1000)
    rep = compare(r, r.clone(), trial=0, seed=0, rel_error_tol=1e-2)
    assert rep.ok and rep.mismatches == 0 and rep.rel_error_norm == 0.0
    assert fused.failed is not None and "PTX" in fused.failed
    assert vacuous_tolerance(1e-7 * r) is not None  # the torch pass found it

    def full(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(fused, "failed", None)
    monkeypatch.setattr(fused, "_launch", full)
    with pytest.raises(torch.OutOfMemoryError):  # the machine's fault, raised as the torch passes raise it
        compare(r, r.clone(), trial=0, seed=0)


def _edges(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A reference, a candidate with elements on the tolerance's edge, NaNs and infinities, and a float64 truth."""
    g = torch.Generator(device="cuda").manual_seed(13)
    r = torch.randn(n, device="cuda", generator=g)
    r64 = r.double()
    edge = (r64 + (1e-4 + 1e-4 * r64.abs())).float()
    o = torch.where(
        torch.rand(n, device="cuda", generator=g) < 0.01, edge, r + 1e-6 * torch.randn(n, device="cuda", generator=g)
    )
    o[[17, n - 3]] = float("nan")
    o[[40, n // 2]] = float("inf")
    r[[99, n - 7]] = float("nan")
    return r, o, r64 + 1e-8 * torch.randn(n, device="cuda", generator=g, dtype=torch.float64)


@pytest.mark.gpu
def test_the_kernels_at_32_warps_give_the_8_warp_counts_indices_and_maxima(monkeypatch):
    """fused.NUM_WARPS went from 8 to 32 (t38): the same lanes and programs, so every count, index and maximum is the
    same bits; only the block-wide sums (error norms, moments) are added in another tree order."""
    from kernelfix.tools.correctness.chunked import CHUNK

    n = fused.FUSED_MIN + 12345
    r, o, truth = _edges(n)
    got = {}
    for warps in (8, 32):
        monkeypatch.setattr(fused, "NUM_WARPS", warps)
        got[warps] = (
            fused.pair_stats(r, o, 1e-4, 1e-4, CHUNK),
            fused.pair_stats(truth, o, 1e-4, 1e-4, CHUNK),
            fused.truth_stats(r, truth, o),
        )
    assert fused.failed is None
    for old, new in zip(got[8], got[32]):
        a, b = dict(vars(old)), dict(vars(new))
        for key in ("moments", "sq_err", "sq_ref", "sq_e", "sq_r"):
            x, y = a.pop(key, None), b.pop(key, None)
            if key == "moments":
                assert x[0] == y[0] and y[1:] == pytest.approx(x[1:], rel=1e-12)
            else:
                assert y == pytest.approx(x, rel=1e-12)
        assert json.dumps(a, default=str) == json.dumps(b, default=str)
        assert old.__class__ is new.__class__


@pytest.mark.gpu
def test_the_variant_kernels_give_torchs_bytes_on_the_gpu(monkeypatch):
    """A varied 0.5 GiB input through the variant kernels and through the torch loop on the GPU: the same bytes."""
    from kernelfix.tools.correctness import input_variants

    n = fused.FUSED_MIN + 12345
    x = torch.randn(n, device="cuda", generator=torch.Generator(device="cuda").manual_seed(5))
    x[:4] = torch.tensor([3.5e37, 1e-45, -0.0, float("nan")], device="cuda")
    stats = input_variants.moments(x[4:])
    ran: list[str] = []
    for name in ("vary_affine", "vary_student"):
        kernel = getattr(fused, name)
        monkeypatch.setattr(fused, name, lambda *a, _k=kernel, _n=name, **kw: ran.append(_n) or _k(*a, **kw))
    for dtype in (torch.float32, torch.float64):
        t = x.to(dtype)
        for variant in ("scaled", "shifted", "heavy_tailed"):
            old, new = both_ways(
                monkeypatch,
                lambda: input_variants._vary(t, variant, torch.Generator(device="cuda").manual_seed(9), stats),
            )
            bits = torch.int32 if dtype == torch.float32 else torch.int64
            assert torch.equal(old.view(bits), new.view(bits)), (variant, dtype)
    assert sorted(set(ran)) == ["vary_affine", "vary_student"] and fused.failed is None
