"""Seconds from submission to verdict, on KernelBench's own tasks at their published sizes.

    python3 bench/judge_latency.py --out OUT.json [--old-judge DIR] [--big]

Runs on the GPU (every number in docs/judge.md came from the H100). In one run:

1. ``first``: a new judge on 88_MinGPTNewGelu (512 MiB in + out) and a Triton
   candidate: the task's import, Model, its trials' reference outputs, the eager and
   torch.compile baselines (torch.compile's compilation included), the Triton build;
2. ``cold_triton``: a Triton kernel not seen before (another block size), same judge;
3. ``warm_triton``: the same Triton kernel again, 5 times, as ``kernelfix eval`` runs it
   (every trial and variant, legality and timing included); ``warm_triton_pre``: the
   same as the agent loop runs it, the candidate's worker started while the model
   writes (``Judge.prestart``), the clock started when the candidate is submitted;
4. ``cold_cuda`` / ``warm_cuda`` / ``warm_cuda_pre``: a load_inline CUDA kernel, its
   first build, then verdicts with the extension from the build cache;
5. hangs, side by side: a GPU kernel that spins, a Python loop in forward, an
   import that sleeps (no compiler running): each verdict and its time;
6. ``--big``: 19_ReLU (6 GiB in, 6 GiB out) and 23_Softmax at their sizes;
7. ``--old-judge DIR``: the judge as it was (a ``pip install --target`` of an earlier
   kernelfix), on the warm Triton candidate, for the ratio.

Prints a table; writes every verdict's stage breakdown to OUT.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "tests" / "kernelbench" / "level1"
CANDS = ROOT / "bench" / "candidates"


def _row(name: str, t0: float, v) -> dict:
    return {
        "case": name,
        "seconds": round(time.monotonic() - t0, 2),
        "category": v.category.value,
        "message": v.message,
        "stage_seconds": v.stage_seconds,
        "breakdown": v.breakdown,
        "speedup_eager": v.speedup_eager,
        "speedup_compile": v.speedup_compile,
        "candidate_ms": v.timings.candidate.median_ms if v.timings and v.timings.candidate else None,
        "eager_ms": v.timings.eager.median_ms if v.timings and v.timings.eager else None,
        "compile_ms": v.timings.compiled.median_ms if v.timings and v.timings.compiled else None,
    }


def judge_once(judge, name: str, source: str, *, prestart: bool = False) -> dict:
    """One verdict, timed from submission. ``prestart``: as the agent loop runs it, the candidate's
    worker was started while the model wrote its reply (here: started and waited for before the clock)."""
    wd = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=judge.root))
    if prestart:
        judge.prestart(wd, wait=True)
    t0 = time.monotonic()
    v = judge.evaluate(source, filename=f"{name}.py", workdir=wd)
    row = _row(name, t0, v)
    print(
        f"{name:<14} {row['seconds']:7.2f} s  {row['category']:<34} stages {_fmt(v.stage_seconds)}  inside {_fmt(v.breakdown)}",
        flush=True,
    )
    return row


def _fmt(d: dict) -> str:
    return ", ".join(f"{k} {s:.1f}" for k, s in d.items())


def old_judge(old: Path, task: Path, cand: Path) -> dict:
    """The earlier judge, as a user ran it: ``kernelfix eval --json`` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": f"{old}:{os.environ.get('PYTHONPATH', '')}"}
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-P", "-m", "kernelfix", "eval", str(task), str(cand), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    secs = round(time.monotonic() - t0, 2)
    try:
        v = json.loads(p.stdout)
        row = {
            "case": "old_judge",
            "seconds": secs,
            "category": v["category"],
            "stage_seconds": v.get("stage_seconds"),
            "message": v.get("message"),
        }
    except ValueError:
        row = {"case": "old_judge", "seconds": secs, "category": "?", "message": p.stderr[-800:]}
    print(f"{'old_judge':<14} {secs:7.2f} s  {row['category']}  stages {row.get('stage_seconds')}", flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--old-judge", metavar="DIR", help="an earlier kernelfix installed with pip install --target DIR")
    ap.add_argument("--big", action="store_true", help="also 19_ReLU and 23_Softmax (6 GiB in, 6 GiB out)")
    ap.add_argument("--skip-hangs", action="store_true")
    ap.add_argument("--skip-cuda", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("KERNELFIX_CACHE", tempfile.mkdtemp(prefix="kernelfix-bench-cache-"))  # cold caches
    import torch

    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tools.judge import Judge

    print(
        f"judge latency on {torch.cuda.get_device_name(0)}, torch {torch.__version__}, cache {os.environ['KERNELFIX_CACHE']}",
        flush=True,
    )
    rows: list[dict] = []
    gelu = KB / "88_MinGPTNewGelu.py"
    triton_src = (CANDS / "gelu_triton.py").read_text()
    cuda_src = (CANDS / "gelu_cuda.py").read_text()
    with Judge(gelu, JudgeConfig()) as judge:
        rows.append(judge_once(judge, "first", triton_src))
        rows.append(
            judge_once(
                judge,
                "cold_triton",
                triton_src.replace("BLOCK=4096", "BLOCK=2048").replace("cdiv(n, 4096)", "cdiv(n, 2048)"),
            )
        )
        for i in range(args.repeat):
            rows.append(judge_once(judge, "warm_triton", triton_src))
        for i in range(args.repeat):
            rows.append(judge_once(judge, "warm_triton_pre", triton_src, prestart=True))
        if not args.skip_cuda:
            rows.append(judge_once(judge, "cold_cuda", cuda_src))
            for i in range(args.repeat):
                rows.append(judge_once(judge, "warm_cuda", cuda_src))
            for i in range(args.repeat):
                rows.append(judge_once(judge, "warm_cuda_pre", cuda_src, prestart=True))
    if args.old_judge:
        rows.append(old_judge(Path(args.old_judge), gelu, CANDS / "gelu_triton.py"))
    if not args.skip_hangs:
        hang_rows: list[dict] = []

        def hang(name: str) -> None:
            with Judge(gelu, JudgeConfig(time_torch_compile=False)) as j:
                hang_rows.append(judge_once(j, name, (CANDS / f"{name}.py").read_text()))

        threads = [threading.Thread(target=hang, args=(n,)) for n in ("hang_gpu", "hang_python", "hang_import")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rows += hang_rows
    if args.big:
        for task, cand in (("19_ReLU", "relu_triton"), ("23_Softmax", "softmax_triton")):
            with Judge(KB / f"{task}.py", JudgeConfig()) as j:
                rows.append(judge_once(j, f"{task}", (CANDS / f"{cand}.py").read_text()))
    Path(args.out).write_text(json.dumps(rows, indent=2))
    print("\ncase            verdicts  median s   min s   max s")
    for name in dict.fromkeys(r["case"] for r in rows):
        s = [r["seconds"] for r in rows if r["case"] == name]
        print(f"{name:<14} {len(s):9d} {statistics.median(s):9.2f} {min(s):7.2f} {max(s):7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
