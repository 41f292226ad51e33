"""`kernelfix baseline` on the CPU: a row per task, the vacuous tolerance and same-seed checks named, a task
that does not run said as such, JSON on request, and a rerun that resumes instead of measuring again.
(Timing needs a GPU: bench/device_run.sh baseline:DIRS runs it over KernelBench on the H100.)"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import CORPUS, REPO_ROOT


def _task(d: Path, name: str, forward: str, inputs: str) -> None:
    (d / f"{name}.py").write_text(textwrap.dedent(f"""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return {forward}

        def get_inputs():
            return [{inputs}]

        def get_init_inputs():
            return []
    """))


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelfix", "baseline", *args, "--device", "cpu"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)


def test_rows_checks_failures_json_and_resume(tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    _task(tasks, "1_relu", "torch.relu(x)", "torch.randn(64, 256)")
    _task(tasks, "2_wide_softmax", "torch.softmax(x, dim=1)", "torch.rand(4, 65536)")  # every value under 1e-4, as in 23_Softmax
    # Random in forward under the trial's seed is the same twice; the clock is not (as atomics in a CUDA reduction are not).
    _task(tasks, "3_noisy", "x + float(__import__('time').perf_counter_ns() % 997)", "torch.randn(64)")
    out = tmp_path / "report.json"
    first = _run(str(tasks), str(CORPUS / "tasks" / "broken_import.py"), "--out", str(out), "--json")
    assert first.returncode == 1, first.stderr  # one task does not run
    report = json.loads(first.stdout)
    rows = {r["task"]: r for r in report["rows"]}
    assert [r["task"] for r in report["rows"]] == ["1_relu", "2_wide_softmax", "3_noisy", "broken_import"]
    assert rows["1_relu"]["status"] == "ok" and rows["1_relu"]["deterministic"] and not rows["1_relu"]["vacuous"]
    assert rows["2_wide_softmax"]["vacuous"] and "all-zeros" in rows["2_wide_softmax"]["vacuous"]
    assert rows["3_noisy"]["deterministic"] is False and rows["3_noisy"]["inputs_equal"] is True
    assert rows["broken_import"]["status"] == "task_error" and "this_module_does_not_exist" in rows["broken_import"]["error"]
    assert rows["1_relu"]["input_bytes"] == 64 * 256 * 4 and rows["1_relu"]["eager"] is None  # nothing timed on the CPU
    assert json.loads(out.read_text())["rows"] == report["rows"]

    again = _run(str(tasks), "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("[resumed]") == 3  # nothing measured twice
    assert "1_relu" in again.stdout and "vacuous" in again.stdout  # the table


def test_help_explains_itself():
    p = subprocess.run([sys.executable, "-m", "kernelfix", "baseline", "--help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "vacuous" in p.stdout and "resume" in p.stdout and "Exit codes" in p.stdout
