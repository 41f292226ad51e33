"""A cold ``kernelfix eval`` beside a naive same-process harness, measured in the same run.

    python3 bench/cold_eval.py [--device cuda|cpu] [--repeat N] [--out OUT.json] [--case NAME=TASK:CANDIDATE ...] [--old DIR]

Each measurement is a new process, end to end, as a script or an RL reward loop calls it:
``python -m kernelfix eval TASK CANDIDATE --json`` (the task never seen by that process; its
build and baseline caches on disk warm, filled by one unmeasured run of each case first: "a
cached or Triton candidate"), and ``python bench/naive_harness.py TASK CANDIDATE`` (import,
5 trials, on a GPU 100 timed calls). The two alternate, so a drift of the machine hits both.
Prints, per case, the median and range of each and their ratio, and the median of the
verdict's stage times and breakdown (where kernelfix's seconds go); OUT.json keeps every run.

``--old DIR``: the landed kernelfix installed in DIR (``bench/device_run.sh old-install``) judges the same
case in the same rounds (kernelfix, landed kernelfix, harness), and the ratio of the two is printed beside.
``--naive-bytecode DIR``: the harness once more in each round, given a bytecode cache of its own in DIR
(PYTHONPYCACHEPREFIX, PYTHONDONTWRITEBYTECODE unset): what a script gets from the cache the judge's fork
servers keep where the install has no bytecode (docs/service.md), for the fair comparison beside the goal's.
Each run's seconds are printed as it ends (a step's time bound keeps what ran).

Defaults: on a GPU, KernelBench level-1 88_MinGPTNewGelu (8192 x 8192 float32, 256 MiB in,
256 MiB out) with a Triton and a CUDA (load_inline, from the build cache) candidate; on a CPU,
examples/tasks/relu.py with its Triton candidate, run in Triton's interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPU_CASES = {
    "gelu_triton": (ROOT / "tests/kernelbench/level1/88_MinGPTNewGelu.py", ROOT / "bench/candidates/gelu_triton.py"),
    "gelu_cuda_cached": (ROOT / "tests/kernelbench/level1/88_MinGPTNewGelu.py", ROOT / "bench/candidates/gelu_cuda.py"),
}
CPU_CASES = {"relu_triton": (ROOT / "examples/tasks/relu.py", ROOT / "examples/candidates/relu_triton.py")}


def run(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
    return time.monotonic() - t0, p


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default=None)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--case", action="append", default=[], metavar="NAME=TASK:CANDIDATE")
    ap.add_argument(
        "--old", type=Path, metavar="DIR", help="the landed kernelfix, installed here: judged in the same rounds"
    )
    ap.add_argument("--naive-bytecode", type=Path, metavar="DIR", help="also the harness with a bytecode cache in DIR")
    args = ap.parse_args()
    device = args.device or ("cuda" if Path("/dev/nvidia0").exists() else "cpu")
    cases = {c.split("=", 1)[0]: tuple(Path(x) for x in c.split("=", 1)[1].split(":")) for c in args.case} or (
        GPU_CASES if device == "cuda" else CPU_CASES
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    py = sys.executable
    results = []
    import importlib.util

    torch_init = importlib.util.find_spec("torch").origin
    print(
        f"bytecode here: PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE')!r}, torch's folder writable "
        f"{os.access(os.path.dirname(torch_init), os.W_OK)}, torch's bytecode beside its source {os.path.exists(importlib.util.cache_from_source(torch_init))}",
        flush=True,
    )
    bc_env = None
    if args.naive_bytecode is not None:
        bc_env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"} | {
            "PYTHONPYCACHEPREFIX": str(args.naive_bytecode)
        }
    for name, (task, cand) in cases.items():
        kf = [py, "-P", "-m", "kernelfix", "eval", str(task), str(cand), "--device", device, "--json"]
        naive = [py, str(ROOT / "bench" / "naive_harness.py"), str(task), str(cand), "--device", device]
        old_env = None
        if (
            args.old is not None
        ):  # the landed code first on the path: its kernelfix is the one imported, the wheels as for this one
            old_env = {
                **env,
                "PYTHONPATH": os.pathsep.join(
                    [str(args.old), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
                ),
            }
        first_s, first = run(kf, env)  # fills the build, Triton and baseline caches: unmeasured
        run(naive, env)
        row = {
            "case": name,
            "device": device,
            "first_kernelfix_s": round(first_s, 2),
            "kernelfix": [],
            "naive": [],
            "verdicts": [],
        }
        if old_env is not None:
            run(kf, old_env)
            row["old"], row["old_verdicts"] = [], []
        if bc_env is not None:
            run(naive, bc_env)  # fills its cache: unmeasured
            row["naive_bytecode"] = []
        for i in range(args.repeat):
            if old_env is not None:
                s, p = run(kf, old_env)
                row["old"].append(round(s, 3))
                try:
                    row["old_verdicts"].append(json.loads(p.stdout).get("category"))
                except ValueError:
                    row["old_verdicts"].append("unparsed: " + (p.stderr or p.stdout)[-300:])
            s, p = run(kf, env)
            try:
                v = json.loads(p.stdout)
            except ValueError:
                v = {"category": "unparsed", "message": (p.stderr or p.stdout)[-500:]}
            row["kernelfix"].append(round(s, 3))
            row["verdicts"].append({k: v.get(k) for k in ("category", "message", "stage_seconds", "breakdown")})
            s, p = run(naive, env)
            row["naive"].append(round(s, 3))
            if p.returncode != 0:
                row.setdefault("naive_errors", []).append(p.stderr[-500:])
            if bc_env is not None:
                s, p = run(naive, bc_env)
                row["naive_bytecode"].append(round(s, 3))
            print(
                f"  {name} round {i}: kernelfix {row['kernelfix'][-1]} s ({row['verdicts'][-1]['category']}), harness {row['naive'][-1]} s"
                + (f", landed kernelfix {row['old'][-1]} s ({row['old_verdicts'][-1]})" if old_env is not None else "")
                + (f", harness with a bytecode cache {row['naive_bytecode'][-1]} s" if bc_env is not None else ""),
                flush=True,
            )
        kfm, nm = statistics.median(row["kernelfix"]), statistics.median(row["naive"])
        row["ratio"] = round(kfm / nm, 2)
        results.append(row)
        cats = sorted({v["category"] for v in row["verdicts"]})
        print(
            f"{name} ({device}): kernelfix eval median {kfm:.2f} s ({min(row['kernelfix']):.2f}-{max(row['kernelfix']):.2f}), "
            f"naive harness {nm:.2f} s ({min(row['naive']):.2f}-{max(row['naive']):.2f}), ratio {row['ratio']:.2f}x; "
            f"verdicts {cats}; first run {first_s:.2f} s"
        )
        if row.get("naive_bytecode"):
            bm = statistics.median(row["naive_bytecode"])
            row["ratio_naive_bytecode"] = round(kfm / bm, 2)
            print(
                f"  harness with a bytecode cache median {bm:.2f} s ({min(row['naive_bytecode']):.2f}-{max(row['naive_bytecode']):.2f}); "
                f"kernelfix against it {row['ratio_naive_bytecode']:.2f}x"
            )
        if row.get("old"):
            om = statistics.median(row["old"])
            row["ratio_old"], row["old_ratio_naive"] = round(kfm / om, 3), round(om / nm, 2)
            print(
                f"  landed kernelfix (--old) median {om:.2f} s ({min(row['old']):.2f}-{max(row['old']):.2f}), ratio to the harness "
                f"{row['old_ratio_naive']:.2f}x, verdicts {sorted(set(row['old_verdicts']))}; this one against it {row['ratio_old']:.3f}x"
            )
        for key in ("stage_seconds", "breakdown"):
            merged: dict[str, list[float]] = {}
            for v in row["verdicts"]:
                for k, x in (v.get(key) or {}).items():
                    merged.setdefault(k, []).append(x)
            med = {k: round(statistics.median(xs), 3) for k, xs in merged.items()}
            print(f"  {key}: {med}")
        if args.out:  # after each case: a step's time bound keeps the cases that ended
            args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
