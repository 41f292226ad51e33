"""Seconds from a served request to its verdict, warm: a level-1 task at its published size, a cached build.

    python3 -P bench/serve_latency.py --out OUT.json [--task T.py] [--candidate C.py] [--repeat 5] [--gap-s 3]

Runs on the GPU (docs/service.md quotes it). In one run, on one GPU:

1. ``served``: `kernelfix serve`'s app (uvicorn on 127.0.0.1, the token, one warm judge with one standby
   candidate worker, as the command's defaults) and its client: the first request (the task's reference,
   its baselines, the candidate's build: cold), then ``--repeat`` requests ``--gap-s`` apart (a trainer
   that sends the next candidate after the last verdict: the standby worker is up by then) and
   ``--repeat`` back to back (the standby worker still starting when the next candidate comes);
2. ``in_process``: ``kernelfix.Judge`` on the same task after the server is gone: first call, then
   ``--repeat`` warm calls without a standby worker and ``--repeat`` with one, ``--gap-s`` apart.

Each row: the wall time the caller saw, the verdict's stages and breakdown. The summary gives each
phase's median, and served / in-process for the same kind of call (the HTTP, the queue, the JSON).
Default task: tests/kernelbench/level1/19_ReLU.py (6 GiB in, 6 GiB out) with bench/candidates/relu_triton.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "serve-latency-bench-" + "k" * 24


def row(name: str, wall: float, v) -> dict:
    return {
        "case": name,
        "wall_s": round(wall, 3),
        "category": v.category.value,
        "message": v.message,
        "judge_s": round(sum(v.stage_seconds.values()), 3),
        "stage_seconds": v.stage_seconds,
        "breakdown": v.breakdown,
        "speedup_eager": v.speedup_eager,
        "compiled": bool(v.compile and v.compile.ok),
        "cached_build": bool(v.compile and v.compile.cached),
        "trials": [t.model_dump(mode="json") for t in v.correctness.trials] if v.correctness else None,
    }


SUMS = {"rel_error_norm", "error_vs_float64", "reference_error_vs_float64"}  # float64 sums: their last bits may move


def against(rows: list[dict], old_path: str) -> tuple[str, float | None]:
    """Each warm verdict's trials against the same verdict of another run (``--against``, the landed code's, with the
    same ``--seed``: row by row, the first warm verdict against the first): whether every field is the same (the error
    norms' sums within 1e-9 relative), and that run's paced median."""
    old = json.loads(Path(old_path).read_text())
    paced = old.get("summary", {}).get("served_warm_paced", {}).get("median_s")
    olds = [r for r in old["rows"] if r["case"].startswith("served_warm")]
    news = [r for r in rows if r["case"].startswith("served_warm")]
    if not olds or any(r.get("trials") is None for r in olds) or len(olds) != len(news):
        return f"not comparable: {len(olds)} warm verdicts with their trials in {old_path}, {len(news)} here", paced
    bad: list[str] = []
    for k, (ref, r) in enumerate(zip(olds, news)):
        if r["category"] != ref["category"] or len(r["trials"] or []) != len(ref["trials"]):
            bad.append(
                f"verdict {k}: {r['category']} with {len(r['trials'] or [])} trials, was {ref['category']} with {len(ref['trials'])}"
            )
            continue
        for a, b in zip(ref["trials"], r["trials"]):
            for key in set(a) | set(b):
                x, y = a.get(key), b.get(key)
                same = x == y or (
                    key in SUMS and x is not None and y is not None and abs(x - y) <= 1e-9 * max(abs(x), abs(y))
                )
                if not same:
                    bad.append(f"verdict {k} trial {a.get('trial')} {key}: {x} then {y}")
    return (
        f"the same as {old.get('label', old_path)}'s, verdict by verdict, in all {len(news)} warm verdicts (every trial's fields; "
        "error norms within 1e-9)"
        if not bad
        else "DIFFERENT: " + "; ".join(bad[:8])
    ), paced


def post(url: str, body: dict):
    """The client a trainer would use (httpx, kernelfix.serve.client); the standard library where httpx is missing."""
    from kernelfix.tools.verdict import Verdict

    try:
        import httpx
    except ImportError:
        import urllib.request

        req = urllib.request.Request(
            f"{url}/v1/evaluate",
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=3600) as r:
            return Verdict.model_validate_json(r.read()), "urllib"
    r = httpx.post(f"{url}/v1/evaluate", json=body, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=3600)
    r.raise_for_status()
    return Verdict.model_validate_json(r.content), "httpx"


def served(
    task: str, candidate: str, repeat: int, gap_s: float, standby: int, device: str, seed: int | None = None
) -> tuple[list[dict], str]:
    import uvicorn

    from kernelfix.cli.serve import listen
    from kernelfix.library.judge_pool import JudgePool, gpu_slots
    from kernelfix.serve.app import create_app
    from kernelfix.tools.config import JudgeConfig

    cfg = JudgeConfig(device=device, seed=seed)
    pool = JudgePool(cfg, gpus=gpu_slots(None, device)[:1], per_gpu=2, queue=8, standby=standby)
    sock = listen("127.0.0.1", 0)
    url = "http://127.0.0.1:%d" % sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(pool, token=TOKEN), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    body = {"task": task, "candidate": candidate, "task_name": "bench_task", "kind": "code"}
    rows, client = [], ""
    try:
        for name, n, gap in (
            ("served_first", 1, 0.0),
            ("served_warm_paced", repeat, gap_s),
            ("served_warm_back_to_back", repeat, 0.0),
        ):
            for _ in range(n):
                time.sleep(gap)
                t0 = time.monotonic()
                v, client = post(url, body)
                rows.append(row(name, time.monotonic() - t0, v))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        server.should_exit = True
        thread.join(600)  # the app's shutdown closes the pool: its judge and workers leave the GPU
    return rows, client


def in_process(task_path: Path, candidate: str, repeat: int, gap_s: float, device: str) -> list[dict]:
    import kernelfix

    rows = []
    with kernelfix.Judge(task_path, device=device, standby=0) as judge:
        for name, n, gap, standby in (
            ("api_first", 1, 0.0, 0),
            ("api_warm", repeat, 0.0, 0),
            ("api_warm_standby_paced", repeat, gap_s, 1),
        ):
            judge.standby = standby
            if standby:
                judge._start_ahead()  # what evaluate does after each verdict; here before the first of the series
            for _ in range(n):
                time.sleep(gap)
                t0 = time.monotonic()
                v = judge.evaluate(candidate, kind="code")
                rows.append(row(name, time.monotonic() - t0, v))
                print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default=str(ROOT / "tests" / "kernelbench" / "level1" / "19_ReLU.py"))
    ap.add_argument("--candidate", default=str(ROOT / "bench" / "candidates" / "relu_triton.py"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--gap-s", type=float, default=3.0, help="pause before each paced request (a trainer's generation step)"
    )
    ap.add_argument(
        "--standby", type=int, default=1, help="the server's standby workers per judge (kernelfix serve's default: 1)"
    )
    ap.add_argument("--skip-in-process", action="store_true")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run of the script itself (nothing timed)")
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--seed",
        type=int,
        help="the judge's seed (default: drawn per judge, as served); fixed, two runs judge the same trials",
    )
    ap.add_argument("--label", default="this run", help="what this run is (the code it ran), in its JSON")
    ap.add_argument(
        "--against", help="another run's JSON (the landed code's): its verdicts' numbers and paced median beside these"
    )
    args = ap.parse_args()
    task_path = Path(args.task)
    task, candidate = task_path.read_text(), Path(args.candidate).read_text()
    t0 = time.monotonic()
    rows, client = served(task, candidate, args.repeat, args.gap_s, args.standby, args.device, args.seed)
    if not args.skip_in_process:
        rows += in_process(task_path, candidate, args.repeat, args.gap_s, args.device)
    phases: dict[str, list[float]] = {}
    for r in rows:
        phases.setdefault(r["case"], []).append(r["wall_s"])
    summary = {
        name: {"median_s": round(statistics.median(w), 3), "min_s": min(w), "max_s": max(w), "n": len(w)}
        for name, w in phases.items()
    }
    ratios = {}
    for served_case, api_case in (
        ("served_warm_paced", "api_warm_standby_paced"),
        ("served_warm_back_to_back", "api_warm"),
    ):
        if served_case in summary and api_case in summary:
            ratios[f"{served_case} / {api_case}"] = round(
                summary[served_case]["median_s"] / summary[api_case]["median_s"], 3
            )
    import torch

    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    out = {
        "label": args.label,
        "task": task_path.name,
        "candidate": Path(args.candidate).name,
        "client": client,
        "gpu": gpu,
        "torch": torch.__version__,
        "summary": summary,
        "ratios": ratios,
        "rows": rows,
        "total_s": round(time.monotonic() - t0, 1),
    }
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(f"\n{task_path.name} + {Path(args.candidate).name} on {out['gpu']} (client: {client})")
    for name, s in summary.items():
        print(f"  {name:28s} median {s['median_s']:7.3f} s  (min {s['min_s']:.3f}, max {s['max_s']:.3f}, n={s['n']})")
    for name, r in ratios.items():
        print(f"  {name}: {r}x")
    warm = summary.get("served_warm_paced", {}).get("median_s")
    if args.against and Path(args.against).exists():
        verdicts, old_paced = against(rows, args.against)
        print(f"  verdicts: {verdicts}")
        if old_paced and warm:
            print(
                f"  paced median against {json.loads(Path(args.against).read_text()).get('label')}: {warm} s / {old_paced} s = {warm / old_paced:.3f}x"
            )
    print(
        f"goal (issue 33): a warm served verdict at most 1.5 s: {'met' if warm is not None and warm <= 1.5 else 'not met'} ({warm} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
