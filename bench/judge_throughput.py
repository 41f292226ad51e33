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

Where the wall time goes (issue 33): the stages' seconds per task (``breakdown_s``), the
sanitizer's share (its stage seconds and its holds of the GPU), the seconds stages waited for
room for their memory, by the waiting stage and by the stages that held room meanwhile
(``room_waits``), and, from ``nvidia-smi`` sampled every 0.1 s, the GPU memory in use while
each kind of stage held room alone, beside what it declared (``memory``: the evidence a tighter
declaration needs; tools/gpu/room.py).

``--sanitize off`` judges as a reward loop does (``kernelfix.rewards``: compute-sanitizer's cause
of a wrong kernel is never read by a reward; ``on``/``config``: as ``kernelfix eval``). ``--rounds 2``
adds a steady-state figure: the same judges (references up, baselines measured and cached) judge
the mix again, every Triton kernel renamed so it is a new build, as a training loop's judge pool
sees after its first minutes. The first round is the cold figure, comparable with earlier runs;
``summary`` is always round 1, ``steady`` rounds 2 on, ``total`` every round over all the wall time from
the judges' creation (start-up included: the amortized figure), with ``one_hour_projection``: the cold
round once, then the steady rate for the rest of an hour.
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
KB = Path(
    os.environ.get("KERNELFIX_BENCH_TASKS", ROOT / "tests" / "kernelbench" / "level1")
)  # small copies for a dry run on CPU
CANDS = ROOT / "bench" / "candidates"


def _mix(n: int) -> list[tuple[str, str, str]]:
    """(task, label, source): n candidates, mixed."""
    gelu = (CANDS / "gelu_triton.py").read_text()
    softmax = (CANDS / "softmax_triton.py").read_text()
    matmul = (CANDS / "matmul_triton.py").read_text()
    out: list[tuple[str, str, str]] = []
    kinds = [
        (
            "88_MinGPTNewGelu",
            "gelu ok",
            lambda i: gelu.replace("4096", str(512 << (i % 4))),
        ),  # block sizes: tl.arange wants powers of 2
        ("23_Softmax", "softmax ok", lambda i: softmax.replace("BLOCK=2048", f"BLOCK={1024 << (i % 3)}")),
        ("88_MinGPTNewGelu", "gelu wrong", lambda i: gelu.replace("0.5 * x", f"0.{6 + i % 3} * x")),
        ("1_Square_matrix_multiplication_", "matmul ok", lambda i: matmul.replace("BK=32", f"BK={16 * (1 + i % 2)}")),
        (
            "88_MinGPTNewGelu",
            "gelu torch",
            lambda i: gelu.replace("return y", "return torch.tanh(y) if False else y * 1.0"),
        ),
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
        for b in spans[i + 1 :]:
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


def _kind(what: str) -> str:
    """A hold's or room's stage, without its task: "23_Softmax correctness" -> "correctness"."""
    return what.split(" ", 1)[1] if " " in what else what


def room_waits(holds: list[dict]) -> dict:
    """Who waited for room, and for whom: the seconds stages waited, by the waiting stage (task and stage), and
    the seconds each holder of room was held while a stage waited (a wait beside two holders counts for both)."""
    rooms = [h for h in holds if h.get("mode") == "room"]
    waited: dict[str, float] = {}
    behind: dict[str, float] = {}
    for r in rooms:
        if r["got"] - r["asked"] <= 1e-3:
            continue
        waited[r["what"]] = waited.get(r["what"], 0.0) + r["got"] - r["asked"]
        for o in rooms:
            if o is r:
                continue
            overlap = min(r["got"], o["released"]) - max(r["asked"], o["got"])
            if overlap > 1e-3:
                behind[o["what"]] = behind.get(o["what"], 0.0) + overlap
    top = lambda d: {k: round(v, 1) for k, v in sorted(d.items(), key=lambda kv: -kv[1])}  # noqa: E731
    return {"by_waiting_stage": top(waited), "behind_holder": top(behind)}


def sanitizer_share(rows: list[dict], holds: list[dict], wall_s: float) -> dict:
    """The sanitizer stage's seconds (summed over verdicts), the verdicts that ran it, and its holds of the GPU's lock."""
    stage = sum((r.get("stage_seconds") or {}).get("sanitize", 0.0) for r in rows)
    held = sum(
        h["released"] - h["got"] for h in holds if h.get("mode") != "room" and _kind(h["what"]).startswith("sanitize")
    )
    return {
        "verdicts": sum("sanitize" in (r.get("stage_seconds") or {}) for r in rows),
        "stage_s": round(stage, 1),
        "gpu_held_s": round(held, 1),
        "gpu_held_fraction_of_wall": round(held / wall_s, 3) if wall_s else None,
    }


def memory_by_stage(holds: list[dict], samples: list[tuple[float, float]]) -> dict:
    """Per stage with room (task and stage): what it declared and the GPU memory in use (nvidia-smi, MiB, the whole
    device: every process's contexts and what idle judges keep included, so an upper bound) while it held room with no
    other stage beside it. ``samples``: (unix time, MiB used)."""
    rooms = [h for h in holds if h.get("mode") == "room"]
    out: dict[str, dict] = {}
    for r in rooms:
        alone = [(max(r["got"], 0.0), r["released"])]
        for o in rooms:  # cut out the spans another stage held room beside it
            if o is r or o["released"] <= r["got"] or o["got"] >= r["released"]:
                continue
            alone = [
                piece
                for a, b in alone
                for piece in ((a, min(b, o["got"])), (max(a, o["released"]), b))
                if piece[1] > piece[0]
            ]
        used = [mib for t, mib in samples if any(a <= t < b for a, b in alone)]
        row = out.setdefault(
            r["what"],
            {
                "declared_gib": round((r.get("need_bytes") or 0) / 2**30, 2),
                "stages": 0,
                "alone_samples": 0,
                "max_used_alone_gib": None,
            },
        )
        row["stages"] += 1
        row["alone_samples"] += len(used)
        if used:
            peak = round(max(used) / 1024, 2)
            row["max_used_alone_gib"] = max(row["max_used_alone_gib"] or 0.0, peak)
    return out


class MemorySampler:
    """``nvidia-smi`` reporting the GPU's memory in use every 0.1 s, read in a thread: no CUDA context in this process."""

    def __init__(self) -> None:
        import shutil
        import subprocess

        self.samples: list[tuple[float, float]] = []
        self._proc = None
        if shutil.which("nvidia-smi") is None:
            return
        self._proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0", "-lms", "100"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                self.samples.append((time.time(), float(line.strip())))
            except ValueError:
                pass

    def stop(self) -> list[tuple[float, float]]:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(10)
        return self.samples


def renamed(src: str, round_: int) -> str:
    """A round's copy of a candidate: its Triton kernels renamed, so each is a new build (Triton keys its cache on the source)."""
    return src if round_ <= 1 else src.replace("_kernel", f"_kernel_r{round_}")


def _stage_sums(rows: list[dict]) -> dict:
    """Per task, the seconds of each breakdown key summed over its verdicts: where the time went."""
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        sums = out.setdefault(r["task"], {})
        for k, v in {
            **{f"stage.{k}": v for k, v in (r.get("stage_seconds") or {}).items()},
            **(r.get("breakdown") or {}),
        }.items():
            if isinstance(v, (int, float)):
                sums[k] = round(sums.get(k, 0.0) + v, 2)
    return out


def total(rounds: list[tuple[float, float, list[dict]]], t_bench: float, steady: dict | None) -> dict:
    """All verdicts over all the wall time from the judges' creation to the last verdict (``--rounds N``: one cold
    start, then the steady state), beside the cold and steady rates; with a steady round, what a loop that judges
    for an hour would get: the cold round once, then the steady rate for the rest of the hour (a projection from
    the two measured rates, labelled so)."""
    n = sum(len(rs) for _, _, rs in rounds)
    wall = rounds[-1][1] - t_bench if rounds else 0.0
    cold_wall = rounds[0][1] - t_bench if rounds else 0.0
    out = {
        "rounds": len(rounds),
        "verdicts": n,
        "wall_s": round(wall, 1),
        "verdicts_per_hour": round(3600 * n / wall) if wall else None,
        "startup_s": round(rounds[0][0] - t_bench, 1) if rounds else None,
        "cold_verdicts_per_hour": round(3600 * len(rounds[0][2]) / cold_wall) if rounds and cold_wall else None,
        "steady_verdicts_per_hour": steady["verdicts_per_hour"] if steady else None,
    }
    if steady and rounds and cold_wall < 3600:
        out["one_hour_projection"] = round(len(rounds[0][2]) + (3600 - cold_wall) * steady["verdicts_per_hour"] / 3600)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--candidates", type=int, default=24)
    ap.add_argument("--label", default="")
    ap.add_argument(
        "--sanitize",
        choices=("config", "on", "off"),
        default="config",
        help="compute-sanitizer on wrong kernels: as the config says (on), or per call (off: what a reward loop judges with)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="rounds of the mix; rounds 2 on are the steady state (warm judges, new builds)",
    )
    args = ap.parse_args()
    os.environ.setdefault("KERNELFIX_CACHE", tempfile.mkdtemp(prefix="kernelfix-throughput-cache-"))
    import torch

    from kernelfix.base.cache_dir import lock_root
    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tools.judge import Judge

    mix = _mix(args.candidates)
    t_bench = (
        time.time()
    )  # the judges' start-up counts in the total (``total``), as a training loop's first hour pays it
    judges = {t: Judge(KB / f"{t}.py", JudgeConfig()) for t in dict.fromkeys(t for t, _, _ in mix)}
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    # Passed only when set: the landed code's judge (throughput-old) has no per-call choice, and judges as its config says.
    options = {} if args.sanitize == "config" else {"sanitize": args.sanitize == "on"}
    print(
        f"throughput on {gpu}: {len(mix)} candidates x {args.rounds} round(s), {args.workers} at a time, sanitize {args.sanitize}, "
        f"tasks {list(judges)}",
        flush=True,
    )
    sampler = MemorySampler() if gpu != "cpu" else None
    lock = threading.Lock()
    rounds: list[tuple[float, float, list[dict]]] = []
    for round_ in range(1, args.rounds + 1):
        todo = [(i, (task, label, renamed(src, round_))) for i, (task, label, src) in enumerate(mix)]
        rows: list[dict] = []
        t_start = time.time()

        def work() -> None:
            while True:
                with lock:
                    if not todo:
                        return
                    i, (task, label, src) = todo.pop(0)
                t0 = time.monotonic()
                v = judges[task].evaluate(src, filename=f"c{i}.py", **options)
                row = {
                    "i": i,
                    "round": round_,
                    "task": task,
                    "label": label,
                    "category": v.category.value,
                    "seconds": round(time.monotonic() - t0, 2),
                    "stage_seconds": v.stage_seconds,
                    "breakdown": v.breakdown,
                    "message": (v.message or "")[:200],
                }
                san = getattr(
                    v, "sanitizer", None
                )  # what the sanitizer found (the landed code's verdicts may have none)
                if san is not None:
                    row["sanitizer"] = {
                        "note": san.note,
                        "inputs": san.inputs,
                        "hazards": len(san.hazards),
                        "tools": [(t.tool, t.seconds, t.errors, t.finished) for t in san.tools],
                    }
                with lock:
                    rows.append(row)
                print(
                    f"[{round_}:{len(rows):2d}/{len(mix)}] {task:<32} {label:<12} {row['category']:<34} {row['seconds']:6.1f} s"
                    f"  (at {time.time() - t_start:5.1f} s)",
                    flush=True,
                )

        threads = [threading.Thread(target=work) for _ in range(args.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rounds.append((t_start, time.time(), rows))
    for j in judges.values():
        j.close()
    samples = sampler.stop() if sampler is not None else []
    every = []
    for log in lock_root().glob("gpu-*.log"):
        every += [json.loads(line) for line in log.read_text().splitlines() if line.strip()]

    def summarize(part: list[tuple[float, float, list[dict]]]) -> tuple[dict, list[dict]]:
        rows = [r for _, _, rs in part for r in rs]
        wall = sum(b - a for a, b, _ in part)
        holds = [h for h in every if any(a <= h["got"] <= b for a, b, _ in part)]
        use = lease_use(holds)
        per = [r["seconds"] for r in rows]
        return {
            "label": args.label,
            "gpu": gpu,
            "sanitize": args.sanitize,
            "rounds": [r for r in range(1, args.rounds + 1) if any(x["round"] == r for x in rows)],
            "candidates": len(rows),
            "workers": args.workers,
            "wall_s": round(wall, 1),
            "verdicts_per_hour": round(3600 * len(rows) / wall),
            "seconds_per_verdict": round(wall / len(rows), 2),
            "gpu_busy_fraction": round(use["busy_s"] / wall, 3),
            "gpu_holds": len(holds),
            **use,
            "median_latency_s": statistics.median(per),
            "max_latency_s": max(per),
            "categories": {c: sum(r["category"] == c for r in rows) for c in sorted({r["category"] for r in rows})},
            "sanitizer": sanitizer_share(rows, holds, wall),
            "room_waits": room_waits(holds),
            "memory": memory_by_stage(holds, samples),
            "breakdown_s": _stage_sums(rows),
        }, holds

    summary, holds = summarize(rounds[:1])
    out: dict = {"summary": summary}
    if len(rounds) > 1:
        out["steady"] = summarize(rounds[1:])[0]
    out["total"] = total(rounds, t_bench, out.get("steady"))
    out |= {
        "rows": sorted([r for _, _, rs in rounds for r in rs], key=lambda r: (r["round"], r["i"])),
        "holds": every,
        "memory_samples": samples,
    }
    Path(args.out).write_text(json.dumps(out, indent=2))
    for key in ("summary", "steady"):
        if key in out:
            print(
                f"--- {key}"
                + (
                    " (steady state: warm judges, every kernel a new build)"
                    if key == "steady"
                    else " (cold: comparable)"
                )
            )
            print(json.dumps({k: v for k, v in out[key].items() if k != "breakdown_s"}, indent=2))
    print("--- total (every round, the judges' start-up included: cold, steady and amortized side by side)")
    print(json.dumps(out["total"], indent=2))
    print(json.dumps({"breakdown_s": summary["breakdown_s"]}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
