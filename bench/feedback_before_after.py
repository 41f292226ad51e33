"""The profile part of the feedback for each captured defect, before and after issue 22, from the same
Nsight Compute captures (tests/fixtures/ncu/feedback): "before" is the diagnosis as it landed at
e6ca085 (tools/profile/bottleneck.py, read from git), "after" is today's. Prints Markdown.

    python3 bench/feedback_before_after.py [--rev e6ca085] [CASE ...]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def old_module(rev: str):
    text = subprocess.run(
        ["git", "show", f"{rev}:tools/profile/bottleneck.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "old_bottleneck.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("old_bottleneck", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    import test_findings as tf  # the fixtures' tasks and contexts, as the tests read them

    from kernelfix.tools.profile import ncu_csv

    ap = argparse.ArgumentParser()
    ap.add_argument("--rev", default="e6ca085")
    ap.add_argument("cases", nargs="*")
    args = ap.parse_args()
    old = old_module(args.rev)
    for case in args.cases or tf.CAPTURED:
        h = tf.header(case)
        flops, nbytes, _ = tf.TASKS[h["task"]]
        kernels = ncu_csv.parse((tf.FIX / f"{case}.details.csv").read_text()).kernels
        ms = tf.MEASURED_MS.get(case)
        timings = (
            tf.Timings(
                candidate=tf.TimingStats(median_ms=ms, mean_ms=ms, std_ms=0, p10_ms=ms, p90_ms=ms, min_ms=ms, runs=100),
                bytes_moved=nbytes,
            )
            if ms
            else tf.Timings(bytes_moved=nbytes)
        )
        before = old.from_ncu(
            kernels, timings=timings, task_flops=flops, max_launches=3 if "many_launches" in case else None
        )
        after = tf.report(case)
        print(f"### {case} ({h['defect']})\n")
        print("Before:\n\n```\n" + "\n".join(before.highlights) + "\n```\n")
        print("After:\n\n```\n" + "\n".join(after.highlights) + "\n```\n")


if __name__ == "__main__":
    main()
