"""[reference worker] Correct means close to the truth: a candidate's error against the float64 reference beside the
float32 (or half-precision) reference's own (``truth_check``), for a trial outside atol/rtol and for gradients."""

from __future__ import annotations

import math
from typing import Any

import torch

from kernelfix.tools.correctness import fused
from kernelfix.tools.correctness.chunked import Moments, chunks, flat, leaves
from kernelfix.tools.verdict import TruthCheck

TRUTH_CAP_CEILING = 0.5  # a constant output scores 1 by construction: never raised near it


def relative_cap(rel_error_tol: float, reference_error_norm: float) -> float:
    """The relative error norm a candidate may have against float64: ``rel_error_tol``, raised to three times the
    reference's own as ``compare`` raises it (a bf16 attention on x10 inputs: the reference itself is 0.12 off, and a
    kernel 0.11 off is the better of the two), but never to half the signal, so zeros and constants still fail."""
    return max(rel_error_tol, min(3 * reference_error_norm, TRUTH_CAP_CEILING))


def truth_check(
    ref: Any, truth: Any, out: Any, *, factor: float, rel_error_tol: float | None, path: str = "output"
) -> TruthCheck:
    """The candidate's error against the float64 reference (``truth``) beside the float32
    reference's own, output by output: it passes where, for every floating output, its worst element
    and its error norm are each within ``factor`` times the reference's, its relative error norm
    against the truth is within ``rel_error_tol`` raised to three times the reference's own (``relative_cap``:
    never to half the signal, so zeros never pass where the reference's own error is as large as it),
    and it is finite wherever the truth is. Non-floating outputs must
    equal the reference exactly (their mismatch failed already, so they fail here too)."""
    worst: TruthCheck | None = None
    for (path, r), (_, t), (_, o) in zip(leaves(ref, path), leaves(truth, path), leaves(out, path)):
        if not isinstance(r, torch.Tensor):
            continue
        if (
            not (r.is_floating_point() and isinstance(o, torch.Tensor) and isinstance(t, torch.Tensor))
            or o.shape != r.shape
            or o.device.type == "meta"
        ):
            return TruthCheck(
                passed=False,
                factor=factor,
                error_max=math.inf,
                reference_error_max=0.0,
                error_norm=math.inf,
                reference_error_norm=0.0,
                why=f"{path} cannot be compared with the float64 reference",
            )
        rf, tf, of = flat(r), flat(t), flat(o)
        e_max = r_max = 0.0
        sq_e = sq_r = 0.0
        truth_moments = Moments()
        bad_nonfinite = 0
        st = fused.truth_stats(rf, tf, of) if fused.usable(rf, tf, of) else None
        big = st is not None
        if st is not None:
            bad_nonfinite, e_max, r_max, sq_e, sq_r, truth_moments = (
                st.nonfinite,
                st.e_max,
                st.r_max,
                st.sq_e,
                st.sq_r,
                Moments(*st.moments),
            )
        for i, j in chunks(0 if big else rf.numel()):
            t64 = tf[i:j].to(rf.device).double()
            r64, o64 = rf[i:j].double(), of[i:j].to(rf.device).double()
            fin = torch.isfinite(t64)
            bad_nonfinite += int((fin & ~torch.isfinite(o64)).sum())
            both = fin & torch.isfinite(o64) & torch.isfinite(r64)
            de, dr = (o64 - t64)[both].abs(), (r64 - t64)[both].abs()
            if de.numel():
                e_max, r_max = max(e_max, float(de.max())), max(r_max, float(dr.max()))
                sq_e += float((de * de).sum())
                sq_r += float((dr * dr).sum())
            truth_moments.add(t64[fin])
        spread = math.sqrt(max(truth_moments.m2, 0.0)) if truth_moments.n > 1 else 0.0
        spread = spread or 1.0
        check = TruthCheck(
            passed=True,
            factor=factor,
            error_max=e_max,
            reference_error_max=r_max,
            error_norm=math.sqrt(sq_e) / spread,
            reference_error_norm=math.sqrt(sq_r) / spread,
        )
        why = None
        if bad_nonfinite:
            why = f"{path}: {bad_nonfinite} NaN/Inf values where the float64 reference is finite"
        elif e_max > factor * r_max:
            why = f"{path}: max error against float64 {e_max:.3g}, over {factor:g}x the reference's {r_max:.3g}"
        elif check.error_norm > factor * check.reference_error_norm:
            why = f"{path}: error norm against float64 {check.error_norm:.3g}, over {factor:g}x the reference's {check.reference_error_norm:.3g}"
        elif rel_error_tol is not None and check.error_norm > (
            cap := relative_cap(rel_error_tol, check.reference_error_norm)
        ):
            why = f"{path}: relative error norm against float64 {check.error_norm:.3g}, above {cap:.3g}"
        if why is not None:
            check = check.model_copy(update={"passed": False, "why": why})
        if (
            worst is None
            or not check.passed
            or (
                worst.passed
                and check.error_max / max(check.reference_error_max, 1e-300)
                > worst.error_max / max(worst.reference_error_max, 1e-300)
            )
        ):
            if worst is None or worst.passed:
                worst = check
    return worst or TruthCheck(
        passed=False,
        factor=factor,
        error_max=0.0,
        reference_error_max=0.0,
        error_norm=0.0,
        reference_error_norm=0.0,
        why="no floating-point output to compare",
    )
