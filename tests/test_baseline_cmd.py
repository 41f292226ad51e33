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
    (d / f"{name}.py").write_text(
        textwrap.dedent(f"""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return {forward}

        def get_inputs():
            return [{inputs}]

        def get_init_inputs():
            return []
    """)
    )


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kernelfix", "baseline", *args, "--device", "cpu"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_rows_checks_failures_json_and_resume(tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    _task(tasks, "1_relu", "torch.relu(x)", "torch.randn(64, 256)")
    _task(
        tasks, "2_wide_softmax", "torch.softmax(x, dim=1)", "torch.rand(4, 65536)"
    )  # every value under 1e-4, as in 23_Softmax
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
    assert (
        rows["broken_import"]["status"] == "task_error"
        and "this_module_does_not_exist" in rows["broken_import"]["error"]
    )
    assert rows["1_relu"]["input_bytes"] == 64 * 256 * 4 and rows["1_relu"]["eager"] is None  # nothing timed on the CPU
    assert json.loads(out.read_text())["rows"] == report["rows"]

    again = _run(str(tasks), "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("[resumed]") == 3  # nothing measured twice
    assert "1_relu" in again.stdout and "vacuous" in again.stdout  # the table


def test_help_explains_itself():
    p = subprocess.run(
        [sys.executable, "-m", "kernelfix", "baseline", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0 and "vacuous" in p.stdout and "resume" in p.stdout and "Exit codes" in p.stdout


def test_a_transient_fault_of_the_machine_is_measured_again(tmp_path, monkeypatch):
    """A row the machine spoiled (GPU memory held by a neighbour) is retried alone at the end of the run, and a
    resume measures it again; a task too large for the machine keeps its row."""
    from kernelfix.cli import baseline_run as baseline
    from kernelfix.tools.config import JudgeConfig

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for name in ("1_busy", "2_huge", "3_fine"):
        _task(tasks, name, "torch.relu(x)", "torch.randn(8)")
    calls: list[str] = []

    def fake_measure(path, config, *, gate=None, fresh=False):
        seen = calls.count(path.stem)
        calls.append(path.stem)
        row = baseline.BaselineRow(task=path.stem, path=str(path), sha1=baseline.Task.load(path).sha1, status="ok")
        if path.stem == "1_busy" and seen == 0:
            row.status, row.category, row.error = (
                "infra",
                "infra:gpu_busy",
                "the GPU ran out of memory held by other processes",
            )
        if path.stem == "2_huge":
            row.status, row.category, row.error = "infra", "infra:too_large", "the task does not fit this GPU"
        return row

    monkeypatch.setattr(baseline, "measure", fake_measure)
    out = tmp_path / "report.json"
    report = baseline.run(baseline.find_tasks([str(tasks)]), JudgeConfig(device="cpu"), out=out, workers=2)
    rows = {r.task: r for r in report.rows}
    assert rows["1_busy"].status == "ok", "the transient fault was not retried"
    assert calls.count("1_busy") == 2 and calls.count("2_huge") == 1
    assert calls[-1] == "1_busy"  # the retry comes after every first try

    # A resume keeps settled rows, too-large included, and measures a transient fault again.
    saved = baseline.BaselineReport.model_validate_json(out.read_text())
    for r in saved.rows:
        if r.task == "3_fine":
            r.status, r.category = "infra", "infra:worker"
    out.write_text(saved.model_dump_json())
    calls.clear()
    baseline.run(baseline.find_tasks([str(tasks)]), JudgeConfig(device="cpu"), out=out, workers=1)
    assert calls == ["3_fine"]


def test_a_reference_torch_compile_past_its_bound_leaves_eager_with_a_note(tmp_path):
    """90_cumprod's training graph compiled for minutes on the H100 while the GPU lease waited. Past
    ``reference_compile_timeout_s`` the worker is ended, the note says so, and the next request starts
    another: on the GPU, eager is then timed alone, with the note (below)."""
    import torch

    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tools.judge import Judge
    from kernelfix.tools.task import Task
    from kernelfix.tools.timing import baselines

    # Eager is instant; under torch.compile the forward waits a minute (Dynamo runs the sleep at a graph break)
    _task(tmp_path, "slow_compile", "self.step(x)", "torch.randn(8, 16)")
    path = tmp_path / "slow_compile.py"
    path.write_text(
        path.read_text().replace(
            "    def forward(self, x):",
            "    def step(self, x):\n        if torch.compiler.is_compiling():\n            __import__('time').sleep(60)\n        return x * 2\n\n    def forward(self, x):",
        )
    )
    note = "torch.compile did not finish compiling the reference within 2 s (judge.reference_compile_timeout_s): eager alone is timed"
    for device in ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]:
        cfg = JudgeConfig(
            device=device, trials=1, input_variants=[], float64_reference=False, reference_compile_timeout_s=2.0
        )
        with Judge(Task.load(path), cfg) as judge:
            judge.reference()
            ref = judge.ref
            if device == "cpu":  # no timing without a GPU: the warm-up alone
                assert ref.warm_compiled(ref.trials[0], baselines.timing_settings(cfg)) == note
                assert ref.ready is None  # that worker is gone; the next request starts another
                det = ref.determinism(ref.trials[0], judge.lease)
                assert det.inputs_equal and det.outputs_equal
            else:
                base = ref.baseline(judge.lease, fresh=True)
                print(
                    f"\n[cuda] slow compile: eager {base.eager.median_ms:.4f} ms, compiled {base.compiled}, note {base.compile_note!r}"
                )
                assert base.compiled is None and base.compile_note == note and base.eager.runs >= 100


def test_the_references_torch_compile_runs_in_one_thread_unless_configured(monkeypatch):
    """Inductor's default pool starts an interpreter per core, each importing torch before it compiles: on the
    H100 a cold GELU baseline's process took 27.2 s, and 18.6 s in one thread (bench/baseline_compile_cold.py)."""
    import os

    import torch._inductor.config as inductor_config

    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tools.workers.reference import runs

    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    monkeypatch.setattr(inductor_config, "compile_threads", 16)
    runs._compile_threads(JudgeConfig().reference_compile_threads)
    assert os.environ["TORCHINDUCTOR_COMPILE_THREADS"] == "1" and inductor_config.compile_threads == 1
    monkeypatch.setattr(inductor_config, "compile_threads", 16)
    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS")
    runs._compile_threads(JudgeConfig(reference_compile_threads=0).reference_compile_threads)  # inductor's own choice
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in os.environ and inductor_config.compile_threads == 16
