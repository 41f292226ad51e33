"""Compare a candidate's outputs with the reference's, in the judge's own process.

Structure first, then shape, then dtype, then non-finite values, then values.
Errors are computed in float64 so the statistics are themselves exact.
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


def _leaves(obj: Any, path: str = "output") -> list[tuple[str, Any]]:
    if isinstance(obj, (list, tuple)):
        out = []
        for i, o in enumerate(obj):
            out += _leaves(o, f"{path}[{i}]")
        return out
    if isinstance(obj, dict):
        out = []
        for k in sorted(obj, key=str):
            out += _leaves(obj[k], f"{path}[{k!r}]")
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


def compare(ref: Any, out: Any, *, atol: float, rtol: float, trial: int, seed: int) -> TrialReport:
    """One trial's report. Never raises on bad outputs: the report says what is wrong."""
    try:
        _structure(ref, out)
    except Mismatch as m:
        return TrialReport(trial=trial, seed=seed, ok=False, problem=m.message, **_cat(m.category))
    worst: TrialReport | None = None
    total_mismatch = total_numel = 0
    max_abs = max_rel = 0.0
    for idx, ((path, r), (_, o)) in enumerate(zip(_leaves(ref), _leaves(out))):
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
        rep = _values(path, r, o, atol=atol, rtol=rtol, trial=trial, seed=seed, output_index=idx)
        total_mismatch += rep.mismatches or 0
        total_numel += rep.numel or 0
        max_abs = max(max_abs, rep.max_abs_error or 0.0)
        max_rel = max(max_rel, rep.max_rel_error or 0.0)
        if not rep.ok and worst is None:
            worst = rep
    if worst is not None:
        return worst.model_copy(update={"mismatches": total_mismatch, "numel": total_numel, "max_abs_error": max_abs, "max_rel_error": max_rel})
    return TrialReport(trial=trial, seed=seed, ok=True, max_abs_error=max_abs, max_rel_error=max_rel, mismatches=0, numel=total_numel)


def _cat(category: Category) -> dict:
    return {"category": category}


def _values(path: str, r: torch.Tensor, o: torch.Tensor, *, atol: float, rtol: float, trial: int, seed: int, output_index: int) -> TrialReport:
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
    if n_bad == 0:
        return TrialReport(trial=trial, seed=seed, ok=True, mismatches=0, numel=numel, max_abs_error=max_abs, max_rel_error=max_rel)
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
        expected=float(r64.flatten()[flat]), actual=float(o64.flatten()[flat]),
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
    for i, ((_, b), (_, a)) in enumerate(zip(_leaves(before, "input"), _leaves(after, "input"))):
        if isinstance(b, torch.Tensor) and isinstance(a, torch.Tensor):
            if b.shape != a.shape or b.dtype != a.dtype or not torch.equal(b.nan_to_num(), a.nan_to_num()):
                changed.append(i)
    return changed
