"""[judge, reference worker, one-shot child] The chunked passes as one fused GPU kernel each (Triton), for outputs
of ``FUSED_MIN`` elements and more on a CUDA device.

The torch passes (chunked.py, compare.py) walk a 6 GiB float32 output in 96 chunks of 16M elements, each
through some thirty float64 elementwise kernels and ten host syncs: half a second per comparison on the
H100, eight comparisons and as many float64 passes per verdict. Here one kernel reads each element of
each tensor once, does the same float64 arithmetic element by element (no fused multiply-add:
``enable_fp_fusion=False``, so every tolerance is rounded as torch rounds it), and writes a few
partial results per program (``BLOCK * ITERS`` elements, walked with running results per lane); torch
merges the partials on the device and the host reads them once. What the verdict reports is the torch passes' own: mismatch counts, worst and first
indices, maxima and ``max_rel_error`` (with its chunk-wise NaN rule) are the same numbers; the sums
behind the error norms are added in another order, so they may differ in the last bits (tests compare
both on edge cases). Anything else (small outputs, the CPU, integers, a failed Triton) takes the torch
passes; ``KERNELFIX_FUSED_CHECK=0`` forces them.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

BLOCK = 1024  # elements a kernel program holds at once (4 per thread)
ITERS = 32  # blocks one program walks with per-lane running results: one set of block-wide reductions per span
# Warps a program runs: 32 (one element of BLOCK a thread). The pair kernel carries fourteen float64 and six int32
# running results per element: at 8 warps (4 elements a thread) it took 214 registers a thread, one program per SM
# (8 warps resident) and 7x its bandwidth floor on the H100; at 32 it takes 64 (a few spilled to the stack), 32 warps
# resident. BLOCK and ITERS, so which elements each lane walks and each program's shift, are unchanged: counts,
# indices and maxima are the same bits; the block-wide sums (error norms, moments) are added in another tree order.
NUM_WARPS = 32
# A program's span, BLOCK * ITERS elements, divides chunked.CHUNK, so per-chunk rules can be kept.
FUSED_MIN = 1 << 27  # elements (512 MB of float32): below, the torch passes take tens of milliseconds, and a cold
# `kernelfix eval` of a smaller task (88_MinGPTNewGelu: 2**26) never pays for importing Triton in the reference worker
CPU_INTERPRETED = False  # tests only: CPU tensors through Triton's interpreter (TRITON_INTERPRET=1)
T = TypeVar("T")
_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)

# Columns of the pair kernel's partials (one row per program). Indices are the program's own (0..SPAN-1).
(
    N_BAD,
    N_NF,
    FIRST_NF,
    MX,
    MX_AT,
    RELMAX,
    NAN_R,
    EX,
    EX_AT,
    NB,
    MEAN,
    M2,
    SQ_ERR,
    SQ_REF,
    ABSMAX,
    NONZERO,
    RMIN,
    RMAX,
) = range(18)
PAIR_COLS = 18
# Columns of the truth kernel's partials.
T_NF, T_EMAX, T_RMAX, T_SQE, T_SQR, T_N, T_MEAN, T_M2, T_MIN, T_MAX = range(10)
TRUTH_COLS = 10


failed: str | None = None  # why a kernel failed in this process (then the torch passes take every comparison)


def enabled() -> bool:
    return failed is None and os.environ.get("KERNELFIX_FUSED_CHECK", "1") != "0"


def _guarded(fn: Callable[..., T]) -> Callable[..., T | None]:
    """``fn``'s result, or None where its kernel could not run (a Triton that fails to compile it): the caller then
    takes the torch passes, and so does every later comparison. A full GPU is raised, as the torch passes raise it."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T | None:
        global failed
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if "OutOfMemoryError" in type(e).__name__ or "out of memory" in str(e).lower():
                raise
            failed = f"{type(e).__name__}: {e}"[:500]
            return None

    return run


def usable(*tensors: torch.Tensor, min_numel: int | None = None) -> bool:
    """Whether these flat tensors (same length, one CUDA device, floating dtypes) take the fused kernels."""
    if not enabled() or not tensors:
        return False
    first = tensors[0]
    if first.numel() < (FUSED_MIN if min_numel is None else min_numel):
        return False
    for t in tensors:
        if t.device != first.device or t.numel() != first.numel() or t.dtype not in _FLOATS:
            return False
    if first.device.type != "cuda" and not (CPU_INTERPRETED and os.environ.get("TRITON_INTERPRET") == "1"):
        return False
    return _kernels() is not None


def _kernels() -> Any:
    """(pair, truth, vacuous), or None where Triton cannot be imported."""
    global _loaded
    if _loaded is None:
        try:
            from kernelfix.tools.correctness import fused_kernels as k

            _loaded = (k.pair, k.truth, k.vacuous)
        except Exception:
            _loaded = ()
    return _loaded or None


_loaded: tuple | None = None


def _launch(kernel: Any, cols: int, tensors: tuple, params: tuple = (), **meta: Any) -> torch.Tensor:
    """Run ``kernel`` over the flat ``tensors``; its partials, one row of ``cols`` per program. Tolerances and
    the like go in as a float64 tensor (Triton passes a Python float as float32, which moved atol=1e-4 and
    with it the mismatch count on the H100). No fused multiply-add: each product and sum is rounded as
    torch's own kernels round it."""
    n = tensors[0].numel()
    device = tensors[0].device
    programs = max(1, -(-n // (BLOCK * ITERS)))
    part = torch.empty((programs, cols), dtype=torch.float64, device=device)
    p = torch.tensor([*params, 0.0], dtype=torch.float64, device=device)
    options = {} if os.environ.get("TRITON_INTERPRET") == "1" else {"enable_fp_fusion": False, "num_warps": NUM_WARPS}
    kernel[(programs,)](*tensors, part, n, p, **meta, BLOCK=BLOCK, ITERS=ITERS, **options)
    return part


def _global(at: torch.Tensor) -> torch.Tensor:
    """Programs' own indices as the tensor's (their sentinel, the span, as infinity)."""
    span = BLOCK * ITERS
    base = torch.arange(at.numel(), device=at.device, dtype=torch.float64) * span
    return torch.where(at < span, at + base, math.inf)


def _first_at(values: torch.Tensor, at: torch.Tensor, best: torch.Tensor) -> torch.Tensor:
    """The smallest index among the programs whose value is ``best``."""
    return torch.where(values == best, _global(at), math.inf).min()


def _merge(
    n: torch.Tensor, mean: torch.Tensor, m2: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor
) -> list[torch.Tensor]:
    """Programs' (count, mean, squared deviations) merged on the device (Chan et al.): [n, mean, m2]; a
    constant has none, exactly."""
    total = n.sum()
    avg = (n * mean).sum() / total.clamp(min=1.0)
    dev = torch.where(n > 0, mean - avg, 0.0)
    spread = m2.sum() + (n * dev * dev).sum()
    constant = torch.where(n > 0, lo, math.inf).min() == torch.where(n > 0, hi, -math.inf).max()
    return [total, torch.where(total > 0, avg, 0.0), torch.where(constant, 0.0, spread)]


@dataclass
class PairStats:
    """compare._values' numbers (and chunked.ErrorNorm's sums) for one leaf."""

    n_bad: int
    n_nonfinite: int
    first_nonfinite: int | None
    max_abs: float
    max_abs_at: int
    max_rel: float
    excess_at: int
    moments: tuple[float, float, float]  # chunked.Moments' (n, mean, m2), merged over the blocks
    sq_err: float
    sq_ref: float
    largest: float
    nonzero: bool


@_guarded
def pair_stats(rf: torch.Tensor, of: torch.Tensor, atol: float, rtol: float, chunk: int) -> PairStats:
    """One launch over the flat reference ``rf`` and candidate ``of``, one read of the results."""
    pair, _, _ = _kernels()
    rf, of = rf.contiguous(), of.contiguous()
    span = BLOCK * ITERS
    assert chunk % span == 0, "a chunk is a whole number of programs' spans"
    part = _launch(pair, PAIR_COLS, (rf, of), (float(atol), float(rtol)), COLS=PAIR_COLS)
    col = part.unbind(1)
    mx = col[MX].max()
    ex = col[EX].max()
    # max_rel_error as the torch passes take it: a chunk whose reference holds a NaN gives NaN, which
    # Python's max() then passes over, so that chunk adds nothing.
    per_chunk = chunk // span
    pad = (-part.shape[0]) % per_chunk
    rel = torch.nn.functional.pad(col[RELMAX], (0, pad), value=-1.0).view(-1, per_chunk).amax(1)
    nan = torch.nn.functional.pad(col[NAN_R], (0, pad)).view(-1, per_chunk).sum(1)
    max_rel = torch.where(nan > 0, -1.0, rel).max()
    moments = _merge(col[NB], col[MEAN], col[M2], col[RMIN], col[RMAX])
    out = torch.stack(
        [
            col[N_BAD].sum(),
            col[N_NF].sum(),
            _global(col[FIRST_NF]).min(),
            mx,
            _first_at(col[MX], col[MX_AT], mx),
            max_rel,
            _first_at(col[EX], col[EX_AT], ex),
            *moments,
            col[SQ_ERR].sum(),
            col[SQ_REF].sum(),
            col[ABSMAX].max(),
            col[NONZERO].sum(),
        ]
    ).tolist()
    n_bad, n_nf, first_nf, max_abs, max_abs_at, max_rel_v, ex_at, mn, mmean, mm2, sq_err, sq_ref, largest, nonzero = out
    return PairStats(
        n_bad=int(n_bad),
        n_nonfinite=int(n_nf),
        first_nonfinite=int(first_nf) if n_nf else None,
        max_abs=max_abs,
        max_abs_at=int(max_abs_at),
        max_rel=max_rel_v,
        excess_at=int(ex_at) if n_bad else 0,
        moments=(mn, mmean, mm2),
        sq_err=sq_err,
        sq_ref=sq_ref,
        largest=largest,
        nonzero=nonzero > 0,
    )


@dataclass
class TruthStats:
    nonfinite: int
    e_max: float
    r_max: float
    sq_e: float
    sq_r: float
    moments: tuple[float, float, float]


@_guarded
def truth_stats(rf: torch.Tensor, tf: torch.Tensor, of: torch.Tensor) -> TruthStats:
    """truth.truth_check's sums for one leaf: the candidate's and the reference's errors against the truth."""
    _, truth, _ = _kernels()
    rf, tf, of = rf.contiguous(), tf.contiguous(), of.contiguous()
    part = _launch(truth, TRUTH_COLS, (rf, tf, of), COLS=TRUTH_COLS)
    col = part.unbind(1)
    moments = _merge(col[T_N], col[T_MEAN], col[T_M2], col[T_MIN], col[T_MAX])
    nf, e_max, r_max, sq_e, sq_r, mn, mmean, mm2 = torch.stack(
        [col[T_NF].sum(), col[T_EMAX].max(), col[T_RMAX].max(), col[T_SQE].sum(), col[T_SQR].sum(), *moments]
    ).tolist()
    return TruthStats(nonfinite=int(nf), e_max=e_max, r_max=r_max, sq_e=sq_e, sq_r=sq_r, moments=(mn, mmean, mm2))


@_guarded
def vacuous_counts(xf: torch.Tensor, a: float, rt: float, mean: float) -> tuple[int, int]:
    """Over the finite elements: how many lie beyond atol/rtol of zero, and of ``mean``."""
    _, _, vac = _kernels()
    xf = xf.contiguous()
    part = _launch(vac, 2, (xf,), (float(a), float(rt), float(mean)))
    zeros_out, mean_out = part.sum(0).tolist()
    return int(zeros_out), int(mean_out)


VARY_BLOCK = 1024  # elements a program of the variant kernels writes (no reduction: any size gives the same bits)


def varies(x: torch.Tensor) -> bool:
    """Whether a varied input's chunks take the fused variant kernels: a float32 or float64 tensor of ``FUSED_MIN``
    elements and more on a CUDA device (Triton's interpreter under ``CPU_INTERPRETED``), as ``usable`` decides.
    Half types keep the torch loop: their rounding from float64 is torch's own to match."""
    return x.dtype in (torch.float32, torch.float64) and usable(x)


def vary_params(device: torch.device, *values: float) -> torch.Tensor:
    """The variant kernels' numbers, float64 on the device: made once per varied tensor, not per chunk (a host copy)."""
    return torch.tensor([float(v) for v in values], dtype=torch.float64, device=device)


def _vary_launch(kernel: Any, tensors: tuple, out: torch.Tensor, p: torch.Tensor, **meta: Any) -> None:
    n = out.numel()
    options = {} if os.environ.get("TRITON_INTERPRET") == "1" else {"enable_fp_fusion": False, "num_warps": 4}
    kernel[(max(1, -(-n // VARY_BLOCK)),)](*tensors, out, n, p, **meta, BLOCK=VARY_BLOCK, **options)


@_guarded
def vary_affine(x: torch.Tensor, out: torch.Tensor, p: torch.Tensor, shift: bool) -> bool:
    """``out.copy_(x.double() - c)`` (``shift``) or ``out.copy_(x.double() * c)`` in one pass, ``p = vary_params(c)``;
    True when it ran."""
    kernel = _vary_kernels()[0]
    _vary_launch(kernel, (x,), out, p, SHIFT=shift)
    return True


@_guarded
def vary_student(z: torch.Tensor, chi2: torch.Tensor, out: torch.Tensor, p: torch.Tensor) -> bool:
    """``out.copy_(mean + std * (z / (chi2 / dof).sqrt()))`` in one pass (z and chi2 float64, torch's own draws), as
    torch computes it on a CUDA device, where ``chi2 / dof`` is ``chi2 * (1 / dof)``: ``p = vary_params(mean, std,
    1 / dof)``."""
    kernel = _vary_kernels()[1]
    _vary_launch(kernel, (z, chi2), out, p)
    return True


def _vary_kernels() -> Any:
    from kernelfix.tools.correctness import fused_kernels as k

    return k.vary_affine, k.vary_student
