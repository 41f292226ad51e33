"""[judge, reference worker, one-shot child] The chunked passes every comparison is made of: an output's tensor leaves, running moments and
error norms, the relative error norm, a vacuous tolerance, byte equality. Each walks its tensors in
chunks of ``CHUNK`` elements and keeps only running sums, maxima and their indices, on the device that
holds them (compare.py says why). Large outputs on a GPU take fused.py's one-kernel passes instead, with the
same results."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelfix.tools.correctness import fused
from kernelfix.tools.correctness.tolerance import tolerance

CHUNK = 1 << 24  # elements per pass step: 128 MB per float64 temporary


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


def flat(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.reshape(-1)


def chunks(n: int):
    for i in range(0, n, CHUNK):
        yield i, min(n, i + CHUNK)


@dataclass
class Moments:
    """Running count, mean and sum of squared deviations (Chan et al.'s merge), on the device."""

    n: float = 0.0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, x: torch.Tensor) -> None:
        k = x.numel()
        if k == 0:
            return
        m = float(x.mean())
        m2 = float(((x - m) ** 2).sum())
        delta = m - self.mean
        total = self.n + k
        self.mean += delta * k / total
        self.m2 += m2 + delta * delta * self.n * k / total
        self.n = total


@dataclass
class ErrorNorm:
    """Sums behind the relative error norm over the positions finite in both tensors."""

    ref: Moments = field(default_factory=Moments)
    sq_err: float = 0.0
    sq_ref: float = 0.0

    def add(self, r64: torch.Tensor, o64: torch.Tensor, both: torch.Tensor) -> None:
        r, o = r64[both], o64[both]
        self.ref.add(r)
        self.sq_err += float(((o - r) ** 2).sum())
        self.sq_ref += float((r * r).sum())

    @classmethod
    def of_sums(cls, moments: tuple[float, float, float], sq_err: float, sq_ref: float) -> "ErrorNorm":
        """From fused.py's merged sums."""
        n, mean, m2 = moments
        return cls(Moments(n, mean, m2), sq_err, sq_ref)

    def result(self) -> tuple[float | None, float]:
        """(||out - ref|| / spread, ||ref|| / spread), spread = ||ref - mean(ref)|| (||ref|| for a
        constant reference); (None, 0) where the reference is all zeros."""
        spread = math.sqrt(max(self.ref.m2, 0.0)) if self.ref.n > 1 else 0.0
        if spread == 0.0:
            spread = math.sqrt(self.sq_ref)
        if spread == 0.0:
            return None, 0.0
        return math.sqrt(self.sq_err) / spread, math.sqrt(self.sq_ref) / spread


def rel_norm(r: torch.Tensor, o: torch.Tensor) -> tuple[float | None, float]:
    rf, of = flat(r), flat(o)
    st = fused.pair_stats(rf, of, 1.0, 0.0, CHUNK) if fused.usable(rf, of) else None  # only the norm's sums are used
    if st is not None:
        return ErrorNorm.of_sums(st.moments, st.sq_err, st.sq_ref).result()
    acc = ErrorNorm()
    for i, j in chunks(rf.numel()):
        r64, o64 = rf[i:j].double(), of[i:j].to(rf.device).double()
        acc.add(r64, o64, torch.isfinite(r64) & torch.isfinite(o64))
    return acc.result()


def relative_error(ref: Any, out: Any) -> float | None:
    """The worst relative error norm over the floating-point outputs; None when not comparable.

    Used against the float64 reference, where ``ref`` is float64 and ``out`` float32."""
    ref_leaves, out_leaves = leaves(ref), leaves(out)
    if len(ref_leaves) != len(out_leaves):
        return None
    worst: float | None = None
    for (_, r), (_, o) in zip(ref_leaves, out_leaves):
        if not (
            isinstance(r, torch.Tensor)
            and isinstance(o, torch.Tensor)
            and r.is_floating_point()
            and o.is_floating_point()
        ):
            continue
        if r.shape != o.shape or o.device.type == "meta":
            return None
        if r.numel() == 0:
            continue
        e, _ = rel_norm(r, o)
        if e is not None:
            worst = e if worst is None else max(worst, e)
    return worst


def vacuous_tolerance(ref: Any, *, atol: float | None = None, rtol: float | None = None) -> str | None:
    """Which trivial output (zeros, the reference's mean) passes atol/rtol on every element, if one does.

    Then the elementwise check alone proves nothing for this output. An all-zero
    reference is left out: zeros are its right answer, not a guess."""
    for path, r in leaves(ref):
        if not (isinstance(r, torch.Tensor) and r.is_floating_point()) or r.numel() == 0:
            continue
        a, rt = tolerance(r.dtype, atol, rtol)
        rf = flat(r)
        st = fused.pair_stats(rf, rf, a, rt, CHUNK) if fused.usable(rf) else None
        counts = None
        if st is not None:
            moments, nonzero, largest = Moments(*st.moments), st.nonzero, st.largest
            if moments.n == 0 or not nonzero:
                continue
            counts = fused.vacuous_counts(rf, a, rt, moments.mean)
        if counts is not None:
            zeros_pass, mean_pass = counts[0] == 0, moments.n > 1 and counts[1] == 0
            found = _vacuous_note(path, a, rt, largest, moments, zeros_pass, mean_pass)
            if found:
                return found
            continue
        moments, nonzero, largest = Moments(), False, 0.0
        for i, j in chunks(rf.numel()):
            x = rf[i:j].double()
            x = x[torch.isfinite(x)]
            moments.add(x)
            if x.numel():
                nonzero = nonzero or bool((x != 0).any())
                largest = max(largest, float(x.abs().max()))
        if moments.n == 0 or not nonzero:
            continue
        zeros_pass = mean_pass = True
        for i, j in chunks(rf.numel()):
            x = rf[i:j].double()
            x = x[torch.isfinite(x)]
            tol = a + rt * x.abs()
            zeros_pass = zeros_pass and bool((x.abs() <= tol).all())
            mean_pass = mean_pass and moments.n > 1 and bool(((x - moments.mean).abs() <= tol).all())
            if not (zeros_pass or mean_pass):
                break
        found = _vacuous_note(path, a, rt, largest, moments, zeros_pass, mean_pass)
        if found:
            return found
    return None


def _vacuous_note(
    path: str, a: float, rt: float, largest: float, moments: Moments, zeros_pass: bool, mean_pass: bool
) -> str | None:
    if zeros_pass:
        return f"an all-zeros {path} is within atol={a:g}, rtol={rt:g} of the reference everywhere (largest |ref| {largest:.3g})"
    if mean_pass:
        return f"a constant {path} equal to the reference's mean {moments.mean:.4g} is within atol={a:g}, rtol={rt:g} of it everywhere"
    return None


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two views of one layout hold the same bytes over their spans (NaNs included), chunk by chunk."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    span = 1 + sum((n - 1) * s for n, s in zip(a.shape, a.stride()))
    if tuple(a.stride()) != tuple(b.stride()):
        a, b = a.contiguous(), b.contiguous()
        span = a.numel()
    fa = torch.as_strided(a, (span,), (1,), a.storage_offset()).view(torch.uint8)
    fb = torch.as_strided(b, (span,), (1,), b.storage_offset()).view(torch.uint8)
    step = CHUNK * 8
    if fa.numel() % 8 == 0 and fa.data_ptr() % 8 == 0 and fb.data_ptr() % 8 == 0:
        # Eight bytes to a word: the same equality, an eighth of the comparison's bool temporaries (a 6 GiB
        # input's written-inputs check read and wrote twice its size in bytes), a sync per GiB.
        fa, fb, step = fa.view(torch.int64), fb.view(torch.int64), CHUNK * 8
    for i in range(0, fa.numel(), step):
        if not torch.equal(fa[i : i + step], fb[i : i + step].to(fa.device)):
            return False
    return True
