"""Run by tests/test_fused_check.py in a child with TRITON_INTERPRET=1: every edge case through the torch passes and
through the fused kernels (Triton's interpreter, chunks of two blocks); prints {"cases": {name: [old, new]}} as JSON."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kernelfix.tools.correctness import chunked, fused  # noqa: E402
from kernelfix.tools.correctness import compare as compare_mod
from kernelfix.tools.correctness.chunked import relative_error, vacuous_tolerance  # noqa: E402
from kernelfix.tools.correctness.compare import compare
from kernelfix.tools.correctness.truth import truth_check  # noqa: E402

fused.BLOCK, fused.ITERS = 512, 2  # small programs, several to a chunk, so every rule spans programs and chunks
SPAN = fused.BLOCK * fused.ITERS
N = 10 * SPAN + 100  # five chunks of two programs, and a part


def compare_cases() -> dict[str, tuple[torch.Tensor, torch.Tensor, dict]]:
    g = torch.Generator().manual_seed(7)
    r = torch.randn(N, generator=g)
    close = r + 3e-6 * torch.randn(N, generator=g)
    cases: dict[str, tuple[torch.Tensor, torch.Tensor, dict]] = {"close": (r, close, {})}
    o = close.clone()
    o[[5, 4100, 9000]] = float("nan")
    o[9001] = float("inf")
    cases["nan_and_inf_in_output"] = (r, o, {})
    rs, os_ = r.clone(), close.clone()
    rs[[3, 8300]] = float("nan")  # the same NaN in both: equal; a chunk with a NaN reference drops out of max_rel_error
    os_[[3, 8300]] = float("nan")
    rs[[11, 12]] = float("inf")
    os_[11] = float("inf")
    os_[12] = -float("inf")
    rs[13] = -float("inf")
    os_[13] = 1.0
    cases["nonfinite_reference"] = (rs, os_, {})
    z = torch.zeros(N)
    z[::2] = -0.0
    cases["signed_zeros"] = (z, torch.zeros(N), {})
    t = r.clone()
    t[[10, 5000, 9100]] += 0.5  # equal worst errors, chunks apart: the first is named
    cases["tied_worst"] = (r, t, {})
    b = torch.ones(N)
    ob = b.clone()
    ob[100] = 1.5  # exactly atol away: inside
    ob[200] = torch.nextafter(torch.tensor(1.5), torch.tensor(2.0))  # one ulp past: outside
    ob[6000] = 2.5
    cases["tolerance_edge"] = (b, ob, {"atol": 0.5, "rtol": 0.0})
    b2 = torch.full((N,), 2.0)
    ob2 = b2.clone()
    ob2[[1, 4097]] = 2.75  # atol + rtol * 2 = 0.75 exactly
    ob2[4098] = 2.8
    cases["tolerance_edge_rtol"] = (b2, ob2, {"atol": 0.25, "rtol": 0.25})
    cases["wrong_everywhere"] = (r, r * 1.5 + 0.1, {})
    cases["constant_reference"] = (
        torch.full((N,), 2.0),
        torch.full((N,), 2.0) + 1e-7 * torch.randn(N, generator=g),
        {},
    )
    cases["zero_reference"] = (torch.zeros(N), 1e-6 * torch.randn(N, generator=g), {})
    h = torch.randn(N, generator=g).half()
    cases["float16"] = (h, (h.float() * (1 + 1e-3)).half(), {})
    bf = torch.randn(N, generator=g).bfloat16()
    cases["bfloat16"] = (bf, (bf.float() + 0.05).bfloat16(), {})
    d = torch.randn(N, generator=g, dtype=torch.float64) * 1e300
    od = d.clone()
    od[7], d[7] = -1.7e308, 1.7e308  # their difference overflows float64: an infinite error
    cases["float64_overflow"] = (d, od, {})
    c = torch.randn(N // 2, generator=g, dtype=torch.complex64)
    cases["complex64"] = (c, c * (1 + 2e-5), {})
    a = torch.arange(N, dtype=torch.int64) * (1 << 40)
    ai = a.clone()
    ai[4444] += 1
    cases["int64"] = (a, ai, {})
    return cases


def both(fn):
    fused.FUSED_MIN = 1 << 62
    old = fn()
    fused.FUSED_MIN = 0
    return [old, fn()]


def dump(x):
    return (
        x.model_dump(mode="json")
        if hasattr(x, "model_dump")
        else {"relative_error": x}
        if not isinstance(x, (str, type(None))) or x is None
        else {"note": x}
    )


def variant_cases(out: dict, g: torch.Generator) -> None:
    """input_variants' three variants through the torch loop and the variant kernels: the bytes, which must be equal."""
    import hashlib

    from kernelfix.tools.correctness import input_variants

    ran: list[str] = []
    for name in ("vary_affine", "vary_student"):
        kernel = getattr(fused, name)
        setattr(fused, name, lambda *a, _k=kernel, _n=name, **kw: ran.append(_n) or _k(*a, **kw))
    x = torch.randn(N, generator=g)
    x[[0, 1, 2, 3, 4, 5]] = torch.tensor([3.5e37, -3.5e37, 1e-45, -0.0, float("nan"), float("inf")])
    ramp = torch.linspace(-1e3, 1e3, N) * torch.randn(N, generator=g)  # every magnitude's last bit rounded

    def sha(t: torch.Tensor) -> dict:
        return {"sha": hashlib.sha256(t.numpy().tobytes()).hexdigest()}

    stats = (0.3141, 2.718)
    for dtype in (torch.float32, torch.float64):
        for variant in ("scaled", "shifted"):
            for kind, t in (("edges", x), ("ramp", ramp)):
                t = t.to(dtype)
                res = both(lambda: input_variants._vary(t, variant, torch.Generator().manual_seed(5), stats))
                out[f"variant/{variant}_{kind}_{str(dtype)[6:]}"] = [sha(r) for r in res]
        # heavy-tailed: the kernel against torch's CUDA arithmetic done in numpy (IEEE: a product with 1/3, a correctly
        # rounded sqrt and quotient; this CPU build's own float64 sqrt is not correctly rounded, CUDA's is)
        fused.FUSED_MIN = 0
        got = input_variants._vary(x.to(dtype), "heavy_tailed", torch.Generator().manual_seed(5), stats)
        gen, want = torch.Generator().manual_seed(5), []
        for i, j in chunked.chunks(N):
            z, chi2 = input_variants._student_draws(j - i, gen, torch.device("cpu"))
            want.append(
                stats[0] + stats[1] * (z.numpy() / np.sqrt(chi2.numpy() * (1.0 / input_variants.STUDENT_T_DOF)))
            )
        out[f"variant/heavy_tailed_{str(dtype)[6:]}"] = [
            sha(torch.from_numpy(np.concatenate(want)).to(dtype)),
            sha(got),
        ]
    out["variant/kernels_ran"] = [sorted(set(ran)), ["vary_affine", "vary_student"]]


def count_swaps() -> dict[str, int]:
    """The candidate worker's interpreter, swapping triton.language once per launch (interpreter.patch_once), with
    its launches and real swaps counted: the kernels here call tl.sum, tl.max, tl.zeros, ... thousands of times."""
    from triton.runtime import interpreter as triton_interpreter

    from kernelfix.tools.workers.candidate.interpreter import patch_once

    counts = {"launches": 0, "swaps": 0}
    swap = triton_interpreter._patch_lang

    def counted_swap(fn):
        counts["swaps"] += 1
        return swap(fn)

    def counted_launch(self, *args, **kwargs):
        counts["launches"] += 1
        return launch(self, *args, **kwargs)

    triton_interpreter._patch_lang = counted_swap  # under patch_once: the swaps it lets through
    # bench/interpreter_swaps.py runs this once as Triton ships its interpreter too, for the figure in docs/judge.md
    counts["patched"] = int(os.environ.get("FUSED_CASES_PLAIN_INTERPRETER") != "1" and patch_once())
    launch = triton_interpreter.GridExecutor.__call__  # over it: every launch
    triton_interpreter.GridExecutor.__call__ = counted_launch
    return counts


def main() -> None:
    fused.CPU_INTERPRETED = True
    interpreter = count_swaps()
    chunked.CHUNK = compare_mod.CHUNK = 2 * SPAN
    out: dict[str, list] = {}
    for name, (r, o, tol) in compare_cases().items():
        out[f"compare/{name}"] = [
            dump(x) for x in both(lambda: compare(r, o, trial=1, seed=2, rel_error_tol=1e-2, noise=1e-7, **tol))
        ]
    g = torch.Generator().manual_seed(3)
    truth = torch.randn(N, generator=g, dtype=torch.float64)
    ref = (truth + 1e-7 * torch.randn(N, generator=g, dtype=torch.float64)).float()
    outs = {
        "close": ref + 2e-7,
        "scaled": ref * 1.01,
        "nan": torch.where(torch.arange(N) == 9000, float("nan"), ref),
        "zeros": torch.zeros(N),
    }
    for name, cand in outs.items():
        out[f"truth/{name}"] = [
            dump(x) for x in both(lambda: truth_check(ref, truth, cand, factor=8.0, rel_error_tol=1e-2))
        ]
        out[f"relative_error/{name}"] = [dump(x) for x in both(lambda: relative_error(truth, cand))]
    for scale in (1e-6, 1.0, 1e6):
        for kind, x in (
            ("random", scale * torch.randn(N, generator=g)),
            ("constant", torch.full((N,), 3.0 * scale)),
            ("offset", scale * (5 + 1e-6 * torch.randn(N, generator=g))),
        ):
            out[f"vacuous/{kind}_{scale:g}"] = [{"note": v} for v in both(lambda: vacuous_tolerance(x))]
    variant_cases(out, g)
    used = fused.usable(torch.zeros(8), min_numel=0)
    print(json.dumps({"fused_used": used, "cases": out, "interpreter": interpreter}))


if __name__ == "__main__":
    main()
