"""[reference worker] Compare a candidate's outputs with the reference's, where the tensors are (the GPU).

Structure first, then shape, then dtype, then non-finite values, then values:
elementwise (atol/rtol, by the output's dtype unless configured) and, beside it,
the relative error norm ``||out - ref|| / ||ref - mean(ref)||``, which no output
of the wrong scale passes however small the reference's values are next to
atol. Its denominator is the error of the best constant output, so a guessed
constant scores 1 and zeros at least 1. Errors are computed in float64 so the
statistics are themselves exact.

Every pass walks the tensors in chunks of ``CHUNK`` elements and keeps only
running sums, maxima and their indices: a 6 GiB output costs a few hundred MB
of float64 temporaries, not five times its size. A large output on a GPU takes
fused.py's kernels instead: one read of each tensor, the same numbers. Structure, shape and dtype
need only metadata: a candidate output whose shape is wrong may arrive as a
``meta`` tensor, which carries no data.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from kernelfix.tools.correctness import fused
from kernelfix.tools.correctness.chunked import CHUNK, ErrorNorm, chunks, flat, leaves, same_bytes
from kernelfix.tools.correctness.tolerance import tolerance
from kernelfix.tools.verdict import Category, TrialReport


class Mismatch(Exception):
    def __init__(self, category: Category, message: str):
        super().__init__(message)
        self.category = category
        self.message = message


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
            raise Mismatch(
                Category.OUTPUT_STRUCTURE, f"{path} has keys {sorted(out, key=str)}, expected {sorted(ref, key=str)}"
            )
        for k in ref:
            _structure(ref[k], out[k], f"{path}[{k!r}]")
    elif isinstance(ref, torch.Tensor) != isinstance(out, torch.Tensor):
        raise Mismatch(Category.OUTPUT_STRUCTURE, f"{path} is {_describe(out)}, expected {_describe(ref)}")


def compare(
    ref: Any,
    out: Any,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    trial: int,
    seed: int,
    rel_error_tol: float | None = None,
    noise: float = 0.0,
    path: str = "output",
) -> TrialReport:
    """One trial's report. Never raises on bad outputs: the report says what is wrong.

    ``atol``/``rtol``: None takes each output's dtype tolerance (``tolerance.py``).
    ``rel_error_tol`` caps each floating-point output's relative error norm (None: not
    checked). ``noise`` is the float32 reference's own relative error against float64,
    when known: a candidate is not asked to agree with the reference more closely than
    the reference agrees with the exact result. ``path``: what the messages call it
    ("output", or under --backward "grad of input 0").
    """
    try:
        _structure(ref, out, path)
    except Mismatch as m:
        return TrialReport(trial=trial, seed=seed, ok=False, problem=m.message, category=m.category)
    worst: TrialReport | None = None
    total_mismatch = total_numel = 0
    max_abs = max_rel = 0.0
    norm: tuple[float, float] | None = None  # (relative error norm, its threshold) of the output nearest its threshold
    for idx, ((path, r), (_, o)) in enumerate(zip(leaves(ref, path), leaves(out, path))):
        if not isinstance(r, torch.Tensor):
            a, rt = tolerance("float32", atol, rtol)  # a Python number: float32's
            if isinstance(r, (int, float)) and isinstance(o, (int, float)):
                if not math.isclose(float(o), float(r), rel_tol=rt, abs_tol=a):
                    return TrialReport(
                        trial=trial,
                        seed=seed,
                        ok=False,
                        problem=f"{path} is {o}, expected {r}",
                        expected=float(r),
                        actual=float(o),
                        category=Category.NUMERICAL,
                    )
            elif r != o:
                return TrialReport(
                    trial=trial,
                    seed=seed,
                    ok=False,
                    problem=f"{path} is {o!r}, expected {r!r}",
                    category=Category.NUMERICAL,
                )
            continue
        if tuple(r.shape) != tuple(o.shape):
            return TrialReport(
                trial=trial,
                seed=seed,
                ok=False,
                problem=f"{path} has shape {tuple(o.shape)}, expected {tuple(r.shape)}",
                worst_output=idx,
                category=Category.SHAPE,
            )
        if r.dtype != o.dtype:
            return TrialReport(
                trial=trial,
                seed=seed,
                ok=False,
                problem=f"{path} has dtype {str(o.dtype).removeprefix('torch.')}, expected {str(r.dtype).removeprefix('torch.')}",
                worst_output=idx,
                category=Category.DTYPE,
            )
        a, rt = tolerance(r.dtype, atol, rtol)
        rep = _values(
            path,
            r,
            o,
            atol=a,
            rtol=rt,
            trial=trial,
            seed=seed,
            output_index=idx,
            rel_error_tol=rel_error_tol,
            noise=noise,
        )
        total_mismatch += rep.mismatches or 0
        total_numel += rep.numel or 0
        max_abs = max(max_abs, rep.max_abs_error or 0.0)
        max_rel = max(max_rel, rep.max_rel_error or 0.0)
        if rep.rel_error_norm is not None and rep.rel_error_tol is not None:
            if norm is None or rep.rel_error_norm / rep.rel_error_tol > norm[0] / norm[1]:
                norm = (rep.rel_error_norm, rep.rel_error_tol)
        if not rep.ok and worst is None:
            worst = rep
    # KernelBench's own check (torch.allclose against the float32 reference) passes iff no element is out.
    stats = {
        "mismatches": total_mismatch,
        "numel": total_numel,
        "max_abs_error": max_abs,
        "max_rel_error": max_rel,
        "kernelbench_allclose": total_mismatch == 0,
    }
    if worst is not None:
        return worst.model_copy(update=stats)  # keeps the failing output's own relative error norm
    if norm is not None:
        stats |= {"rel_error_norm": norm[0], "rel_error_tol": norm[1]}
    return TrialReport(trial=trial, seed=seed, ok=True, passed_by="tolerance", **stats)


def _values(
    path: str,
    r: torch.Tensor,
    o: torch.Tensor,
    *,
    atol: float,
    rtol: float,
    trial: int,
    seed: int,
    output_index: int,
    rel_error_tol: float | None = None,
    noise: float = 0.0,
) -> TrialReport:
    numel = r.numel()
    if numel == 0:
        return TrialReport(trial=trial, seed=seed, ok=True, mismatches=0, numel=0, max_abs_error=0.0, max_rel_error=0.0)
    rf, of = flat(r), flat(o)
    if not (r.is_floating_point() or r.is_complex()):
        return _exact(path, r, rf, of, trial=trial, seed=seed, output_index=output_index)

    n_bad = n_nonfinite = 0
    first_nonfinite: int | None = None
    max_abs = max_rel = -1.0
    max_abs_at = 0
    excess_best, excess_at = -math.inf, 0
    acc = ErrorNorm() if rel_error_tol is not None else None
    st = fused.pair_stats(rf, of, atol, rtol, CHUNK) if fused.usable(rf, of) else None
    big = st is not None
    if st is not None:
        n_bad, n_nonfinite, first_nonfinite, max_abs, max_abs_at = (
            st.n_bad,
            st.n_nonfinite,
            st.first_nonfinite,
            st.max_abs,
            st.max_abs_at,
        )
        max_rel, excess_at = st.max_rel, st.excess_at
        acc = ErrorNorm.of_sums(st.moments, st.sq_err, st.sq_ref) if rel_error_tol is not None else None
    for i, j in chunks(0 if big else rf.numel()):
        r64, o64 = rf[i:j].double(), of[i:j].to(rf.device).double()
        r_fin, o_fin = torch.isfinite(r64), torch.isfinite(o64)
        both = r_fin & o_fin
        new_nonfinite = r_fin & ~o_fin
        diff = (o64 - r64).abs()
        diff = torch.where((torch.isnan(r64) & torch.isnan(o64)) | (torch.isinf(r64) & (r64 == o64)), 0.0, diff)
        diff = torch.where(torch.isnan(diff), math.inf, diff)
        tol = atol + rtol * r64.abs().nan_to_num(posinf=0.0, neginf=0.0)
        bad = (diff > tol) | new_nonfinite
        k_bad = int(bad.sum())
        finite_diff = torch.where(both, diff, 0.0)
        m, at = finite_diff.max(dim=0)
        if float(m) > max_abs:
            max_abs, max_abs_at = float(m), i + int(at)
        max_rel = max(max_rel, float((finite_diff / (r64.abs() + atol)).max()))
        if k_bad:
            n_bad += k_bad
            k_nf = int(new_nonfinite.sum())
            if k_nf:
                n_nonfinite += k_nf
                if first_nonfinite is None:
                    first_nonfinite = i + int(new_nonfinite.nonzero()[0])
            e, at = torch.where(bad, diff - tol, -math.inf).max(dim=0)
            if float(e) > excess_best:
                excess_best, excess_at = float(e), i + int(at)
        if acc is not None:
            acc.add(r64, o64, both)

    norm: dict[str, float | None] = {}
    if acc is not None:
        rel, magnification = acc.result()
        # Never stricter than the output's own dtype can resolve, nor than the float32 reference's own error.
        eps = torch.finfo(r.real.dtype if r.is_complex() else r.dtype).eps
        norm = {"rel_error_norm": rel, "rel_error_tol": max(rel_error_tol, 4 * eps * magnification, 3 * noise)}

    def at(flat: int) -> tuple[list[int], float, float]:
        shape = list(r.shape) + ([2] if r.is_complex() else [])
        return _unravel(flat, shape), float(rf[flat]), float(of[flat])

    if n_bad == 0:
        rel, limit = norm.get("rel_error_norm"), norm.get("rel_error_tol")
        if rel is None or limit is None or rel <= limit:
            return TrialReport(
                trial=trial,
                seed=seed,
                ok=True,
                mismatches=0,
                numel=numel,
                max_abs_error=max_abs,
                max_rel_error=max_rel,
                **norm,
            )
        index, expected, actual = at(max_abs_at)
        return TrialReport(
            trial=trial,
            seed=seed,
            ok=False,
            category=Category.NUMERICAL,
            problem=(
                f"{path}: relative error norm ||out-ref||/||ref-mean(ref)|| is {rel:.3g}, above {limit:.3g}, "
                f"though every element is within atol={atol:g}, rtol={rtol:g}"
            ),
            max_abs_error=max_abs,
            max_rel_error=max_rel,
            mismatches=0,
            numel=numel,
            worst_index=index,
            worst_output=output_index,
            expected=expected,
            actual=actual,
            **norm,
        )
    if n_nonfinite:
        index, expected, actual = at(first_nonfinite or 0)
        problem = f"{path}: {n_nonfinite} NaN/Inf values where the reference is finite"
        category = Category.NON_FINITE
    else:
        index, expected, actual = at(excess_at)
        problem = f"{path}: {n_bad} of {numel} elements outside atol={atol:g}, rtol={rtol:g}"
        category = Category.NUMERICAL
    return TrialReport(
        trial=trial,
        seed=seed,
        ok=False,
        problem=problem,
        category=category,
        max_abs_error=max_abs,
        max_rel_error=max_rel,
        mismatches=n_bad,
        numel=numel,
        worst_index=index,
        worst_output=output_index,
        expected=expected,
        actual=actual,
        **norm,
    )


def _exact(
    path: str, r: torch.Tensor, rf: torch.Tensor, of: torch.Tensor, *, trial: int, seed: int, output_index: int
) -> TrialReport:
    """Integer and bool outputs: equal, element for element."""
    numel = r.numel()
    n, first, max_abs = 0, None, 0.0
    for i, j in chunks(rf.numel()):
        a, b = rf[i:j], of[i:j].to(rf.device)
        bad = a != b
        k = int(bad.sum())
        if k:
            n += k
            if first is None:
                first = i + int(bad.nonzero()[0])
            max_abs = max(max_abs, float((a.double() - b.double()).abs().max()))
    if not n:
        return TrialReport(
            trial=trial, seed=seed, ok=True, mismatches=0, numel=numel, max_abs_error=0.0, max_rel_error=0.0
        )
    assert first is not None
    return TrialReport(
        trial=trial,
        seed=seed,
        ok=False,
        problem=f"{path}: {n} of {numel} elements differ",
        category=Category.NUMERICAL,
        mismatches=n,
        numel=numel,
        worst_index=_unravel(first, list(r.shape)),
        worst_output=output_index,
        expected=float(rf[first]),
        actual=float(of[first]),
        max_abs_error=max_abs,
        max_rel_error=None,
    )


def _unravel(flat: int, shape: list[int]) -> list[int]:
    out = []
    for dim in reversed(shape):
        out.append(flat % dim)
        flat //= dim
    return list(reversed(out))


def inputs_mutated(before: Any, after: Any) -> list[int]:
    """Indices of input tensors the candidate changed in place."""
    changed = []
    for i, ((_, b), (_, a)) in enumerate(zip(leaves(before, "input"), leaves(after, "input"))):
        if isinstance(b, torch.Tensor) and isinstance(a, torch.Tensor) and not same_bytes(b, a):
            changed.append(i)
    return changed
