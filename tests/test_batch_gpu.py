"""`kernelfix batch` on the GPU: the example manifest (four sessions, replay models) with four workers;
every GPU stage of every session queued on the GPU's lease, no exclusive hold (timing, profile) beside any
other (correctness and warm-ups share the GPU: docs/service.md); a rerun skips them all."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from agent_support import REPO

from kernelfix.tools.gpu.lease import exclusive_overlaps


@pytest.mark.gpu
@pytest.mark.timeout(1500)  # four sessions, each timed against eager and torch.compile
def test_example_batch_on_the_gpu(tmp_path):
    # A lease of its own, so that its hold log is this batch's alone.
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "KERNELFIX_CACHE": str(tmp_path / "cache"),
        "KERNELFIX_LOCKS": str(tmp_path / "cache" / "locks"),
    }
    out = os.environ.get("KERNELFIX_BATCH_OUT") or str(tmp_path / "batch")
    cmd = [
        sys.executable,
        "-P",
        "-m",
        "kernelfix",
        "batch",
        "examples/batch/manifest.jsonl",
        "--out",
        out,
        "--workers",
        "4",
        "--json",
    ]
    run = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
    print(run.stderr)
    s = json.loads(run.stdout)
    print(open(os.path.join(out, "summary.md")).read())
    assert run.returncode == 0, run.stderr
    assert s["tasks"] == 4 and s["timed_tasks"] == 4 and s["finished"] == 4
    assert isinstance(s["fast_p_eager"], dict) and isinstance(s["fast_p_compile"], dict)
    assert all(r["speedup_eager"] is not None for r in s["rows"] if r["correct"])
    log = tmp_path / "cache" / "locks" / "gpu-0.log"
    holds = [
        h for h in map(json.loads, log.read_text().splitlines()) if h["mode"] != "room"
    ]  # room is logged beside the holds
    assert exclusive_overlaps(holds) == []  # shared holds may overlap each other, an exclusive one nothing
    shared = sum(h["mode"] == "shared" for h in holds)
    print(
        f"[cuda] {len(holds)} GPU holds ({shared} shared) from {len({h['pid'] for h in holds})} judges, no exclusive one beside another; "
        f"waited {sum(h['got'] - h['asked'] for h in holds):.1f} s in all, held {sum(h['released'] - h['got'] for h in holds):.1f} s"
    )
    assert len({h["pid"] for h in holds}) == 4  # every worker's judge used the queue
    assert {h["what"].split()[-1] for h in holds} >= {"reference", "correctness", "benchmark"}
    assert all(
        h["mode"] == "exclusive" for h in holds if h["what"].endswith("benchmark")
    )  # timing has the GPU to itself

    again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and again.stderr.count("skipped (done earlier)") == 4
    assert json.loads(again.stdout)["fast_p_eager"] == s["fast_p_eager"]
