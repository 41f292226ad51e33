"""docs/baseline.md from a `kernelfix baseline --out` file and KernelBench's published H100 timings.

    python3 bench/baseline_report.py BASELINE.json KB_TIMES.json [KB_COMPILE_TIMES.json] > docs/baseline.md

Counts what got a verdict and why any did not, names the tasks whose tolerance is vacuous or whose
reference is not deterministic, and sets each task's eager time beside KernelBench's
(results/timing/H100_Modal/baseline_time_torch.json: the mean of 100 runs, as ours is).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import Counter
from pathlib import Path


def _kb(path: str | None) -> dict[str, float]:
    if not path:
        return {}
    data = json.loads(Path(path).read_text())
    return {
        Path(name).stem: float(v["mean"])
        for level in data.values()
        if isinstance(level, dict)
        for name, v in level.items()
        if isinstance(v, dict) and "mean" in v
    }


def _level(row: dict) -> str:
    return Path(row["path"]).parent.name


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f}" if n else "-"


def main(argv: list[str]) -> int:
    report = json.loads(Path(argv[0]).read_text())
    kb, kbc = _kb(argv[1]), _kb(argv[2] if len(argv) > 2 else None)
    rows = report["rows"]
    out: list[str] = []
    w = out.append
    status = Counter(r["status"] if r["status"] != "infra" else r["category"] for r in rows)
    w(
        f"{len(rows)} tasks on {report.get('gpu')} (torch {report['torch']}); verdicts: "
        + ", ".join(f"{k} {v}" for k, v in status.most_common())
        + ".\n"
    )
    big = [r for r in rows if max(r.get("input_bytes") or 0, r.get("output_bytes") or 0) > 2**30]
    w(
        f"{len(big)} of them move an input or output over 1 GiB (largest: "
        + ", ".join(
            f"{r['task']} {_gib(max(r['input_bytes'], r['output_bytes']))} GiB"
            for r in sorted(big, key=lambda r: -max(r["input_bytes"], r["output_bytes"]))[:3]
        )
        + ").\n"
    )
    for r in rows:
        if r["status"] != "ok":
            w(f"- {r['task']}: {r['status']} {r.get('category') or ''}: {r.get('error')}")
    vac = [r for r in rows if r.get("vacuous")]
    w(
        f"\nVacuous tolerance (an all-zeros output would pass): {len(vac)}: "
        + "; ".join(f"{r['task']} ({r['vacuous']})" for r in vac)
        + ".\n"
    )
    nondet = [r for r in rows if r["status"] == "ok" and not r.get("deterministic")]
    w(
        f"Not bit-identical across two runs with one seed: {len(nondet)}: "
        + "; ".join(
            f"{r['task']} (inputs {'equal' if r.get('inputs_equal') else 'differ'}, relative error {r.get('rel_error_between_runs') or 0:.1e})"
            for r in nondet
        )
        + ".\n"
    )
    w(
        "\nEager time against KernelBench's published H100 eager time (ratio = ours / theirs; both the mean of 100 runs):\n"
    )
    w(
        "| level | tasks | median ratio | 10th-90th percentile | within 0.8-1.25x | ours faster than 0.8x | ours slower than 1.25x |"
    )
    w("| --- | ---: | ---: | --- | ---: | ---: | ---: |")
    for level in sorted({_level(r) for r in rows}):
        ratios = [
            r["eager"]["mean_ms"] / kb[r["task"]]
            for r in rows
            if _level(r) == level and r.get("eager") and kb.get(r["task"])
        ]
        if not ratios:
            continue
        q = statistics.quantiles(ratios, n=10)
        w(
            f"| {level} | {len(ratios)} | {statistics.median(ratios):.2f} | {q[0]:.2f}-{q[-1]:.2f} | {sum(0.8 <= x <= 1.25 for x in ratios)} | {sum(x < 0.8 for x in ratios)} | {sum(x > 1.25 for x in ratios)} |"
        )
    w(
        "\n| task | in GiB | out GiB | eager ms (mean) | KernelBench eager ms | ratio | torch.compile ms (mean) | KernelBench compile ms | compile / eager | vacuous | deterministic |"
    )
    w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for r in rows:
        e, c = r.get("eager") or {}, r.get("compiled") or {}
        k, kc = kb.get(r["task"]), kbc.get(r["task"])
        em, cm = e.get("mean_ms"), c.get("mean_ms")
        w(
            f"| {_level(r)}/{r['task']} | {_gib(r.get('input_bytes') or 0)} | {_gib(r.get('output_bytes') or 0)} | {em:.3f} | {k if k is not None else '-'} | "
            f"{em / k:.2f} | "
            if em and k
            else f"| {_level(r)}/{r['task']} | {_gib(r.get('input_bytes') or 0)} | {_gib(r.get('output_bytes') or 0)} | {em if em else '-'} | {k if k is not None else '-'} | - | "
        )
        out[-1] += (
            f"{cm:.3f} | {kc if kc is not None else '-'} | {cm / em:.2f} | "
            if cm and em
            else f"{r.get('compile_note') or '-'} | {kc if kc is not None else '-'} | - | "
        )
        out[-1] += f"{'yes' if r.get('vacuous') else ''} | {'yes' if r.get('deterministic') else 'no'} |"
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
