"""A batch while a process outside kernelfix holds the GPU: the fault is retried, never a model turn (issue 23).

    python3 bench/fault_batch.py [--device cuda|cpu] [--hold-s 60] [--leave-gib 1] [--elems N]
                                 [--workers 2] [--work DIR] [--out OUT.json]

1. The fault: a helper process (``python -c``, plainly not kernelfix; it says so on its first line)
   takes the GPU's free memory with torch, all but ``--leave-gib`` GiB, and holds it ``--hold-s``
   seconds, then exits. GPU only: with ``--device cpu`` nothing is held, and the rest runs the same.
2. Meanwhile ``kernelfix batch`` runs over a small task directory made in WORK/tasks (ReLU and
   y = 2x as in examples/tasks, ``--elems`` float32 elements per input: on a GPU 2**28, 1 GiB, more
   than the fault leaves free) with the replay model ``replay:WORK/replays`` (examples/replays/relu.jsonl:
   a missing import, a leaky ReLU, then a right one; scale.jsonl: one right turn). A session that
   stopped on a persisting fault (status unfinished) is resumed by running the same batch again once
   the fault is gone, as a user would.
3. ``kernelfix export`` of the batch, both as chat-jsonl (SFT: --keep-incorrect, every session) and
   rl-jsonl (every judged candidate).

Checks, printed and kept in OUT.json: no trajectory turn (WORK/out/sessions/*/trajectory.json) and
no exported record carries a verdict category ``infra:*``, and no exported message holds one; the
judge's retries, read from each turn's ``verdict.infra_retries`` (the machine faults met before the
verdict, each judged again: ``Verdict.infra_retries``, tools/verdict.py) and from the sessions'
logs (the "could not judge ... judging it again" notices). Also the batch's summary and each run's
exit code and wall time, and the GPU memory (nvidia-smi every 0.2 s) while it ran. Exit 0 when
no infra verdict reached a trajectory or the export, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from many_judges import GpuSampler  # noqa: E402  (bench/many_judges.py)

INFRA = re.compile(r"\binfra:[a-z_]+")
RETRY_NOTICE = re.compile(r"could not judge|judging (it )?again|machine fault|retr(y|ied)", re.I)

TASKS = {
    "relu": '''"""ReLU (as examples/tasks/relu.py), {rows} x {cols} float32: bench/fault_batch.py."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a ReLU activation."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn({rows}, {cols})]


def get_init_inputs():
    return []
''',
    "scale": '''"""y = 2x (as examples/tasks/scale.py), {rows} x {cols} float32: bench/fault_batch.py."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2.0


def get_inputs():
    return [torch.randn({rows}, {cols})]


def get_init_inputs():
    return []
''',
}

INJECTOR = r"""
import os, sys, time
import torch
leave, hold = float(sys.argv[1]) * 2**30, float(sys.argv[2])
free, total = torch.cuda.mem_get_info()
want, held, chunks, chunk = max(0, int(free - leave)), 0, [], 256 << 20
while held < want:
    n = min(chunk, want - held)
    try:
        chunks.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
    except RuntimeError:
        if chunk <= 16 << 20:
            break
        chunk //= 2
        continue
    held += n
torch.cuda.synchronize()
free_now, _ = torch.cuda.mem_get_info()
print(f"FAULT INJECTOR (a process outside kernelfix, pid {os.getpid()}): holding {held / 2**30:.1f} GiB of the GPU's "
      f"{total / 2**30:.1f}, {free_now / 2**30:.2f} GiB left free, for {hold:.0f} s", flush=True)
print("READY", flush=True)
time.sleep(hold)
print(f"FAULT INJECTOR: released {held / 2**30:.1f} GiB after {hold:.0f} s", flush=True)
"""


def stream(p: subprocess.Popen, prefix: str, sink: list[str]) -> threading.Thread:
    def pump() -> None:
        for line in p.stderr:  # type: ignore[union-attr]
            sink.append(line.rstrip("\n"))
            print(f"{prefix}{line.rstrip()}", flush=True)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    return t


def make_work(work: Path, elems: int) -> tuple[Path, Path]:
    tasks, replays = work / "tasks", work / "replays"
    for d in (tasks, replays):
        d.mkdir(parents=True, exist_ok=True)
    cols = min(elems, 1 << 22)
    rows = max(1, elems // cols)
    for name, text in TASKS.items():
        (tasks / f"{name}.py").write_text(text.format(rows=rows, cols=cols))
        shutil.copy(ROOT / "examples" / "replays" / f"{name}.jsonl", replays / f"{name}.jsonl")
    print(
        f"tasks: {', '.join(TASKS)} at {rows} x {cols} float32 ({rows * cols * 4 / 2**30:.2f} GiB per tensor) in {tasks}; "
        f"replays from examples/replays",
        flush=True,
    )
    return tasks, replays


def run_batch(argv: list[str], env: dict, label: str) -> dict:
    print(f"=== {label}: $ {' '.join(argv)}", flush=True)
    t0 = time.monotonic()
    lines: list[str] = []
    try:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    except OSError as e:
        return {"label": label, "rc": None, "error": repr(e), "wall_s": 0.0}
    pump = stream(p, f"[{label}] ", lines)
    stdout = p.stdout.read()  # type: ignore[union-attr]
    p.wait()
    pump.join(timeout=10)
    wall = time.monotonic() - t0
    try:
        summary = json.loads(stdout)
    except ValueError:
        summary = None
    print(f"=== {label}: exit {p.returncode} after {wall:.1f} s", flush=True)
    return {
        "label": label,
        "rc": p.returncode,
        "wall_s": round(wall, 2),
        "summary": summary,
        "retry_lines": [ln for ln in lines if RETRY_NOTICE.search(ln)],
        "stderr_tail": lines[-40:],
    }


def session_facts(out: Path) -> dict:
    facts = {"sessions": [], "infra_turns": [], "retries": [], "log_notices": []}
    for traj_path in sorted((out / "sessions").glob("*/trajectory.json")):
        name = traj_path.parent.name
        try:
            traj = json.loads(traj_path.read_text())
        except (OSError, ValueError) as e:
            facts["sessions"].append({"session": name, "error": repr(e)})
            continue
        turns = traj.get("turns") or []
        for t in turns:
            v = t.get("verdict") or {}
            cat = str(v.get("category") or "")
            if cat.startswith("infra"):
                facts["infra_turns"].append(
                    {
                        "session": name,
                        "turn": t.get("index"),
                        "category": cat,
                        "message": (v.get("message") or "")[:200],
                    }
                )
            for f in v.get("infra_retries") or []:  # Verdict.infra_retries: the faults met, each judged again
                facts["retries"].append({"session": name, "turn": t.get("index"), "fault": str(f)[:300]})
            fb = json.dumps(t.get("feedback") or "")
            if INFRA.search(fb):
                facts["infra_turns"].append(
                    {
                        "session": name,
                        "turn": t.get("index"),
                        "category": "(in the turn's feedback)",
                        "message": INFRA.search(fb).group(0),
                    }
                )
        facts["sessions"].append(
            {
                "session": name,
                "turns": [(t.get("index"), (t.get("verdict") or {}).get("category")) for t in turns],
                "outcome": traj.get("outcome"),
            }
        )
    for log in sorted((out / "logs").glob("*.log")):
        for ln in log.read_text(errors="replace").splitlines():
            if RETRY_NOTICE.search(ln):
                facts["log_notices"].append(f"{log.stem}: {ln.strip()[:300]}")
    facts["results"] = {}
    for r in sorted((out / "results").glob("*.json")):
        try:
            d = json.loads(r.read_text())
            facts["results"][r.stem] = {"status": d.get("status"), "error": d.get("error")}
        except (OSError, ValueError):
            pass
    return facts


def check_export(path: Path) -> dict:
    found = {"records": 0, "infra": []}
    if not path.exists():
        found["missing"] = True
        return found
    for i, line in enumerate(path.read_text().splitlines()):
        if not line.strip():
            continue
        found["records"] += 1
        rec = json.loads(line)
        meta = rec.get("metadata") or {}
        cats = [str(t.get("category")) for t in meta.get("turns") or []] + [
            str(meta.get("category") or ""),
            str(meta.get("final_category") or ""),
        ]
        for c in cats:
            if c.startswith("infra"):
                found["infra"].append(f"record {i}: verdict category {c}")
        text = json.dumps({k: v for k, v in rec.items() if k != "metadata"})
        for m in set(INFRA.findall(text)):
            found["infra"].append(f"record {i}: message text holds {m}")
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default=None)
    ap.add_argument("--hold-s", type=float, default=60.0, help="how long the fault holds the GPU (default 60)")
    ap.add_argument("--leave-gib", type=float, default=1.0, help="GPU memory the fault leaves free (default 1)")
    ap.add_argument(
        "--elems",
        type=int,
        default=None,
        help="float32 elements per task input (default: 2**28 on a GPU, 65536 on a CPU)",
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--max-runs", type=int, default=3, help="batch runs at most (the later ones resume sessions a fault stopped)"
    )
    ap.add_argument("--work", type=Path, default=Path("/tmp/kf_fault_batch"))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    device = args.device or ("cuda" if Path("/dev/nvidia0").exists() else "cpu")
    elems = args.elems or ((1 << 28) if device == "cuda" else 1 << 16)
    py = sys.executable
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    shutil.rmtree(args.work, ignore_errors=True)
    tasks, replays = make_work(args.work, elems)
    out = args.work / "out"
    report: dict = {"device": device, "hold_s": args.hold_s, "leave_gib": args.leave_gib, "elems": elems, "runs": []}

    sampler = GpuSampler(0.2)
    sampler.start()
    injector = None
    if device == "cuda":
        injector = subprocess.Popen(
            [py, "-c", INJECTOR, str(args.leave_gib), str(args.hold_s)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd="/",
            env=env,
        )
        inj_lines: list[str] = []
        ready = threading.Event()

        def watch() -> None:
            for line in injector.stdout:  # type: ignore[union-attr]
                line = line.rstrip()
                inj_lines.append(line)
                if line == "READY":
                    ready.set()
                else:
                    print(f"[fault] {line}", flush=True)
            ready.set()

        threading.Thread(target=watch, daemon=True).start()
        ready.wait(timeout=180)
        if injector.poll() is not None:
            print(
                f"the fault injector ended early (exit {injector.returncode}): the batch runs without a fault",
                flush=True,
            )
        report["injector"] = inj_lines
    else:
        print(
            "device cpu: the fault (GPU memory held by a process outside kernelfix) is GPU-only and is skipped; "
            "the batch, the export and the checks run as they would on a GPU",
            flush=True,
        )
        report["injector"] = "skipped: GPU-only"
    t_fault = time.monotonic()

    batch = [
        py,
        "-P",
        "-m",
        "kernelfix",
        "batch",
        str(tasks),
        "--model",
        f"replay:{replays}",
        "--out",
        str(out),
        "--workers",
        str(args.workers),
        "--device",
        device,
        "--json",
    ]
    for k in range(args.max_runs):
        r = run_batch(batch, env, f"batch run {k + 1}" + (" (resume)" if k else ""))
        r["fault_active"] = injector is not None and injector.poll() is None
        report["runs"].append(r)
        s = r.get("summary") or {}
        unfinished = s.get("unfinished") or 0
        if r["rc"] == 0 or not unfinished:
            break
        if injector is not None and injector.poll() is None:
            left = max(0.0, args.hold_s - (time.monotonic() - t_fault))
            print(
                f"{unfinished} session(s) unfinished while the fault holds: waiting {left:.0f} s for it to end, then resuming",
                flush=True,
            )
            injector.wait(timeout=left + 60)
    if injector is not None and injector.poll() is None:
        injector.terminate()  # the batch is done: the fault need not outlive it
        injector.wait(timeout=30)
    sampler.stop()

    exports = {}
    for fmt, extra in (
        ("chat-jsonl", ["--min-speedup-gain", "0", "--per-task", "0", "--keep-incorrect"]),
        ("rl-jsonl", []),
    ):
        path = args.work / f"export_{fmt}.jsonl"
        argv = [py, "-P", "-m", "kernelfix", "export", str(out), "--out", str(path), "--format", fmt, *extra]
        p = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env)
        print(f"=== export {fmt}: exit {p.returncode}: {(p.stderr or p.stdout).strip().splitlines()[-1:]}", flush=True)
        exports[fmt] = {"rc": p.returncode, "tail": (p.stderr + p.stdout)[-1500:], **check_export(path)}
    report["exports"] = exports
    facts = session_facts(out)
    report["sessions"] = facts
    peak = sampler.peak()
    report["peak_gpu"] = peak

    print("=== sessions", flush=True)
    for s in facts["sessions"]:
        print(
            f"  {s['session']}: turns {s.get('turns')}; outcome {((s.get('outcome') or {}).get('stop_reason'))}",
            flush=True,
        )
    for name, r in facts["results"].items():
        if r.get("status") != "finished":
            print(f"  {name}: status {r.get('status')}: {r.get('error')}", flush=True)
    print(f"judge retries (verdict.infra_retries over every turn): {len(facts['retries'])}", flush=True)
    for f in facts["retries"]:
        print(f"  {f['session']} turn {f['turn']}: {f['fault']}", flush=True)
    if facts["log_notices"]:
        print(f"retry notices in the sessions' logs: {len(facts['log_notices'])}", flush=True)
        for ln in facts["log_notices"][:20]:
            print(f"  {ln}", flush=True)
    for r in report["runs"]:
        s = r.get("summary") or {}
        print(
            f"{r['label']}: exit {r['rc']}, {r['wall_s']} s, fault still active at its end: {r['fault_active']}; "
            f"finished {s.get('finished')}, unfinished {s.get('unfinished')}, failed {s.get('failed')}, correct {s.get('correct')}, "
            f"final categories {s.get('final_categories')}",
            flush=True,
        )
    infra_export = [x for e in exports.values() for x in e["infra"]]
    ok = not facts["infra_turns"] and not infra_export and all(e["rc"] in (0, 1) for e in exports.values())
    print(f"infra turns in trajectories: {len(facts['infra_turns'])} {facts['infra_turns'] or ''}", flush=True)
    print(
        f"infra in the export: {len(infra_export)} {infra_export or ''} "
        f"(records: chat-jsonl {exports['chat-jsonl']['records']}, rl-jsonl {exports['rl-jsonl']['records']})",
        flush=True,
    )
    print(
        (
            "peak GPU memory "
            + (
                f"{peak['used_mib']:.0f} of {peak['total_mib']:.0f} MiB"
                if peak
                else f"unknown ({sampler.error or 'no samples'})"
            )
        ),
        flush=True,
    )
    print(
        f"RESULT: {'PASS' if ok else 'FAIL'}: {'no' if ok else 'an'} infra verdict reached a trajectory or the export; "
        f"{len(facts['retries'])} judge retries recorded",
        flush=True,
    )
    report["pass"] = ok
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, default=str))
        print(f"wrote {args.out}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
