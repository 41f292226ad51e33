"""Compare a candidate's outputs with the reference's, in the judge's own process.

Structure first, then shape, then dtype, then non-finite values, then values:
elementwise (atol/rtol) and, beside it, the relative error norm
``||out - ref|| / ||ref - mean(ref)||``, which no output of the wrong scale passes
however small the reference's values are next to atol. Its denominator is the
error of the best constant output, so a guessed constant scores 1 and zeros at
least 1. Errors are computed in float64 so the statistics are themselves exact.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from kernelfix.tools.verdict import Category, TrialReport


class Mismatch(Exception):
    def __init__(self, category: Category, message: str):
        super().__init__(message)
        self.category = category
        self.message = message


def leaves(obj: Any, path: str = "output") -> list[tuple[str, Any]]:
    if isinstance(obj, (list, tuple)):
        out = []
        for i, o in enumerate(obj):
            out += leaves(o, f"{path}[{i}]")
        return out
    if isinstance(obj, dict):
        out = []
        for k in sorted(obj, key=str):
            out += leaves(obj[k], f"{path}[{k!r}]")
        return out
    return [(path, obj)]


def _describe(obj: Any) -> str:
    if isinstance(obj, torch.Tensor):
        return f"Tensor{tuple(obj.shape)} {str(obj.dtype).removeprefix('torch.')}"
    if isinstance(obj, (list, tuple)):
        return f"{type(obj).__name__} of {len(obj)}"
    return type(obj).__name__


def _structure(ref: Any, out: Any, path: str = "output") -> None:
    ref_seq, out_seq = isinstance(ref, (list, tuple)), isinstance(out, (list, tuple))
    if ref_seq != out_seq or (isinstance(ref, dict) != isinstance(out, dict)):
        raise Mismatch(Category.OUTPUT_STRUCTURE, f"{path} is {_describe(out)}, expected {_describe(ref)}")
    if ref_seq:
        if len(ref) != len(out):
            raise Mismatch(Category.OUTPUT_STRUCTURE, f"{path} has {len(out)} elements, expected {len(ref)}")
        for i, (r, o) in enumerate(zip(ref, out)):
            _structure(r, o, f"{path}[{i}]")
    elif isinstance(ref, dict):
        if set(ref) != set(out):
            raise Mismatch(Category.OUTPUT_STRUCTURE, f"{path} has keys {sorted(out, key=str)}, expected {sorted(ref, key=str)}")
        for k in ref:
            _structure(ref[k], out[k], f"{path}[{k!r}]")
    elif isinstance(ref, torch.Tensor) != isinstance(out, torch.Tensor):
        raise Mismatch(Category.OUTPUT_STRUCTURE, f"{path} is {_describe(out)}, expected {_describe(ref)}")


def compare(
    ref: Any, out: Any, *, atol: float, rtol: float, trial: int, seed: int, rel_error_tol: float | None = None, noise: float = 0.0
) -> TrialReport:
    """One trial's report. Never raises on bad outputs: the report says what is wrong.

    ``rel_error_tol`` caps each floating-point output's relative error norm (None: not
    checked). ``noise`` is the float32 reference's own relative error against float64,
    when known: a candidate is not asked to agree with the reference more closely than
    the reference agrees with the exact result.
    """
    try:
        _structure(ref, out)
    except Mismatch as m:
        return TrialReport(trial=trial, seed=seed, ok=False, problem=m.message, **_cat(m.category))
    worst: TrialReport | None = None
    total_mismatch = total_numel = 0
    max_abs = max_rel = 0.0
    norm: tuple[float, float] | None = None  # (relative error norm, its threshold) of the output nearest its threshold
    for idx, ((path, r), (_, o)) in enumerate(zip(leaves(ref), leaves(out))):
        if not isinstance(r, torch.Tensor):
            if isinstance(r, (int, float)) and isinstance(o, (int, float)):
                if not math.isclose(float(o), float(r), rel_tol=rtol, abs_tol=atol):
                    return TrialReport(trial=trial, seed=seed, ok=False, problem=f"{path} is {o}, expected {r}", expected=float(r), actual=float(o), **_cat(Category.NUMERICAL))
            elif r != o:
                return TrialReport(trial=trial, seed=seed, ok=False, problem=f"{path} is {o!r}, expected {r!r}", **_cat(Category.NUMERICAL))
            continue
        if tuple(r.shape) != tuple(o.shape):
            return TrialReport(trial=trial, seed=seed, ok=False, problem=f"{path} has shape {tuple(o.shape)}, expected {tuple(r.shape)}", worst_output=idx, **_cat(Category.SHAPE))
        if r.dtype != o.dtype:
            return TrialReport(
                trial=trial, seed=seed, ok=False,
                problem=f"{path} has dtype {str(o.dtype).removeprefix('torch.')}, expected {str(r.dtype).removeprefix('torch.')}",
                worst_output=idx, **_cat(Category.DTYPE),
            )
        rep = _values(path, r, o, atol=atol, rtol=rtol, trial=trial, seed=seed, output_index=idx, rel_error_tol=rel_error_tol, noise=noise)
        total_mismatch += rep.mismatches or 0
        total_numel += rep.numel or 0
        max_abs = max(max_abs, rep.max_abs_error or 0.0)
        max_rel = max(max_rel, rep.max_rel_error or 0.0)
        if rep.rel_error_norm is not None and rep.rel_error_tol is not None:
            if norm is None or rep.rel_error_norm / rep.rel_error_tol > norm[0] / norm[1]:
                norm = (rep.rel_error_norm, rep.rel_error_tol)
        if not rep.ok and worst is None:
            worst = rep
    stats = {"mismatches": total_mismatch, "numel": total_numel, "max_abs_error": max_abs, "max_rel_error": max_rel}
    if worst is not None:
        return worst.model_copy(update=stats)  # keeps the failing output's own relative error norm
    if norm is not None:
        stats |= {"rel_error_norm": norm[0], "rel_error_tol": norm[1]}
    return TrialReport(trial=trial, seed=seed, ok=True, **stats)


def _cat(category: Category) -> dict:
    return {"category": category}


def _spread(r64: torch.Tensor) -> float:
    """||r - mean(r)||, the error of the best constant output; ||r|| for one value or a constant reference."""
    if r64.numel() > 1:
        s = float((r64 - r64.mean()).norm())
        if s > 0:
            return s
    return float(r64.norm())


def _rel_norm(r64: torch.Tensor, o64: torch.Tensor) -> tuple[float | None, float]:
    """The relative error norm over positions finite in both (None where the reference is all zeros),
    and ||ref|| / ||ref - mean(ref)||: how much rounding to the output's dtype is magnified in it."""
    both = torch.isfinite(r64) & torch.isfinite(o64)
    r, o = r64[both], o64[both]
    spread = _spread(r)
    if spread == 0.0:
        return None, 0.0
    return float((o - r).norm()) / spread, float(r.norm()) / spread


def relative_error(ref: Any, out: Any) -> float | None:
    """The worst relative error norm over the floating-point outputs; None when not comparable.

    Used against the float64 reference, where ``ref`` is float64 and ``out`` float32."""
    ref_leaves, out_leaves = leaves(ref), leaves(out)
    if len(ref_leaves) != len(out_leaves):
        return None
    worst: float | None = None
    for (_, r), (_, o) in zip(ref_leaves, out_leaves):
        if not (isinstance(r, torch.Tensor) and isinstance(o, torch.Tensor) and r.is_floating_point() and o.is_floating_point()):
            continue
        if r.shape != o.shape:
            return None
        if r.numel() == 0:
            continue
        e, _ = _rel_norm(r.detach().double().cpu(), o.detach().double().cpu())
        if e is not None:
            worst = e if worst is None else max(worst, e)
    return worst


def vacuous_tolerance(ref: Any, *, atol: float, rtol: float) -> str | None:
    """Which trivial output (zeros, the reference's mean) passes atol/rtol on every element, if one does.

    Then the elementwise check alone proves nothing for this output. An all-zero
    reference is left out: zeros are its right answer, not a guess."""
    for path, r in leaves(ref):
        if not (isinstance(r, torch.Tensor) and r.is_floating_point()) or r.numel() == 0:
            continue
        r64 = r.detach().double()
        r64 = r64[torch.isfinite(r64)]
        if r64.numel() == 0 or not bool((r64 != 0).any()):
            continue
        tol = atol + rtol * r64.abs()
        if bool((r64.abs() <= tol).all()):
            return f"an all-zeros {path} is within atol={atol:g}, rtol={rtol:g} of the reference everywhere (largest |ref| {float(r64.abs().max()):.3g})"
        if r64.numel() > 1:
            mean = r64.mean()
            if bool(((r64 - mean).abs() <= tol).all()):
                return f"a constant {path} equal to the reference's mean {float(mean):.4g} is within atol={atol:g}, rtol={rtol:g} of it everywhere"
    return None


def _values(
    path: str, r: torch.Tensor, o: torch.Tensor, *, atol: float, rtol: float, trial: int, seed: int, output_index: int,
    rel_error_tol: float | None = None, noise: float = 0.0,
) -> TrialReport:
    numel = r.numel()
    if numel == 0:
        return TrialReport(trial=trial, seed=seed, ok=True, mismatches=0, numel=0, max_abs_error=0.0, max_rel_error=0.0)
    if not (r.is_floating_point() or r.is_complex()):
        bad = r != o
        n = int(bad.sum())
        if n:
            flat = int(bad.flatten().nonzero()[0])
            index = list(_unravel(flat, r.shape))
            return TrialReport(
                trial=trial, seed=seed, ok=False, problem=f"{path}: {n} of {numel} elements differ", category=Category.NUMERICAL,
                mismatches=n, numel=numel, worst_index=index, worst_output=output_index,
                expected=float(r.flatten()[flat]), actual=float(o.flatten()[flat]),
                max_abs_error=float((r.double() - o.double()).abs().max()), max_rel_error=None,
            )
        return TrialReport(trial=trial, seed=seed, ok=True, mismatches=0, numel=numel, max_abs_error=0.0, max_rel_error=0.0)

    r64, o64 = r.detach().double(), o.detach().double()
    r_fin, o_fin = torch.isfinite(r64), torch.isfinite(o64)
    new_nonfinite = r_fin & ~o_fin
    both_nan = torch.isnan(r64) & torch.isnan(o64)
    same_inf = torch.isinf(r64) & (r64 == o64)
    diff = (o64 - r64).abs()
    diff = torch.where(both_nan | same_inf, torch.zeros_like(diff), diff)
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff)
    tol = atol + rtol * r64.abs().nan_to_num(posinf=0.0, neginf=0.0)
    bad = (diff > tol) | new_nonfinite
    n_bad = int(bad.sum())
    finite_diff = torch.where(r_fin & o_fin, diff, torch.zeros_like(diff))
    max_abs = float(finite_diff.max())
    max_rel = float((finite_diff / (r64.abs() + atol)).max())
    norm: dict[str, float | None] = {}
    if rel_error_tol is not None:
        rel, magnification = _rel_norm(r64, o64)
        # Never stricter than the output's own dtype can resolve, nor than the float32 reference's own error.
        norm = {"rel_error_norm": rel, "rel_error_tol": max(rel_error_tol, 4 * torch.finfo(r.dtype).eps * magnification, 3 * noise)}
    if n_bad == 0:
        rel, limit = norm.get("rel_error_norm"), norm.get("rel_error_tol")
        if rel is None or limit is None or rel <= limit:
            return TrialReport(trial=trial, seed=seed, ok=True, mismatches=0, numel=numel, max_abs_error=max_abs, max_rel_error=max_rel, **norm)
        flat = int(finite_diff.flatten().argmax())
        return TrialReport(
            trial=trial, seed=seed, ok=False, category=Category.NUMERICAL,
            problem=(
                f"{path}: relative error norm ||out-ref||/||ref-mean(ref)|| is {rel:.3g}, above {limit:.3g}, "
                f"though every element is within atol={atol:g}, rtol={rtol:g}"
            ),
            max_abs_error=max_abs, max_rel_error=max_rel, mismatches=0, numel=numel,
            worst_index=list(_unravel(flat, r.shape)), worst_output=output_index,
            expected=float(r64.flatten()[flat]), actual=float(o64.flatten()[flat]), **norm,
        )
    excess = torch.where(bad, diff - tol, torch.full_like(diff, -math.inf))
    flat = int(excess.flatten().argmax())
    index = list(_unravel(flat, r.shape))
    n_nonfinite = int(new_nonfinite.sum())
    if n_nonfinite:
        first = int(new_nonfinite.flatten().nonzero()[0])
        index = list(_unravel(first, r.shape))
        flat = first
        problem = f"{path}: {n_nonfinite} NaN/Inf values where the reference is finite"
        category = Category.NON_FINITE
    else:
        problem = f"{path}: {n_bad} of {numel} elements outside atol={atol:g}, rtol={rtol:g}"
        category = Category.NUMERICAL
    return TrialReport(
        trial=trial, seed=seed, ok=False, problem=problem, category=category,
        max_abs_error=max_abs, max_rel_error=max_rel, mismatches=n_bad, numel=numel,
        worst_index=index, worst_output=output_index,
        expected=float(r64.flatten()[flat]), actual=float(o64.flatten()[flat]), **norm,
    )


def _unravel(flat: int, shape: torch.Size) -> list[int]:
    out = []
    for dim in reversed(shape):
        out.append(flat % dim)
        flat //= dim
    return list(reversed(out))


def inputs_mutated(before: Any, after: Any) -> list[int]:
    """Indices of input tensors the candidate changed in place."""
    changed = []
    for i, ((_, b), (_, a)) in enumerate(zip(leaves(before, "input"), leaves(after, "input"))):
        if isinstance(b, torch.Tensor) and isinstance(a, torch.Tensor):
            if b.shape != a.shape or b.dtype != a.dtype or not torch.equal(b.nan_to_num(), a.nan_to_num()):
                changed.append(i)
    return changed
