"""Issue 22's proof on the GPU: each defect case judged with its profile, and the fairness cases.

    python3 bench/feedback_proof.py --out OUT.json [--cases CASE ...] [--parallel N]

Runs ``kernelfix eval TASK CANDIDATE --profile --json`` for each case in tests/feedback/candidates
(the defect kernels: each correct, honest and slow for one known reason; the fairness kernels:
honest kernels a float32 reference's rounding used to fail), N at a time (their builds overlap; the
judge's GPU lease keeps their timing and profiles apart). Prints, per case, the verdict, the
findings (kind, numbers, line) and whether the expected defect came first; writes every verdict's
category, findings, feedback and correctness summary to OUT.json (docs/feedback.md is made from it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CANDS = ROOT / "tests" / "feedback" / "candidates"
DEFAULT = [
    "scale_uncoalesced_cuda",
    "scale_uncoalesced_triton",
    "transpose_bank_conflicts_cuda",
    "scale_smem_occupancy_cuda",
    "scale_small_grid_cuda",
    "scale_many_launches_cuda",
    "matmul_naive_cuda",
    "conv_direct_exact_cuda",
    "row_sum_tree_cuda",
    "histogram_atomic_cuda",
    "pow_fp64_cuda",
    "affine_divmod_cuda",
    "matmul_wmma_cuda",
    "scale_one_block_per_sm_cuda",
    "normalize_host_sync_triton",
]


# The finding each defect must get first (the defect named in a candidate's header); tests/test_findings.py
# holds the captured cases to the same table.
FIRST = {
    "uncoalesced": "uncoalesced",
    "divergence": "divergence",
    "local_memory": "local_memory",
    "occupancy_shared_memory": "occupancy",
    "small_grid": "small_grid",
    "tail_wave": "tail_wave",
    "launch_bound": "launch_bound",
    "bank_conflicts": "bank_conflicts",
    "no_reuse, tensor_cores_unused": "no_reuse",
    "no_reuse": "no_reuse",
    "contended_atomics": "contended_atomics",
    "fp64": "compute_pipe",
    "int_divmod": "compute_pipe",
    "mma_sync_on_hopper": "mma_sync_on_hopper",
    "host_sync": "host_sync",
}


def header(case: str) -> dict[str, str]:
    return dict(re.findall(r"^# (task|defect|line): ?(.*)$", (CANDS / f"{case}.py").read_text(), re.M))


def task_path(task: str) -> Path:
    return ROOT / "tests" / (f"{task}.py" if task.startswith("kernelbench/") else f"feedback/tasks/{task}.py")


def judge(case: str) -> dict:
    h = header(case)
    t0 = time.monotonic()
    p = subprocess.run(
        [
            sys.executable,
            "-P",
            "-m",
            "kernelfix",
            "eval",
            str(task_path(h["task"])),
            str(CANDS / f"{case}.py"),
            "--profile",
            "--json",
            "--config",
            str(ROOT / "bench" / "feedback_proof.toml"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    row: dict = {
        "case": case,
        "defect": h["defect"],
        "line": h.get("line", ""),
        "seconds": round(time.monotonic() - t0, 1),
    }
    try:
        v = json.loads(p.stdout)
    except ValueError:
        row.update(category="unparsed", stderr=p.stderr[-2000:])
        return row
    prof = v.get("profile") or {}
    c = v.get("correctness") or {}
    row.update(
        category=v["category"],
        message=v.get("message"),
        speedup_eager=v.get("speedup_eager"),
        kernelbench_allclose=v.get("kernelbench_allclose"),
        candidate_ms=((v.get("timings") or {}).get("candidate") or {}).get("median_ms"),
        findings=[
            {k: f.get(k) for k in ("kind", "what", "fix", "where", "gain_pct", "ncu_rule")}
            for f in prof.get("findings") or []
        ],
        profile_note=prof.get("note"),
        highlights=prof.get("highlights"),
        feedback=v.get("feedback"),
        warnings=v.get("warnings"),
        trials=[
            {
                k: t.get(k)
                for k in (
                    "trial",
                    "variant",
                    "ok",
                    "passed_by",
                    "kernelbench_allclose",
                    "mismatches",
                    "max_abs_error",
                    "truth",
                )
            }
            for t in c.get("trials") or []
        ],
        stage_seconds=v.get("stage_seconds"),
    )
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cases", nargs="*", default=DEFAULT)
    ap.add_argument("--parallel", type=int, default=3)
    args = ap.parse_args()
    rows = []
    with ThreadPoolExecutor(args.parallel) as pool:
        for row in pool.map(judge, args.cases):
            rows.append(row)
            kinds = [f["kind"] for f in row.get("findings") or []]
            first = row.get("findings", [{}])[0] if row.get("findings") else {}
            where = (first.get("where") or {}).get("code") if first else None
            want = FIRST.get(row["defect"])
            row["first_ok"] = None if want is None else bool(kinds) and kinds[0] == want
            print(
                f"{row['case']} [{row['defect']}] {row.get('category')} {row.get('seconds')}s speedup={row.get('speedup_eager')} "
                f"kb_allclose={row.get('kernelbench_allclose')} findings={kinds} first_ok={row['first_ok']} at={where!r}",
                flush=True,
            )
            if row.get("category") != "ok":
                print(f"   {row.get('message')}", flush=True)
            args.out.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
