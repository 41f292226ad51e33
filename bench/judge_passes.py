"""The reference worker's passes over one published-size trial, each alone, beside the GPU's bandwidth floor.

    python3 -P bench/judge_passes.py --out OUT.json [--numel N] [--repeat 3]

Runs on the GPU (docs/service.md quotes it: what a warm verdict's ``correctness.ref_*`` steps cost and what is
left of them above the floor). On a float32 tensor of ``--numel`` elements (default 19_ReLU's 4096 x 393216:
6 GiB), median of ``--repeat``, seconds, the GPU's work finished:

- the driver's memory: a fresh 6 GiB block (``cudaMalloc`` through torch's allocator), the same from the
  allocator's cache, and giving it back (``empty_cache``);
- a trial's making: the draw (``torch.randn``), the reference's forward (``relu``), the float64 truth (inputs
  in float64 and the forward there);
- its checks: ``compare`` (the fused pair kernel, as the judge calls it), ``relative_error`` against float64,
  the written-inputs check (``same_bytes``), and the pair kernel alone at 4, 8, 16 and 32 warps and the truth
  kernel at 8 and 32 (the judge ran 8 until t38, and runs ``fused.NUM_WARPS`` now: 32); ``compare`` and
  ``vs_float64`` again at 8 warps (``*_8_warps``), the ratio of the judge's passes before and after.

Each row gives the bytes the pass must move and that floor at ``--bandwidth`` (3.35 TB/s, the H100 SXM's).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--numel", type=int, default=4096 * 393216)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bandwidth", type=float, default=3.35e12)
    a = ap.parse_args()

    import torch

    from kernelfix.tools.correctness import fused
    from kernelfix.tools.correctness.chunked import relative_error, same_bytes
    from kernelfix.tools.correctness.compare import compare

    n, f4 = a.numel, a.numel * 4
    rows: dict[str, dict] = {}

    def timed(name: str, fn, moved: int, setup=None) -> None:
        ts = []
        for _ in range(a.repeat):
            if setup is not None:
                setup()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = fn()
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
            del out
        rows[name] = {"s": round(statistics.median(ts), 5), "floor_s": round(moved / a.bandwidth, 5), "bytes": moved}

    empty = torch.cuda.empty_cache
    timed("alloc_fresh", lambda: torch.empty(n, device="cuda"), 0, setup=empty)
    keep = torch.empty(n, device="cuda")
    del keep
    timed("alloc_cached", lambda: torch.empty(n, device="cuda"), 0)

    def give_back() -> None:
        block = torch.empty(n, device="cuda")
        del block

    timed("empty_cache", empty, 0, setup=give_back)
    timed("draw", lambda: torch.randn(n, device="cuda"), f4)
    x = torch.randn(n, device="cuda")
    timed("forward", lambda: torch.relu(x), 2 * f4)
    timed("float64_truth", lambda: torch.relu(x.double()), f4 + 8 * n * 3)
    ref = torch.relu(x)
    cand = ref.clone()
    out64 = torch.relu(x.double())
    now = fused.NUM_WARPS
    for warps, tag in ((now, ""), (8, "_8_warps")):
        fused.NUM_WARPS = warps
        compare(ref, cand, atol=1e-4, rtol=1e-4, trial=0, seed=0)  # compiled before it is timed
        relative_error(out64, cand)
        timed(f"compare{tag}", lambda: compare(ref, cand, atol=1e-4, rtol=1e-4, trial=0, seed=0), 2 * f4)
        timed(f"vs_float64{tag}", lambda: relative_error(out64, cand), f4 + 8 * n)
    fused.NUM_WARPS = now
    x2 = x.clone()
    timed("same_bytes", lambda: same_bytes(x, x2), 2 * f4)
    x2 = None  # freed (None, not del: the lambda above names it)
    kernels = fused._kernels()
    if kernels is not None:
        pair = kernels[0]
        span = fused.BLOCK * fused.ITERS
        programs = -(-n // span)
        part = torch.empty((programs, fused.PAIR_COLS), dtype=torch.float64, device="cuda")
        p = torch.tensor([1e-4, 1e-4, 0.0], dtype=torch.float64, device="cuda")
        for warps in (4, 8, 16, 32):

            def launch(w=warps):
                pair[(programs,)](
                    ref,
                    cand,
                    part,
                    n,
                    p,
                    COLS=fused.PAIR_COLS,
                    BLOCK=fused.BLOCK,
                    ITERS=fused.ITERS,
                    enable_fp_fusion=False,
                    num_warps=w,
                )

            launch()  # compiled before it is timed
            timed(f"pair_kernel_{warps}_warps", launch, 2 * f4)
        truth = kernels[1]
        tpart = torch.empty((programs, fused.TRUTH_COLS), dtype=torch.float64, device="cuda")
        for warps in (8, 32):

            def launch_truth(w=warps):
                truth[(programs,)](
                    ref,
                    out64,
                    cand,
                    tpart,
                    n,
                    p,
                    COLS=fused.TRUTH_COLS,
                    BLOCK=fused.BLOCK,
                    ITERS=fused.ITERS,
                    enable_fp_fusion=False,
                    num_warps=w,
                )

            launch_truth()
            timed(f"truth_kernel_{warps}_warps", launch_truth, 2 * f4 + 8 * n)
    out64 = None  # freed (None, not del: the lambdas above name it)
    result = {
        "numel": n,
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "fused": fused.failed or "ok",
        "rows": rows,
    }
    Path(a.out).write_text(json.dumps(result, indent=1))
    print(f"one trial's passes, {n * 4 / 2**30:.1f} GiB float32, on {result['gpu']} (median of {a.repeat}; seconds)")
    for k, r in rows.items():
        floor = f"  floor {r['floor_s']:.4f} ({r['s'] / r['floor_s']:.1f}x)" if r["floor_s"] else ""
        print(f"  {k:22s} {r['s']:.4f}{floor}")


if __name__ == "__main__":
    main()
