"""Many ``kernelfix eval`` processes on one GPU at once, as many users would start them (issue 23).

    python3 bench/many_judges.py [--copies K] [--pairs NAME=TASK:CANDIDATE ...] [--extra-args "ARGS"]
                                 [--timeout S] [--out OUT.json]

Starts every evaluation at the same moment, each its own process:
``python -P -m kernelfix eval TASK CANDIDATE --json [EXTRA ARGS]``, once per (task, candidate) pair,
or K times each with ``--copies K`` (the 7 default pairs with K=2: 14 at once). While they run, a
thread samples ``nvidia-smi`` every 0.2 s (memory used and total, utilization; skipped where there is
no nvidia-smi) and keeps the peak. Prints one line per evaluation (category, message, wall seconds,
speedup over eager, the machine faults it met and retried) and a summary: verdicts, how many ok, how
many infra:* and which, peak GPU memory, wall time. OUT.json keeps every row and the samples.

An evaluation that crashes, times out (``--timeout``, default 900 s: its process group is killed) or
prints no JSON is a row with category ``unparsed``/``timeout`` and the tail of its stderr; the
script itself goes on.

Defaults: KernelBench level 1 at full size with honest candidates: 19_ReLU, 23_Softmax, 47_Sum,
45_Average_Pooling_2D, 88_MinGPTNewGelu, 1_Square_matrix_multiplication_ (Triton) and 50_conv (a
direct CUDA convolution). On a CPU pass ``--extra-args "--device cpu"`` and small ``--pairs``
(e.g. ``relu=examples/tasks/relu.py:examples/candidates/relu_triton.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KB = "tests/kernelbench/level1"
DEFAULT_PAIRS = {
    "19_ReLU": (f"{KB}/19_ReLU.py", "bench/candidates/relu_triton.py"),
    "23_Softmax": (f"{KB}/23_Softmax.py", "bench/candidates/softmax_triton.py"),
    "47_Sum": (f"{KB}/47_Sum_reduction_over_a_dimension.py", "bench/candidates/sum_triton.py"),
    "45_AvgPool2D": (f"{KB}/45_Average_Pooling_2D.py", "bench/candidates/avgpool_triton.py"),
    "88_Gelu": (f"{KB}/88_MinGPTNewGelu.py", "bench/candidates/gelu_triton.py"),
    "1_Matmul": (f"{KB}/1_Square_matrix_multiplication_.py", "bench/candidates/matmul_triton.py"),
    "50_conv": (
        f"{KB}/50_conv_standard_2D__square_input__square_kernel.py",
        "tests/feedback/candidates/conv_direct_exact_cuda.py",
    ),
}
# stderr lines of `kernelfix eval` that tell of a machine fault judged again (kernelfix/cli/eval.py)
NO_VERDICT = ("unparsed", "timeout", "launch_failed", "interrupted")
RETRY_LINE = re.compile(r"retry|retried|machine fault|judging (it )?again", re.I)


class GpuSampler(threading.Thread):
    """nvidia-smi every ``every_s`` seconds; no nvidia-smi (a CPU box) or a failing one: no samples, no error."""

    QUERY = ["--query-gpu=memory.used,memory.total,utilization.gpu", "--format=csv,noheader,nounits"]

    def __init__(self, every_s: float = 0.2):
        super().__init__(daemon=True)
        self.every_s = every_s
        self.samples: list[dict] = []  # {"t": s since start, "gpus": [[used MiB, total MiB, util %], ...]}
        self.error: str | None = None
        self._halt = threading.Event()
        self._exe = shutil.which("nvidia-smi")
        if self._exe is None:
            self.error = "no nvidia-smi on PATH: GPU memory not sampled"

    def run(self) -> None:
        t0 = time.monotonic()
        while self._exe and not self._halt.is_set():
            try:
                p = subprocess.run([self._exe, *self.QUERY], capture_output=True, text=True, timeout=10)
                gpus = [[float(x) for x in line.split(",")] for line in p.stdout.strip().splitlines() if line.strip()]
                if p.returncode == 0 and gpus:
                    self.samples.append(
                        {"t": round(time.monotonic() - t0, 2), "gpus": gpus, "holders": self._holders()}
                    )
                else:
                    self.error = f"nvidia-smi exit {p.returncode}: {(p.stderr or p.stdout)[-200:]}"
            except (OSError, ValueError, subprocess.SubprocessError) as e:
                self.error = f"nvidia-smi: {e!r}"[:300]
            self._halt.wait(self.every_s)

    def _holders(self) -> dict[str, list[float]]:
        """GPU memory by holder at this sample: {role: [processes, MiB]}. The role comes from the process's
        working directory (a judge's reference worker runs in .../reference, a candidate's in .../evals/ID)."""
        try:
            p = subprocess.run(
                [self._exe, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=10,
            )
        except (OSError, subprocess.SubprocessError):
            return {}
        out: dict[str, list[float]] = {}
        for line in p.stdout.strip().splitlines():
            try:
                pid, mib = (x.strip() for x in line.split(","))
                cwd = os.readlink(f"/proc/{int(pid)}/cwd")
            except (ValueError, OSError):
                cwd, mib = "", mib if "mib" in locals() else "0"
            role = "reference" if cwd.endswith("/reference") else "candidate" if "/evals/" in cwd else "other"
            row = out.setdefault(role, [0, 0.0])
            row[0] += 1
            try:
                row[1] += float(mib)
            except ValueError:
                pass
        return out

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(timeout=15)

    def peak(self) -> dict | None:
        """The sample with the most memory used on any one GPU (and the highest utilization seen)."""
        if not self.samples:
            return None
        used = max(((g[0], g[1], i, s["t"]) for s in self.samples for i, g in enumerate(s["gpus"])), key=lambda x: x[0])
        util = max(g[2] for s in self.samples for g in s["gpus"])
        holders = next((x.get("holders") for x in self.samples if x["t"] == used[3]), None)
        return {
            "used_mib": used[0],
            "total_mib": used[1],
            "gpu": used[2],
            "at_s": used[3],
            "max_util_pct": util,
            "holders_at_peak": holders,
        }


def parse_pairs(items: list[str]) -> dict[str, tuple[str, str]]:
    pairs = {}
    for item in items:
        for one in item.split(","):
            if not one.strip():
                continue
            name, _, rest = one.partition("=")
            task, _, cand = rest.rpartition(":")
            if not (name and task and cand):
                raise SystemExit(f"--pairs wants NAME=TASK:CANDIDATE, got {one!r}")
            pairs[name.strip()] = (task.strip(), cand.strip())
    return pairs


def tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def parse_verdict(text: str) -> dict | None:
    text = text.strip()
    for cand in (text, text[text.find("{") : text.rfind("}") + 1] if "{" in text else ""):
        try:
            v = json.loads(cand)
            if isinstance(v, dict):
                return v
        except ValueError:
            pass
    return None


def kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)  # the eval's own process group (start_new_session): its workers too
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(p: subprocess.Popen) -> bool:
    try:
        os.killpg(p.pid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def wait_all(pending: list, rows: list, args, on_row) -> None:
    """Until every evaluation has ended: each row gets its verdict (or why there is none) and is printed."""
    while pending:
        time.sleep(0.2)
        for item in list(pending):
            row, p, out, err, t0 = item
            rc = p.poll()
            if rc is None and time.monotonic() - t0 < args.timeout:
                continue
            if rc is None:
                kill_group(p)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
                row.update(category="timeout", message=f"no verdict within {args.timeout:.0f} s: killed")
            pending.remove(item)
            if group_alive(p):  # the eval exited but left processes in its group: noted, then ended
                row["left_processes"] = True
                kill_group(p)
            row["wall_s"] = round(time.monotonic() - t0, 2)
            row["returncode"] = p.returncode
            stderr = tail(err, 20000)
            row["retry_lines"] = [ln.strip()[:300] for ln in stderr.splitlines() if RETRY_LINE.search(ln)]
            v = parse_verdict(tail(out, 10_000_000)) if row.get("category") != "timeout" else None
            if v is None:
                row.setdefault("category", "unparsed")
                row.setdefault("message", f"exit {p.returncode}, no JSON verdict on stdout")
                row["stderr_tail"] = stderr[-1500:]
            else:
                row.update(
                    category=v.get("category") or "ok",
                    message=v.get("message"),
                    speedup_eager=v.get("speedup_eager"),
                    speedup_compile=v.get("speedup_compile"),
                    infra_retries=v.get("infra_retries") or [],
                    warnings=[w for w in (v.get("warnings") or []) if RETRY_LINE.search(str(w))],
                    stage_seconds=v.get("stage_seconds"),
                )
                if row["category"] != "ok":
                    row["stderr_tail"] = stderr[-800:]
            rows.append(row)
            on_row()
            sp = row.get("speedup_eager")
            bits = [
                f"{row['name']}#{row['copy']}: {row['category']}",
                (row.get("message") or "")[:200],
                f"{row['wall_s']:.1f} s",
            ]
            if isinstance(sp, (int, float)):
                bits.append(f"speedup_eager {sp:.2f}x")
            if row.get("infra_retries"):
                bits.append(f"retried {len(row['infra_retries'])}: {row['infra_retries']}")
            if row["retry_lines"]:
                bits.append(f"stderr: {row['retry_lines']}")
            if row.get("warnings"):
                bits.append(f"warnings: {row['warnings']}")
            if row.get("left_processes"):
                bits.append("left processes behind in its group (killed)")
            print(" | ".join(bits), flush=True)
            if row["category"] in ("unparsed", "timeout"):
                print(
                    "   stderr tail: " + " | ".join(row.get("stderr_tail", "").strip().splitlines()[-6:])[-600:],
                    flush=True,
                )


def summarize(rows: list, sampler: GpuSampler, wall: float, copies: int, extra: list) -> dict:
    verdicts = [r for r in rows if r["category"] not in NO_VERDICT]
    infra = [f"{r['name']}#{r['copy']}: {r['category']}" for r in verdicts if str(r["category"]).startswith("infra")]
    return {
        "evaluations": len(rows),
        "verdicts": len(verdicts),
        "ok": sum(r["category"] == "ok" for r in verdicts),
        "infra": len(infra),
        "infra_which": infra,
        "no_verdict": [f"{r['name']}#{r['copy']}: {r['category']}" for r in rows if r["category"] in NO_VERDICT],
        "other": sorted(
            f"{r['name']}#{r['copy']}: {r['category']}"
            for r in verdicts
            if r["category"] != "ok" and not str(r["category"]).startswith("infra")
        ),
        "retried_evaluations": sum(bool(r.get("infra_retries") or r.get("retry_lines")) for r in rows),
        "peak_gpu": sampler.peak(),
        "gpu_samples": len(sampler.samples),
        "sampler_note": sampler.error,
        "wall_s": round(wall, 2),
        "copies": copies,
        "extra_args": extra,
    }


def summary_line(summary: dict, sampler: GpuSampler) -> str:
    peak = summary["peak_gpu"]
    gpu_text = (
        f"peak GPU memory {peak['used_mib']:.0f} of {peak['total_mib']:.0f} MiB (GPU {peak['gpu']}, at {peak['at_s']} s; max util {peak['max_util_pct']:.0f}%; "
        f"held then by {peak.get('holders_at_peak')})"
        if peak
        else f"peak GPU memory unknown ({sampler.error or 'no samples'})"
    )
    parts = [
        f"summary: {summary['verdicts']} verdicts of {summary['evaluations']} evaluations",
        f"{summary['ok']} ok",
        f"{summary['infra']} infra {summary['infra_which']}",
    ]
    if summary["no_verdict"]:
        parts.append(f"no verdict: {summary['no_verdict']}")
    if summary["other"]:
        parts.append(f"other: {summary['other']}")
    parts += [f"{summary['retried_evaluations']} retried a machine fault", gpu_text, f"wall {summary['wall_s']:.1f} s"]
    return "; ".join(parts)


def write_out(path: Path, rows: list, sampler: GpuSampler, summary: dict | None = None, partial: bool = False) -> None:
    """OUT.json; after every verdict too (partial), so a bench cut short still leaves what came back."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps(
            {"partial": partial, "summary": summary, "rows": rows, "gpu_samples": list(sampler.samples)},
            indent=1,
            default=str,
        )
    )
    tmp.replace(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--pairs",
        action="append",
        default=[],
        metavar="NAME=TASK:CANDIDATE",
        help="instead of the defaults (repeatable or comma-separated)",
    )
    ap.add_argument("--copies", type=int, default=1, help="evaluations of each pair, all at once (default 1)")
    ap.add_argument("--extra-args", default="", help='passed to every eval, e.g. "--no-retry" or "--device cpu"')
    ap.add_argument("--timeout", type=float, default=900.0, help="per evaluation, seconds (default 900)")
    ap.add_argument("--out", type=Path, help="JSON with every row, the summary and the GPU samples")
    ap.add_argument("--sample-s", type=float, default=0.2)
    args = ap.parse_args()

    pairs = parse_pairs(args.pairs) if args.pairs else DEFAULT_PAIRS
    missing = [str(p) for t, c in pairs.values() for p in (t, c) if not (ROOT / p).exists()]
    if missing:
        print(f"missing files (skipped pairs): {missing}", flush=True)
    jobs = [
        (name, k, t, c)
        for name, (t, c) in pairs.items()
        for k in range(args.copies)
        if (ROOT / t).exists() and (ROOT / c).exists()
    ]
    extra = shlex.split(args.extra_args)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    logs = Path(tempfile.mkdtemp(prefix="many_judges_"))
    print(
        f"{len(jobs)} evaluations at once ({len(pairs)} pairs x {args.copies}), extra args {extra or 'none'}, logs in {logs}",
        flush=True,
    )

    sampler = GpuSampler(args.sample_s)
    sampler.start()
    t_start = time.monotonic()
    running = []
    for name, k, task, cand in jobs:
        argv = [sys.executable, "-P", "-m", "kernelfix", "eval", str(ROOT / task), str(ROOT / cand), "--json", *extra]
        out, err = logs / f"{name}.{k}.out", logs / f"{name}.{k}.err"
        row = {"name": name, "copy": k, "task": task, "candidate": cand, "argv": argv}
        try:
            with open(out, "wb") as fo, open(err, "wb") as fe:
                p = subprocess.Popen(argv, stdout=fo, stderr=fe, cwd=ROOT, env=env, start_new_session=True)
        except OSError as e:
            row.update(category="launch_failed", message=repr(e), wall_s=0.0)
            running.append((row, None, out, err, t_start))
            continue
        row["pid"] = p.pid
        running.append((row, p, out, err, time.monotonic()))

    rows = []
    pending = [r for r in running if r[1] is not None]
    rows += [r[0] for r in running if r[1] is None]

    def on_term(signum, frame):  # `timeout` or the user: end the evals (their own sessions), keep what came back
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    try:
        wait_all(pending, rows, args, lambda: args.out and write_out(args.out, rows, sampler, partial=True))
    except KeyboardInterrupt as e:
        print(f"interrupted ({e or 'Ctrl-C'}): ending {len(pending)} evaluations still running", flush=True)
        for row, p, out, err, t0 in pending:
            kill_group(p)
            row.update(
                category="interrupted",
                message="the bench was interrupted before its verdict",
                wall_s=round(time.monotonic() - t0, 2),
                stderr_tail=tail(err, 1500),
            )
            rows.append(row)
        pending.clear()

    wall = time.monotonic() - t_start
    sampler.stop()

    summary = summarize(rows, sampler, wall, args.copies, extra)
    print(summary_line(summary, sampler), flush=True)
    if args.out:
        write_out(args.out, rows, sampler, summary=summary)
        print(f"wrote {args.out}", flush=True)
    shutil.rmtree(logs, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
