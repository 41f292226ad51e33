"""Time the judge's stages for a few candidates on the GPU (issue 2's benchmark).

    python3 bench/judge_stages.py [--out FILE.json] [--repeat 2]

Each candidate is judged `--repeat` times by one Judge (the reference is computed
once, in the first run, and reported separately); later runs show warm caches
(Triton's cache, torch.compile's). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.judge import Judge

ROOT = Path(__file__).resolve().parent.parent
CASES = [
    ("relu (KernelBench size), Triton", "bench/tasks/relu_kb.py", "examples/candidates/relu_triton.py"),
    ("relu (KernelBench size), CUDA", "bench/tasks/relu_kb.py", "bench/candidates/relu_cuda_aten.py"),
    ("matmul 2048, Triton", "bench/tasks/matmul_kb.py", "bench/candidates/matmul_triton.py"),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    rows = []
    for label, task, cand in CASES:
        with Judge(ROOT / task, JudgeConfig()) as judge:
            t0 = time.monotonic()
            judge.reference()
            ref_s = time.monotonic() - t0
            for i in range(args.repeat):
                t0 = time.monotonic()
                v = judge.evaluate((ROOT / cand).read_text(), filename=Path(cand).name)
                total = time.monotonic() - t0
                rows.append(
                    {
                        "case": label,
                        "run": i + 1,
                        "reference_s": ref_s if i == 0 else 0.0,
                        "total_s": total,
                        **{f"{k}_s": s for k, s in v.stage_seconds.items()},
                        "category": v.category.value,
                        "speedup_eager": v.speedup_eager,
                        "speedup_compile": v.speedup_compile,
                        "candidate_ms": v.timings.candidate.median_ms if v.timings and v.timings.candidate else None,
                        "eager_ms": v.timings.eager.median_ms if v.timings and v.timings.eager else None,
                        "compile_ms": v.timings.compiled.median_ms if v.timings and v.timings.compiled else None,
                        "gpu": v.timings.gpu if v.timings else None,
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    cols = [
        "case",
        "run",
        "reference_s",
        "compile_s",
        "correctness_s",
        "legality_s",
        "benchmark_s",
        "total_s",
        "category",
        "candidate_ms",
        "eager_ms",
        "compile_ms",
        "speedup_eager",
    ]
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print(
            "| " + " | ".join(f"{r.get(c):.3g}" if isinstance(r.get(c), float) else str(r.get(c)) for c in cols) + " |"
        )
    for stage in ("compile_s", "correctness_s", "legality_s", "benchmark_s"):
        vals = [r[stage] for r in rows if r.get(stage) is not None]
        if vals:
            print(f"median {stage}: {statistics.median(vals):.2f}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
