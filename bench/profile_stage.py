"""What the profile stage costs: ``kernelfix eval TASK CANDIDATE --profile --json`` on one-kernel candidates, with
where the stage's seconds go, and what each part of Nsight Compute's run costs on its own.

    python3 bench/profile_stage.py [--repeat 3] [--out OUT.json] [--variants] [--case NAME=TASK:CANDIDATE ...]

Each case is judged once unmeasured first, all at once (builds and baselines into their caches: "a cached
build"), then ``--repeat`` times one after another: the profile stage's seconds, the process's wall time, and the
stage's breakdown (``profile.ncu.<phase>``: seconds from ncu's start to each phase of the profiled process;
``profile.ncu_run``: ncu's whole run; ``profile.pages``: the report's two pages, printed at once).

``--variants``: ncu alone on bench/ncu_targets.py's ReLU (64M float32, as the GELU's 8192 x 8192), each command
timed end to end: the target without ncu; under ncu with nothing profiled (its start and injection); the judge's
sections and counters; the nine sections the judge collected before; the judge's with caches and clocks left
alone; then the report's pages one after the other and both at once.

Defaults: KernelBench level-1 88_MinGPTNewGelu with bench/candidates' Triton and CUDA candidates.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GELU = ROOT / "tests/kernelbench/level1/88_MinGPTNewGelu.py"
CASES = {
    "gelu_triton": (GELU, ROOT / "bench/candidates/gelu_triton.py"),
    "gelu_cuda": (GELU, ROOT / "bench/candidates/gelu_cuda.py"),
}
BEFORE = (
    "SpeedOfLight",
    "MemoryWorkloadAnalysis",
    "Occupancy",
    "LaunchStats",
    "WarpStateStats",
    "ComputeWorkloadAnalysis",
    "SourceCounters",
    "InstructionStats",
    "SchedulerStats",
)


def timed(argv: list[str], **kw) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, **kw)
    return round(time.monotonic() - t0, 2), p


def judge(name: str, task: Path, cand: Path, profile: bool = True) -> dict:
    wall, p = timed(
        [
            sys.executable,
            "-P",
            "-m",
            "kernelfix",
            "eval",
            str(task),
            str(cand),
            *(["--profile"] if profile else []),
            "--json",
        ],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        v = json.loads(p.stdout)
    except ValueError:
        return {"case": name, "wall": wall, "error": p.stderr[-1500:]}
    prof = v.get("profile") or {}
    candidate = (v.get("timings") or {}).get("candidate") or {}
    return {
        "case": name,
        "profiled": profile,
        "wall": wall,
        "category": v["category"],
        "stage_seconds": v.get("stage_seconds"),
        "candidate_ms": candidate.get("median_ms"),
        "candidate_p10_p90_ms": [candidate.get("p10_ms"), candidate.get("p90_ms")],
        "profile_s": (v.get("stage_seconds") or {}).get("profile"),
        "breakdown": {k: x for k, x in (v.get("breakdown") or {}).items() if k.startswith("profile.")},
        "findings": [f.get("kind") for f in prof.get("findings") or []],
        "profile_note": prof.get("note"),
        "warnings": [w for w in v.get("warnings") or [] if "profile" in w.lower() or "ncu" in w.lower()],
    }


def variants() -> list[dict]:
    from kernelfix.tools.profile import ncu

    path, problem = ncu.find(None)
    if path is None:
        return [{"variant": "ncu", "error": problem.message if problem else "no ncu"}]
    target = [sys.executable, str(ROOT / "bench/ncu_targets.py"), "relu"]
    tmp = Path(tempfile.mkdtemp(prefix="kf_ncu_variants_"))
    base = ["--nvtx", "--nvtx-include", f"{ncu.NVTX_RANGE}/", "--target-processes", "all", "--launch-count", "32"]

    def judge_like(report: str, sections, *extra: str) -> list[str]:
        argv = [path, "--export", str(tmp / report), "--force-overwrite", "--import-source", "yes"]
        for s in sections:
            argv += ["--section", s]
        return argv + ["--metrics", ",".join(ncu.EXTRA_METRICS), *extra, *base, *target]

    runs = {
        "target alone": target,
        "ncu, nothing profiled": [
            path,
            "--nvtx",
            "--nvtx-include",
            "nothing_here/",
            "--target-processes",
            "all",
            *target,
        ],
        "ncu, the judge's sections": judge_like("judge", ncu.SECTIONS),
        "ncu, the nine sections of before": judge_like("before", BEFORE),
        "ncu, the judge's, --cache-control none --clock-control none": judge_like(
            "nocontrol", ncu.SECTIONS, "--cache-control", "none", "--clock-control", "none"
        ),
        "ncu, SpeedOfLight alone": [path, "--section", "SpeedOfLight", *base, *target],
    }
    out = []
    for name, argv in runs.items():
        s, p = timed(argv)
        out.append(
            {
                "variant": name,
                "seconds": s,
                "rc": p.returncode,
                "tail": (p.stdout + p.stderr)[-300:] if p.returncode else "",
            }
        )
        print(f"  {name}: {s} s (rc {p.returncode})", flush=True)
    report = str(tmp / "judge.ncu-rep")
    pages = {page: ncu.import_command(path, Path(report), page) for page in ("details", "source")}
    for page, argv in pages.items():
        s, p = timed(argv)
        out.append({"variant": f"page {page}", "seconds": s, "rc": p.returncode, "bytes": len(p.stdout)})
        print(f"  page {page}: {s} s ({len(p.stdout)} bytes)", flush=True)
    t0 = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda a: subprocess.run(a, capture_output=True), pages.values()))
    both = round(time.monotonic() - t0, 2)
    out.append({"variant": "both pages at once", "seconds": both})
    print(f"  both pages at once: {both} s", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--variants", action="store_true")
    ap.add_argument("--case", action="append", default=[], metavar="NAME=TASK:CANDIDATE")
    ap.add_argument("--skip-warm", action="store_true", help="the caches are warm already")
    ap.add_argument("--warm-only", action="store_true", help="fill the caches and stop (beside another step's work)")
    ap.add_argument(
        "--control",
        action="store_true",
        help="the warm-up runs without --profile: the candidate's timing beside the profiled runs' (whose profiled run "
        "starts while the candidate is timed, and must not slow it)",
    )
    args = ap.parse_args()
    cases = {c.split("=", 1)[0]: tuple(Path(x) for x in c.split("=", 1)[1].split(":")) for c in args.case} or CASES
    result: dict = {"runs": [], "variants": []}
    if not args.skip_warm:
        t0 = time.monotonic()
        with ThreadPoolExecutor(len(cases)) as pool:
            warm = list(pool.map(lambda kv: judge(kv[0], *kv[1], profile=not args.control), cases.items()))
        print(
            f"warm-up (builds, baselines), all at once: {time.monotonic() - t0:.1f} s: "
            + "; ".join(f"{w['case']} {w.get('category')} {w.get('stage_seconds')}" for w in warm),
            flush=True,
        )
        result["warm"] = warm
        for w in warm if args.control else []:
            print(
                f"{w['case']} (no profile): candidate {w.get('candidate_ms')} ms {w.get('candidate_p10_p90_ms')}",
                flush=True,
            )
    if args.warm_only:
        return 0
    for name, (
        task,
        cand,
    ) in cases.items():  # one case's runs together: a step's time bound cuts the last case's, not every case's
        for _ in range(args.repeat):
            row = judge(name, task, cand)
            result["runs"].append(row)
            print(
                f"{name}: profile {row.get('profile_s')} s, wall {row['wall']} s, candidate {row.get('candidate_ms')} ms, {row.get('category')}, findings {row.get('findings')}, "
                f"stages {row.get('stage_seconds')}\n   {row.get('breakdown')}"
                + (f"\n   {row.get('error')}" if row.get("error") else ""),
                flush=True,
            )
            if args.out:
                args.out.write_text(json.dumps(result, indent=1))
    for name in cases:
        xs = [
            r["profile_s"]
            for r in result["runs"]
            if r["case"] == name and r.get("profiled") and r.get("profile_s") is not None
        ]
        if xs:
            print(
                f"{name}: profile stage median {statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f}, n={len(xs)})",
                flush=True,
            )
    if args.variants:
        print("ncu alone:", flush=True)
        result["variants"] = variants()
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
