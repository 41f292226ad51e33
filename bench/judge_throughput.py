"""Verdicts per hour with several candidates in flight, and how busy the GPU is.

    python3 bench/judge_throughput.py --out OUT.json [--workers 6] [--candidates 24]

Emulates a batch on one GPU: ``--workers`` evaluations at a time, each in a thread of
its own, over a mixed list of candidates for three KernelBench level-1 tasks at their
published sizes (88_MinGPTNewGelu, 1_Square_matrix_multiplication_, 23_Softmax): correct
Triton kernels of several block sizes (each a new Triton build), a correct CUDA kernel,
wrong ones, ones that do not compile, ones that call torch. One judge per task, as one
session per task would have. Builds run on the CPU cores outside the GPU lease; timing
holds it exclusive, correctness trials and warm-ups shared (docs/judge.md). From the
lease's hold log: the GPU's busy fraction (the time any hold was held, over the wall
time), the exclusive and the shared seconds, the seconds two or more shared holds ran at
once, and the exclusive holds that overlapped any other hold (must be 0). The log of an
older judge (no modes) reads as all exclusive. ``--label`` names the run in the output.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KB = Path(os.environ.get("KERNELFIX_BENCH_TASKS", ROOT / "tests" / "kernelbench" / "level1"))  # small copies for a dry run on CPU
CANDS = ROOT / "bench" / "candidates"


def _mix(n: int) -> list[tuple[str, str, str]]:
    """(task, label, source): n candidates, mixed."""
    gelu = (CANDS / "gelu_triton.py").read_text()
    softmax = (CANDS / "softmax_triton.py").read_text()
    matmul = (CANDS / "matmul_triton.py").read_text()
    out: list[tuple[str, str, str]] = []
    kinds = [
        ("88_MinGPTNewGelu", "gelu ok", lambda i: gelu.replace("4096", str(512 << (i % 4)))),  # block sizes: tl.arange wants powers of 2
        ("23_Softmax", "softmax ok", lambda i: softmax.replace("BLOCK=2048", f"BLOCK={1024 << (i % 3)}")),
        ("88_MinGPTNewGelu", "gelu wrong", lambda i: gelu.replace("0.5 * x", f"0.{6 + i % 3} * x")),
        ("1_Square_matrix_multiplication_", "matmul ok", lambda i: matmul.replace("BK=32", f"BK={16 * (1 + i % 2)}")),
        ("88_MinGPTNewGelu", "gelu torch", lambda i: gelu.replace("return y", "return torch.tanh(y) if False else y * 1.0")),
        ("88_MinGPTNewGelu", "gelu syntax", lambda i: gelu.replace("def forward(self, x):", "def forward(self, x)")),
    ]
    for i in range(n):
        task, label, make = kinds[i % len(kinds)]
        out.append((task, label, make(i // len(kinds))))
    return out


def lease_use(holds: list[dict]) -> dict:
    """From a hold log: seconds any hold was held (busy), exclusive and shared seconds, seconds with two or
    more shared holds at once, exclusive holds that overlapped another hold (must be 0), and the seconds
    stages waited for room for their memory."""
    mode = lambda h: h.get("mode", "exclusive")  # noqa: E731  (an older judge's log: every hold exclusive)
    rooms = [h for h in holds if mode(h) == "room"]  # room for a stage's memory: not a hold of the GPU
    holds = [h for h in holds if mode(h) != "room"]
    events = sorted([(h["got"], 1, mode(h)) for h in holds] + [(h["released"], -1, mode(h)) for h in holds])
    busy = together = 0.0
    live = {"exclusive": 0, "shared": 0}
    last = None
    for t, step, m in events:
        if last is not None:
            if live["exclusive"] or live["shared"]:
                busy += t - last
            if live["shared"] >= 2:
                together += t - last
        live[m] += step
        last = t
    spans = sorted(holds, key=lambda h: h["got"])
    bad = 0
    for i, a in enumerate(spans):
        for b in spans[i + 1:]:
            if b["got"] >= a["released"] - 1e-3:
                break
            bad += mode(a) == "exclusive" or mode(b) == "exclusive"
    return {
        "busy_s": round(busy, 1),
        "exclusive_s": round(sum(h["released"] - h["got"] for h in holds if mode(h) == "exclusive"), 1),
        "shared_s": round(sum(h["released"] - h["got"] for h in holds if mode(h) == "shared"), 1),
        "shared_together_s": round(together, 1),
        "exclusive_overlaps": bad,
        "room_wait_s": round(sum(h["got"] - h["asked"] for h in rooms), 1),
    }


def _stage_sums(rows: list[dict]) -> dict:
    """Per task, the seconds of each breakdown key summed over its verdicts: where the time went."""
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        sums = out.setdefault(r["task"], {})
        for k, v in {**{f"stage.{k}": v for k, v in (r.get("stage_seconds") or {}).items()}, **(r.get("breakdown") or {})}.items():
            if isinstance(v, (int, float)):
                sums[k] = round(sums.get(k, 0.0) + v, 2)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--candidates", type=int, default=24)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    os.environ.setdefault("KERNELFIX_CACHE", tempfile.mkdtemp(prefix="kernelfix-throughput-cache-"))
    import torch

    from kernelfix.tools.cache_dir import lock_root
    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tools.judge import Judge

    mix = _mix(args.candidates)
    judges = {t: Judge(KB / f"{t}.py", JudgeConfig()) for t in dict.fromkeys(t for t, _, _ in mix)}
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    print(f"throughput on {gpu}: {len(mix)} candidates, {args.workers} at a time, tasks {list(judges)}", flush=True)
    todo = list(enumerate(mix))
    rows: list[dict] = []
    lock = threading.Lock()
    t_start = time.time()

    def work() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i, (task, label, src) = todo.pop(0)
            t0 = time.monotonic()
            v = judges[task].evaluate(src, filename=f"c{i}.py")
            row = {"i": i, "task": task, "label": label, "category": v.category.value, "seconds": round(time.monotonic() - t0, 2),
                   "stage_seconds": v.stage_seconds, "breakdown": v.breakdown, "message": (v.message or "")[:200]}
            with lock:
                rows.append(row)
            print(f"[{len(rows):2d}/{len(mix)}] {task:<32} {label:<12} {row['category']:<34} {row['seconds']:6.1f} s", flush=True)

    threads = [threading.Thread(target=work) for _ in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t_start
    for j in judges.values():
        j.close()
    holds = []
    for log in lock_root().glob("gpu-*.log"):
        holds += [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    holds = [h for h in holds if h["got"] >= t_start]
    use = lease_use(holds)
    per = [r["seconds"] for r in rows]
    summary = {
        "label": args.label, "gpu": gpu,
        "candidates": len(rows), "workers": args.workers, "wall_s": round(wall, 1), "verdicts_per_hour": round(3600 * len(rows) / wall),
        "seconds_per_verdict": round(wall / len(rows), 2), "gpu_busy_fraction": round(use["busy_s"] / wall, 3), "gpu_holds": len(holds),
        **use, "median_latency_s": statistics.median(per), "max_latency_s": max(per),
        "categories": {c: sum(r["category"] == c for r in rows) for c in sorted({r["category"] for r in rows})},
        "breakdown_s": _stage_sums(rows),
    }
    Path(args.out).write_text(json.dumps({"summary": summary, "rows": sorted(rows, key=lambda r: r["i"]), "holds": holds}, indent=2))
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
