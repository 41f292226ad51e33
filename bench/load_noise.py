"""A kernel's timing judged alone and judged while other judges run their correctness trials beside it.

    python3 bench/load_noise.py --out OUT.json [--rounds 3] [--load 4] [--target TASK:CANDIDATE]

The GPU's lease holds timing exclusive and correctness shared (docs/judge.md, "Exclusive timing,
shared correctness"): a timed run waits for the shared holders to drain and no new one starts until
it ends. This bench measures what that buys. One judge times the target candidate (default:
KernelBench level-1 88_MinGPTNewGelu, 8192 x 8192 float32, with bench/candidates/gelu_triton.py):

1. alone: ``--rounds`` evaluations, one after another;
2. under load: ``--rounds`` more while ``--load`` threads judge other candidates through compile,
   correctness and legality in a loop (23_Softmax with its 12 GiB trials, the Triton matmul of
   1_Square_matrix_multiplication_, a wrong GELU), each with a judge of its own, all sharing the lease;
3. alone again: ``--rounds`` more (a drift of the machine shows as a gap between 1 and 3).

Each evaluation gives the candidate's median and p10/p90 over its timed calls. Printed: the
median of the medians alone and under load, their relative difference, the noise alone (the range
of the alone medians, and the median p10-p90 spread within a run), and whether the loaded median lies
within that noise; the load's own count (evaluations and shared holds during phase 2) shows it ran;
and from the lease's hold log, the exclusive holds that overlapped any other hold (must be 0). The
last line is ``RESULT: ...``. OUT.json keeps every row and the holds.
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
KB = Path(os.environ.get("KERNELFIX_BENCH_TASKS", ROOT / "tests" / "kernelbench" / "level1"))
CANDS = ROOT / "bench" / "candidates"
LOAD = [  # (task, candidate source): correctness work of several sizes, none of it timed
    ("23_Softmax", (CANDS / "softmax_triton.py").read_text()),
    ("1_Square_matrix_multiplication_", (CANDS / "matmul_triton.py").read_text()),
    (
        "88_MinGPTNewGelu",
        (CANDS / "gelu_triton.py").read_text().replace("0.5 * x", "0.6 * x"),
    ),  # wrong: stops at trial 0
]


def _overlaps(holds: list[dict]) -> list[tuple[dict, dict]]:
    """Exclusive holds beside any other hold (kept here so that the bench reads an older judge's log too)."""
    out = []
    spans = sorted((h for h in holds if h.get("mode") != "room"), key=lambda h: h["got"])
    for i, a in enumerate(spans):
        for b in spans[i + 1 :]:
            if b["got"] >= a["released"] - 1e-3:
                break
            if a.get("mode", "exclusive") == "exclusive" or b.get("mode", "exclusive") == "exclusive":
                out.append((a, b))
    return out


def correctness_only(judge, source: str):
    """A verdict without the benchmark stage: compile, correctness, legality (the load holds the GPU shared only)."""
    ev = judge.start(source)
    for stage in (judge.compile, judge.correctness, judge.legality):
        ev = stage(ev)
    return judge.finish(ev)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--load", type=int, default=4)
    ap.add_argument(
        "--target", default=f"{KB / '88_MinGPTNewGelu.py'}:{CANDS / 'gelu_triton.py'}", metavar="TASK:CANDIDATE"
    )
    args = ap.parse_args()
    os.environ.setdefault("KERNELFIX_CACHE", tempfile.mkdtemp(prefix="kernelfix-load-noise-cache-"))
    from kernelfix.base.cache_dir import lock_root
    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tools.judge import Judge

    task_path, cand_path = (Path(x) for x in args.target.split(":"))
    source = cand_path.read_text()
    target = Judge(task_path, JudgeConfig())
    loads = {t: Judge(KB / f"{t}.py", JudgeConfig()) for t, _ in LOAD}
    t_start = time.time()
    first = target.evaluate(source)  # the baselines, the Triton build: measured once, outside the rounds
    print(
        f"target {task_path.stem} / {cand_path.name}: first verdict {first.category.value} in {time.time() - t_start:.1f} s",
        flush=True,
    )
    for task, src in LOAD:
        v = correctness_only(loads[task], src)  # each load task's reference and build, before the rounds
        print(f"load {task}: {v.category.value}", flush=True)

    rows: list[dict] = []

    def judge_target(phase: str) -> None:
        t0 = time.time()
        v = target.evaluate(source)
        c = v.timings.candidate if v.timings is not None else None
        row = {
            "phase": phase,
            "category": v.category.value,
            "at": t0,
            "seconds": round(time.time() - t0, 2),
            "median_ms": c.median_ms if c else None,
            "p10_ms": c.p10_ms if c else None,
            "p90_ms": c.p90_ms if c else None,
            "wait_s": v.breakdown.get("benchmark.lease_wait"),
            "exclusive_s": v.breakdown.get("benchmark.exclusive"),
        }
        rows.append(row)
        print(
            f"{phase:>6}: {row['category']:<28} median {row['median_ms']} ms (p10 {row['p10_ms']}, p90 {row['p90_ms']}), "
            f"waited {row['wait_s']} s for the GPU alone, {row['seconds']} s in all",
            flush=True,
        )

    for _ in range(args.rounds):
        judge_target("alone")
    stop = threading.Event()
    done = {"evals": 0}
    lock = threading.Lock()

    def load_loop(k: int) -> None:
        task, src = LOAD[k % len(LOAD)]
        j = loads[task]
        while not stop.is_set():
            correctness_only(j, src)
            with lock:
                done["evals"] += 1

    threads = [threading.Thread(target=load_loop, args=(k,), daemon=True) for k in range(args.load)]
    load_from = time.time()
    for t in threads:
        t.start()
    time.sleep(5.0)  # the load's first trials are under way
    for _ in range(args.rounds):
        judge_target("load")
    stop.set()
    for t in threads:
        t.join(600)
    load_to = time.time()
    for _ in range(args.rounds):
        judge_target("alone")
    target.close()
    for j in loads.values():
        j.close()

    holds = []
    for log in lock_root().glob("gpu-*.log"):
        holds += [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    holds = [h for h in holds if h["got"] >= t_start]
    bad = _overlaps(holds)
    shared_in_load = [h for h in holds if h.get("mode") == "shared" and load_from <= h["got"] <= load_to]
    alone = [r["median_ms"] for r in rows if r["phase"] == "alone" and r["median_ms"]]
    loaded = [r["median_ms"] for r in rows if r["phase"] == "load" and r["median_ms"]]
    spreads = [r["p90_ms"] - r["p10_ms"] for r in rows if r["phase"] == "alone" and r["p90_ms"] is not None]
    m_alone, m_load = statistics.median(alone), statistics.median(loaded)
    noise = max(max(alone) - min(alone), statistics.median(spreads))
    within = abs(m_load - m_alone) <= noise
    summary = {
        "target": f"{task_path.stem}:{cand_path.name}",
        "rounds": args.rounds,
        "load_threads": args.load,
        "median_alone_ms": round(m_alone, 5),
        "median_under_load_ms": round(m_load, 5),
        "difference": round((m_load - m_alone) / m_alone, 4),
        "alone_range_ms": round(max(alone) - min(alone), 5),
        "alone_p10_p90_ms": round(statistics.median(spreads), 5),
        "noise_ms": round(noise, 5),
        "within_noise": within,
        "load_evaluations": done["evals"],
        "shared_holds_during_load": len(shared_in_load),
        "exclusive_overlaps": len(bad),
        "holds": len(holds),
    }
    Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows, "holds": holds}, indent=2))
    print(json.dumps(summary, indent=2))
    print(
        f"RESULT: median {m_alone:.4g} ms alone, {m_load:.4g} ms under load ({100 * summary['difference']:+.2f}%), noise alone "
        f"{noise:.3g} ms: {'within' if within else 'OUTSIDE'} the noise; load {done['evals']} evaluations, "
        f"{len(shared_in_load)} shared holds; exclusive holds beside another: {len(bad)}"
    )
    return 0 if within and not bad else 1


if __name__ == "__main__":
    raise SystemExit(main())
