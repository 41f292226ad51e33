"""`kernelfix batch` on two GPUs against one (issue 16): both GPUs used, timings the same within noise.

    python3 -P bench/batch_two_gpus.py [--work DIR] [--report DIR] [--budget SECONDS] [--device cpu]

Two jobs (ReLU and y = 2x over a 4096 x 8192 fp32 tensor, one correct Triton kernel each from a
replay file), `--workers 2`, run twice with one build cache:

1. two GPUs (CUDA_VISIBLE_DEVICES = the first two): worker slot i judges on GPU i, so the jobs
   run at the same time, one per GPU; this run pays the cold Triton and torch.compile builds;
2. one GPU (the first): both slots on it, their GPU stages queued on its lease.

It prints, per job and run, the GPU it ran on and the medians (p10-p90) of the candidate, eager
and torch.compile timings; per task, two GPUs against one with the noise it allows (half the
wider p10-p90 range of the two, at least 3% of the median); and from the lease logs, each GPU's
holds, overlaps on one GPU (must be 0) and the seconds both GPUs held a lease at once (> 0: used
together). Last line: `RESULT: ...`. The report (JSON) and the lease logs go to --report.
`--budget` bounds both runs (default 140 s; a run cut short is stopped within 30 s and reported as such).
`--device cpu` runs the same plumbing without a GPU (nothing is timed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPE = (4096, 8192)  # 128 MiB in, 128 out: memory-bound, tens of microseconds, steady timings
CPU_SHAPE = (16, 4096)  # the Triton interpreter's size, for --device cpu
TASKS = {
    "relu": ("torch.relu(x)", ROOT / "examples" / "replays" / "relu.jsonl"),  # its last reply is the correct kernel
    "scale": ("x * 2.0", ROOT / "examples" / "replays" / "scale.jsonl"),
}
NOISE_FLOOR = 0.03


def write_jobs(work: Path, shape: tuple[int, int]) -> Path:
    """The task files, one-reply replay files and the manifest; the manifest's path."""
    tasks = work / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    lines = []
    for name, (expr, replay) in TASKS.items():
        (tasks / f"{name}.py").write_text(
            "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
            f"    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        return {expr}\n\n\n"
            f"def get_inputs():\n    return [torch.randn{shape}]\n\n\ndef get_init_inputs():\n    return []\n"
        )
        (tasks / f"{name}.jsonl").write_text(replay.read_text().strip().splitlines()[-1] + "\n")
        lines.append(json.dumps({"task": f"{name}.py", "replay": f"{name}.jsonl"}))
    manifest = tasks / "manifest.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def run_batch(label: str, manifest: Path, out: Path, gpus: list[str], env: dict, device: str, timeout: float) -> dict:
    locks = Path(env.get("KERNELFIX_LOCKS") or Path(env["KERNELFIX_CACHE"]) / "locks")
    for log in locks.glob("gpu-*.log"):
        log.unlink()  # this run's holds only
    run_env = {**env, "CUDA_VISIBLE_DEVICES": ",".join(gpus)} if device == "cuda" else env
    cmd = [
        sys.executable,
        "-P",
        "-m",
        "kernelfix",
        "batch",
        str(manifest),
        "--out",
        str(out),
        "--workers",
        "2",
        "--max-turns",
        "1",
        "--trials",
        "2",
        "--device",
        device,
        "--json",
    ]
    print(
        f"=== {label}: CUDA_VISIBLE_DEVICES={run_env.get('CUDA_VISIBLE_DEVICES', '')} {' '.join(cmd[3:])}", flush=True
    )
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cut = False
    try:
        stdout, stderr = proc.communicate(timeout=max(5.0, timeout))
    except subprocess.TimeoutExpired:
        cut = True
        proc.send_signal(signal.SIGINT)  # the batch stops its workers, records where they were, writes its summary
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
    wall = time.monotonic() - t0
    print("\n".join(line for line in stderr.splitlines() if line.startswith(("[", "kernelfix batch"))), flush=True)
    print(f"    exit code {proc.returncode}, {wall:.1f} s{' (cut short by --budget)' if cut else ''}", flush=True)
    holds = {
        log.stem.removeprefix("gpu-"): [json.loads(x) for x in log.read_text().splitlines()]
        for log in sorted(locks.glob("gpu-*.log"))
    }
    return {
        "label": label,
        "gpus": gpus,
        "exit_code": proc.returncode,
        "wall_s": round(wall, 1),
        "cut_short": cut,
        "jobs": jobs(out),
        "holds": holds,
    }


def _stats(t: dict | None) -> dict | None:
    return None if t is None else {k: t[k] for k in ("median_ms", "p10_ms", "p90_ms", "runs")}


def jobs(out: Path) -> dict[str, dict]:
    """Per task: the GPU its job ran on and the timings of its last judged turn."""
    found = {}
    for res_file in sorted((out / "results").glob("*.json")):
        res = json.loads(res_file.read_text())
        task = Path(res["task"]).stem
        row = {
            "gpu": res.get("gpu"),
            "status": res["status"],
            "category": None,
            "candidate": None,
            "eager": None,
            "compiled": None,
        }
        traj_file = Path(res["session_dir"]) / "trajectory.json"
        if traj_file.is_file():
            turns = json.loads(traj_file.read_text())["turns"]
            v = turns[-1]["verdict"] if turns else None
            if v:
                t = v.get("timings") or {}
                row.update(
                    category=v["category"],
                    candidate=_stats(t.get("candidate")),
                    eager=_stats(t.get("eager")),
                    compiled=_stats(t.get("compiled")),
                )
        found[task] = row
    return found


def lease_summary(holds: dict[str, list[dict]]) -> dict:
    """Per GPU: holds, overlaps within it (an exclusive hold, timing, beside another hold on one GPU: must be 0;
    shared holds, correctness trials, may overlap each other); and the seconds when every GPU held its lease."""
    per_gpu = {}
    for gpu, hs in holds.items():
        hs = sorted(hs, key=lambda h: h["got"])
        exclusive = [h for h in hs if h.get("mode", "exclusive") == "exclusive"]
        overlaps = sum(
            1 for x in exclusive for y in hs if y is not x and y["got"] < x["released"] and x["got"] < y["released"]
        )
        per_gpu[gpu] = {
            "holds": len(hs),
            "overlaps": overlaps,
            "held_s": round(sum(h["released"] - h["got"] for h in hs), 1),
            "pids": len({h["pid"] for h in hs}),
        }
    together = 0.0
    if len(holds) >= 2:
        a, b = list(holds.values())[:2]
        together = sum(max(0.0, min(x["released"], y["released"]) - max(x["got"], y["got"])) for x in a for y in b)
    return {"per_gpu": per_gpu, "both_held_s": round(together, 1)}


def compare(two: dict, one: dict) -> list[dict]:
    """Per task and timing: two GPUs against one, and whether the difference is within the noise."""
    rows = []
    for task in TASKS:
        a, b = two["jobs"].get(task, {}), one["jobs"].get(task, {})
        for what in ("candidate", "eager", "compiled"):
            x, y = a.get(what), b.get(what)
            if not x or not y:
                rows.append(
                    {"task": task, "timing": what, "two_gpus_ms": None, "one_gpu_ms": None, "within_noise": None}
                )
                continue
            spread = max(x["p90_ms"] - x["p10_ms"], y["p90_ms"] - y["p10_ms"]) / 2
            allowed = max(spread, NOISE_FLOOR * y["median_ms"])
            diff = x["median_ms"] - y["median_ms"]
            rows.append(
                {
                    "task": task,
                    "timing": what,
                    "two_gpus_ms": x["median_ms"],
                    "one_gpu_ms": y["median_ms"],
                    "ratio": round(x["median_ms"] / y["median_ms"], 4),
                    "allowed_ms": round(allowed, 5),
                    "within_noise": abs(diff) <= allowed,
                }
            )
    return rows


def fmt(t: dict | None) -> str:
    return "-" if not t else f"{t['median_ms']:.4f} ({t['p10_ms']:.4f}-{t['p90_ms']:.4f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--work",
        default="/tmp/kf2gpu",
        help="sessions and the build cache (judge work dirs hold the inputs: hundreds of MB)",
    )
    ap.add_argument("--report", help="where the JSON report and lease logs go (default: WORK/report)")
    ap.add_argument(
        "--budget",
        type=float,
        default=140.0,
        help="seconds for both runs together (a run cut short takes up to 30 s more to stop)",
    )
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = ap.parse_args()
    t0 = time.monotonic()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    report = Path(args.report) if args.report else work / "report"
    report.mkdir(parents=True, exist_ok=True)
    if args.device == "cuda":
        import torch

        visible = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
        gpus = (visible or [str(i) for i in range(torch.cuda.device_count())])[:2]
        if len(gpus) < 2:
            print(f"needs two GPUs; this machine shows {len(gpus)}")
            return 2
        print(
            f"GPUs {gpus[0]} and {gpus[1]} of {torch.cuda.device_count()}", flush=True
        )  # no CUDA context here: the judges' only
    else:
        gpus = ["0", "1"]  # only named: a CPU batch judges without them
    env = {
        **os.environ,
        "KERNELFIX_CACHE": str(work / "cache"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONUNBUFFERED": "1",
    }
    manifest = write_jobs(work, SHAPE if args.device == "cuda" else CPU_SHAPE)

    def left() -> float:
        return args.budget - (time.monotonic() - t0)

    two = run_batch("two GPUs", manifest, work / "two", gpus, env, args.device, left() * 0.55)
    one = run_batch("one GPU", manifest, work / "one", gpus[:1], env, args.device, left() - 5)
    for run in (two, one):
        for gpu, hs in run["holds"].items():
            (report / f"{'two' if run is two else 'one'}-gpu-{gpu}.log").write_text(
                "".join(json.dumps(h) + "\n" for h in hs)
            )
        run["lease"] = lease_summary(run.pop("holds"))

    print(
        "\n| run | task | GPU | verdict | candidate ms (p10-p90) | eager ms | torch.compile ms |\n| --- | --- | --- | --- | --- | --- | --- |"
    )
    for run in (two, one):
        for task, j in run["jobs"].items():
            print(
                f"| {run['label']} | {task} | {j['gpu']} | {j['category']} | {fmt(j['candidate'])} | {fmt(j['eager'])} | {fmt(j['compiled'])} |"
            )
    rows = compare(two, one)
    print(
        "\n| task | timing | two GPUs ms | one GPU ms | ratio | allowed ms | within noise |\n| --- | --- | --- | --- | --- | --- | --- |"
    )
    for r in rows:
        if r["within_noise"] is None:
            print(f"| {r['task']} | {r['timing']} | - | - | - | - | not timed |")
        else:
            print(
                f"| {r['task']} | {r['timing']} | {r['two_gpus_ms']:.4f} | {r['one_gpu_ms']:.4f} | {r['ratio']:.3f} | {r['allowed_ms']:.4f} | {'yes' if r['within_noise'] else 'NO'} |"
            )
    for run in (two, one):
        lease = run["lease"]
        per = ", ".join(
            f"GPU {g}: {s['holds']} holds from {s['pids']} judges, {s['overlaps']} overlapping, held {s['held_s']} s"
            for g, s in lease["per_gpu"].items()
        )
        print(f"lease, {run['label']}: {per or 'no holds'}; both GPUs held at once {lease['both_held_s']} s")

    used = {j["gpu"] for j in two["jobs"].values()}
    both_used = len(used & set(gpus)) == 2 and len(two["lease"]["per_gpu"]) == 2 and two["lease"]["both_held_s"] > 0
    timed = [r for r in rows if r["within_noise"] is not None]
    no_overlap = all(s["overlaps"] == 0 for run in (two, one) for s in run["lease"]["per_gpu"].values())
    result = {
        "two_gpus": two,
        "one_gpu": one,
        "comparison": rows,
        "both_gpus_used": both_used,
        "no_overlap_on_a_gpu": no_overlap,
        "within_noise": f"{sum(r['within_noise'] for r in timed)}/{len(timed)}",
        "wall_s": round(time.monotonic() - t0, 1),
    }
    (report / "batch_two_gpus.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"RESULT: both GPUs used at once: {'yes' if both_used else 'no'} (jobs on GPUs {sorted(g for g in used if g)}); "
        f"no two GPU stages on one GPU at once: {'yes' if no_overlap else 'no'}; timings within noise: {result['within_noise']}; "
        f"{result['wall_s']} s"
    )
    ok = (
        both_used
        and no_overlap
        and timed
        and all(r["within_noise"] for r in timed)
        and not (two["cut_short"] or one["cut_short"])
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
