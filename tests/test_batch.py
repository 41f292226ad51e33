"""`kernelfix batch` on CPU with replay models: planning, a batch killed mid-run and rerun,
a crashing session, the device lease, the report's metrics."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from agent_support import REPO, TASK, check_session_dir, reply, write_replay
from proc_support import lock_holder, wait_gone

from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.batch.local_runner import LocalRunner, OutDir
from kernelfix.agent.batch.plan import BatchSettings, PlanError, plan
from kernelfix.agent.batch.report import NOT_TIMED, TaskOutcome, markdown, summarize
from kernelfix.cli import EXIT_USAGE, main
from kernelfix.tools.config import JudgeConfig

SCALE = REPO / "examples" / "tasks" / "scale.py"
SCALE_REPLAY = REPO / "examples" / "replays" / "scale.jsonl"  # one line: a correct kernel


def settings(out: Path, **agent) -> BatchSettings:
    return BatchSettings(
        out=str(out),
        agent=AgentConfig(**{"shape_block": False, **agent}),
        judge=JudgeConfig(device="cpu", run_timeout_s=120),
    )


def batch_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-P", "-m", "kernelfix", "batch", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# --------------------------------------------------------------------------- planning


def test_plan_names_models_and_bad_input(tmp_path):
    replays = tmp_path / "replays"
    replays.mkdir()
    write_replay(replays / "relu.jsonl", ["no code"])
    write_replay(replays / "scale.jsonl", ["no code"])
    s = settings(tmp_path / "out", model=f"replay:{replays}")
    jobs = plan([str(TASK), str(SCALE)], s)
    assert [j.model for j in jobs] == [
        f"replay:{replays / 'relu.jsonl'}",
        f"replay:{replays / 'scale.jsonl'}",
    ]  # replay:DIR -> DIR/<stem>.jsonl
    assert [j.name.split("-")[0] for j in jobs] == ["relu", "scale"]
    assert plan([str(TASK), str(SCALE)], s) == jobs  # stable names: a rerun finds the same sessions
    assert plan([str(TASK), str(TASK)], s) == jobs[:1]  # the same work once

    # a manifest: paths relative to it, per-task replay and target; a target changes the session
    manifest = tmp_path / "m.jsonl"
    write_replay(tmp_path / "r.jsonl", ["no code"])
    manifest.write_text(
        json.dumps({"task": os.path.relpath(TASK, tmp_path), "replay": "r.jsonl"})
        + "\n\n"
        + json.dumps({"task": os.path.relpath(TASK, tmp_path), "replay": "r.jsonl", "target": 2.0})
        + "\n"
    )
    a, b = plan([str(manifest)], settings(tmp_path / "out"))
    assert a.model == b.model == f"replay:{tmp_path / 'r.jsonl'}"
    assert a.name != b.name and b.agent.target_speedup == 2.0 and a.agent.target_speedup == 1.0

    manifest.write_text(
        '{"task": "nope.py"}\n{"tsk": "x"}\n' + json.dumps({"task": str(TASK), "replay": "missing.jsonl"}) + "\n"
    )
    with pytest.raises(PlanError) as e:
        plan([str(manifest), str(tmp_path / "nothing_here")], settings(tmp_path / "out", model="replay:x"))
    problems = str(e.value).splitlines()
    assert any("task file not found" in p and "nope.py" in p for p in problems)
    assert any("line 2" in p and "tsk" in p for p in problems)
    assert any("missing.jsonl" in p for p in problems)
    assert any("nothing_here: no such file" in p for p in problems)


def test_width_per_task_and_a_search_in_the_report(tmp_path):
    from kernelfix.agent.batch.report import task_outcome
    from kernelfix.agent.batch.worker import TaskResult
    from kernelfix.agent.session_dir import read_trajectory

    write_replay(tmp_path / "r.jsonl", ["no code"])
    manifest = tmp_path / "m.jsonl"
    line = {"task": os.path.relpath(TASK, tmp_path), "replay": "r.jsonl"}
    manifest.write_text(json.dumps(line) + "\n" + json.dumps({**line, "width": 4, "keep": 2}) + "\n")
    chain, wide = plan([str(manifest)], settings(tmp_path / "out", width=2))
    assert (chain.agent.width, chain.agent.kept) == (2, 2) and (wide.agent.width, wide.agent.kept) == (
        4,
        2,
    )  # the manifest wins
    assert chain.name != wide.name
    manifest.write_text(json.dumps(line) + "\n")
    assert (
        plan([str(manifest)], settings(tmp_path / "out"))[0].name == chain.name
    )  # no width in the manifest: names as before

    # A search counts rounds: round one had a correct candidate (turn 3), so it is the first "turn" and 1 round to correct.
    search = REPO / "tests" / "fixtures" / "tui" / "search" / "relu-search"
    result = TaskResult(name="relu-search", task=str(TASK), session_dir=str(search), run="new", status="finished")
    row = task_outcome(result, read_trajectory(search))
    assert (row.correct, row.first_turn_correct, row.turns_to_first_correct, row.best_turn, row.model_turns) == (
        True,
        True,
        1,
        3,
        6,
    )


@pytest.mark.parametrize(
    "args,needle",
    [
        (["tests/corpus/tasks/relu.py"], "no model"),
        pytest.param(
            ["tests/corpus/tasks/relu.py", "--model", "nosuchprovider/m"],
            "cannot route model",
            # litellm routes it (an import of seconds): on the worker that imports litellm for test_agent_models
            marks=pytest.mark.xdist_group("litellm"),
        ),
        (["tests/corpus/tasks/relu.py", "--model", "replay:/no/such/dir/"], "no replay file"),
        (["tests/corpus/tasks/missing_inputs.py", "--model", "replay:examples/replays/relu.jsonl"], "lacks get_inputs"),
        (
            ["tests/corpus/tasks/relu.py", "--model", "replay:examples/replays/relu.jsonl", "--workers", "0"],
            "--workers",
        ),
    ],
)
def test_bad_batch_input_exits_2_and_creates_nothing(args, needle, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    out = tmp_path / "out"
    assert main(["batch", *args, "--out", str(out), "--device", "cpu"]) == EXIT_USAGE
    assert needle in capsys.readouterr().err
    assert not out.exists()


# --------------------------------------------------------------------------- a batch, killed and rerun


@pytest.mark.slow
def test_batch_killed_then_rerun_skips_finished_and_resumes_unfinished(tmp_path):
    replays = tmp_path / "replays"
    replays.mkdir()
    shutil.copy(SCALE_REPLAY, replays / "scale.jsonl")
    write_replay(replays / "relu.jsonl", [reply("triton_wrong_values.py"), reply("triton_relu_ok.py")])
    out = tmp_path / "out"
    # one worker: scale runs first, then relu, which is killed in its second turn
    args = [
        str(SCALE),
        str(TASK),
        "--model",
        f"replay:{replays}",
        "--device",
        "cpu",
        "--no-shape-block",
        "--trials",
        "2",
        "--out",
        str(out),
        "--workers",
        "1",
    ]
    proc = batch_cli(*args)
    relu = next(iter(plan([str(TASK)], settings(out.resolve(), model=f"replay:{replays}")))).session_dir
    deadline = time.monotonic() + 300
    while not (relu / "work" / "turn-002" / "logs").exists():  # made as turn 2's candidate worker starts
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "relu's second turn was never judged"
        time.sleep(0.05)
    worker = lock_holder(relu / ".lock")  # the worker process running relu's session
    assert worker is not None and worker != proc.pid
    proc.send_signal(signal.SIGKILL)  # no chance to clean up: the worker must notice on its own
    proc.wait()

    # the orphaned worker records the interruption and exits (its log complete, its lock free)
    assert wait_gone(worker, within_s=60), "the worker outlived the batch"
    assert lock_holder(relu / ".lock") is None
    scale_before = json.loads(next((out / "sessions").glob("scale-*/trajectory.json")).read_text())
    relu_before = check_session_dir(relu)
    assert scale_before["outcome"]["finished"] and [t.index for t in relu_before.turns] == [1]
    worker_logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((out / "logs").glob("*.log")))
    assert not relu_before.outcome.finished and relu_before.outcome.resumable, (
        f"the interruption was not recorded:\n{worker_logs}"
    )

    proc = batch_cli(*args, "--json")
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert "skipped (done earlier)" in stderr and "correct so far" in stderr
    summary = json.loads(stdout)
    rows = {r["task"]: r for r in summary["rows"]}
    assert (rows["scale"]["run"], rows["relu"]["run"]) == ("skipped", "resumed")
    relu_after = check_session_dir(relu)  # one commit per turn: nothing judged twice
    assert [(t.index, t.verdict.category.value) for t in relu_after.turns] == [
        (1, "correctness_error:numerical"),
        (2, "ok"),
    ]
    assert relu_after.turns[0] == relu_before.turns[0]
    assert "resumed with 1 judged turns" in (out / "logs" / f"{relu.name}.log").read_text()

    # the report: every metric, and "not timed" rather than zeros on cpu
    assert (summary["tasks"], summary["finished"], summary["correct"]) == (2, 2, 2)
    assert summary["correct_rate"] == summary["best_turn_pass_rate"] == 1.0
    assert summary["first_turn_pass_rate"] == 0.5 and summary["mean_turns_to_first_correct"] == 1.5
    assert summary["fast_p_eager"] == summary["fast_p_compile"] == NOT_TIMED
    assert summary["categories"] == {"ok": 2, "correctness_error:numerical": 1}
    md = (out / "summary.md").read_text()
    assert "| eager | not timed |" in md and "first-turn pass rate | 50.0%" in md
    for png in summary["plots"]:
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the sessions export as SFT data; with the default filters the repair (relu: wrong, then correct) is kept
    # though nothing is timed on CPU, and scale, correct from its first turn, has no gain to show
    assert main(["export", str(out), "--out", str(tmp_path / "sft.jsonl")]) == 0
    records = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert [(r["metadata"]["task"], r["metadata"]["kind"]) for r in records] == [("relu", "repair")]
    fates = {f["task"]: f["rule"] for f in json.loads((tmp_path / "ANALYSIS.json").read_text())["sessions"]}
    assert fates == {
        "relu": "speedup_gain: repair session (turn 1 correctness_error:numerical, correct at turn 2): kept whatever its gain",
        "scale": "speedup_gain: not timed",
    }
    assert main(["export", str(out), "--out", str(tmp_path / "sft.jsonl"), "--min-speedup-gain", "0"]) == 0
    records = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert sorted(r["metadata"]["task"] for r in records) == ["relu", "scale"]


def test_a_worker_stops_once_however_many_sigterms_come(monkeypatch):
    """A dead batch's PDEATHSIG reaches its worker once per thread the kernel reparents it to (6 SIGTERMs
    within 2 ms, measured with 7 threads): the first stops the job, the rest must not interrupt the
    session while it records where it stopped (a second KeyboardInterrupt there lost the record)."""
    from kernelfix.agent.batch import worker

    monkeypatch.setattr(worker, "_stopping", False)
    with pytest.raises(KeyboardInterrupt):
        worker._terminate(signal.SIGTERM, None)
    assert worker._terminate(signal.SIGTERM, None) is None
    assert worker._terminate(signal.SIGTERM, None) is None


def test_a_crashing_session_fails_alone(tmp_path):
    """One job's worker is killed, another's task does not run: both are recorded, the batch finishes."""
    replay = write_replay(tmp_path / "r.jsonl", [reply("triton_relu_ok.py")])
    s = settings(tmp_path / "out", model=f"replay:{replay}")
    broken = TASK.parent / "broken_import.py"
    jobs = plan([str(broken), str(TASK)], s)
    out = OutDir(s.out)

    def kill_relu(job):
        if job.name.startswith("relu"):

            def later():
                while job.name not in runner._procs:
                    time.sleep(0.01)
                time.sleep(1.0)  # the worker is importing; it dies before its session writes anything
                runner._procs[job.name].kill()

            threading.Thread(target=later, daemon=True).start()

    done = []
    # a fake device list: the CPU judge ignores it, and each slot's results say which GPU it had
    runner = LocalRunner(out, workers=2, gpus=["0", "1"], on_start=kill_relu, on_done=lambda job, res: done.append(res))
    results = runner.run(jobs)
    assert [r.name for r in results] == [j.name for j in jobs] and len(done) == 2
    bad, killed = results
    assert bad.status == "failed" and "this_module_does_not_exist" in bad.error
    assert killed.status in ("failed", "unfinished") and "worker process died (signal SIGKILL)" in killed.error
    assert json.loads((Path(s.out) / "results" / f"{killed.name}.json").read_text())["error"] == killed.error
    assert {bad.gpu, killed.gpu} == {"0", "1"}  # two slots, one GPU each
    rows = summarize(
        [
            TaskOutcome(name=r.name, task=r.task, session_dir=r.session_dir, run=r.run, status=r.status, error=r.error)
            for r in results
        ]
    )
    assert rows.failed + rows.unfinished == 2 and "## Errors" in markdown(rows, [])


def test_default_workers_use_every_gpu(monkeypatch):
    from kernelfix.agent.batch.local_runner import default_workers
    from kernelfix.tools.gpu.visible import visible_gpus

    assert default_workers(jobs=10, cpus=16, gpus=2) == 8  # half the cores
    assert default_workers(jobs=10, cpus=2, gpus=2) == 2  # one per GPU even on few cores
    assert default_workers(jobs=1, cpus=16, gpus=2) == 1 and default_workers(jobs=3, cpus=1, gpus=0) == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3,")
    assert visible_gpus() == ["2", "3"]


# --------------------------------------------------------------------------- the device lease


def test_device_lease_queues_across_processes(tmp_path):
    from kernelfix.tools.gpu.lease import DeviceLease

    lease = DeviceLease(tmp_path, "0")
    held, release = tmp_path / "held", tmp_path / "release"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time, pathlib\n"
                "from kernelfix.tools.gpu.lease import DeviceLease\n"
                f"with DeviceLease(pathlib.Path({str(tmp_path)!r}), '0').hold():\n"
                f"    pathlib.Path({str(held)!r}).touch()\n"
                f"    while not pathlib.Path({str(release)!r}).exists(): time.sleep(0.02)\n"
            ),
        ]
    )
    while not held.exists():
        assert holder.poll() is None
        time.sleep(0.02)
    got = threading.Event()

    def take():
        with lease.hold():
            got.set()

    t = threading.Thread(target=take, daemon=True)
    t.start()
    assert not got.wait(0.5)  # waits in line while the other process holds the GPU
    release.touch()
    assert got.wait(30)
    holder.wait(timeout=30)
    with DeviceLease(tmp_path, "1").hold(), DeviceLease(tmp_path, "0").hold():
        pass  # another GPU's lease is independent
    holds = lease_holds(tmp_path / "gpu-0.log")
    assert [h["pid"] for h in holds] == [holder.pid, os.getpid(), os.getpid()]


def lease_holds(log: Path) -> list[dict]:
    """The holds a lease log records, checked never to overlap."""
    holds = [json.loads(line) for line in log.read_text().splitlines()]
    for a, b in zip(holds, holds[1:]):
        assert a["got"] <= a["released"] <= b["got"], (a, b)
    return holds


def test_judge_takes_the_lease_for_gpu_stages_only(tmp_path):
    """The reference's trials and the candidate's trials run under the GPU's lock; the candidate's build does not.
    (On the CPU there is no lease; one is put in by hand, and its hold log is the record.)"""
    from kernelfix.tools.gpu.lease import DeviceLease
    from kernelfix.tools.handles import sandboxing
    from kernelfix.tools.judge import Judge

    # The run's cache (conftest's), not one of its own: the lease is this test's (below), and a cache of its own made
    # its judge start fork servers of its own (they are keyed by the cache), importing torch from source (seconds).
    assert sandboxing.env("candidate", tmp_path / "w", "cuda", "3")["CUDA_VISIBLE_DEVICES"] == "3"
    with Judge(TASK, JudgeConfig(device="cpu", trials=2, input_variants=[]), workdir=tmp_path / "j") as j:
        j._share.device_lease = DeviceLease(tmp_path / "locks", "3")
        ev = j.start(reply("triton_relu_ok.py"), filename="reply.md")
        ev = j.compile(ev)
        compiled_at = time.time()
        for stage in (j.correctness, j.legality, j.benchmark):
            ev = stage(ev)
        assert j.finish(ev).ok
    log = [json.loads(line) for line in (tmp_path / "locks" / "gpu-3.log").read_text().splitlines()]
    holds = [h for h in log if h["mode"] != "room"]  # (room for each stage's memory is logged beside its holds)
    # The survey, then each trial (3: two, and the in-place check), shared: none needs the GPU alone.
    assert [(h["what"], h["mode"]) for h in holds] == [("relu reference", "shared")] + [
        ("relu correctness", "shared")
    ] * 3
    assert [h["what"] for h in log if h["mode"] == "room"] == ["relu reference", "relu correctness"]
    assert holds[1]["got"] >= compiled_at  # the build was done before the candidate's trials held the GPU
    assert all(a["released"] <= b["got"] for a, b in zip(holds, holds[1:]))  # one evaluation: one at a time


# --------------------------------------------------------------------------- report metrics


def _row(name, *, correct=True, timed=True, eager=None, compile_=None, first=False, ttc=None):
    return TaskOutcome(
        name=name,
        task=name,
        session_dir="/x",
        run="new",
        status="finished",
        timed=timed,
        correct=correct,
        first_turn_correct=first,
        turns_to_first_correct=ttc,
        speedup_eager=eager,
        speedup_compile=compile_,
        model_turns=3,
        categories=["ok" if correct else "correctness_error:numerical"],
    )


def test_fast_p_and_rates_on_timed_rows(tmp_path):
    from kernelfix.agent.batch.plots import write_plots

    rows = [
        _row("a", eager=2.5, compile_=1.2, first=True, ttc=1),
        _row("b", eager=1.2, compile_=0.8, ttc=2),
        _row("c", eager=0.9, compile_=0.5, ttc=3),
        _row("d", correct=False),
    ]
    s = summarize(rows)
    assert s.fast_p_eager == {"0": 0.75, "1.0": 0.5, "1.5": 0.25, "2.0": 0.25}
    assert s.fast_p_compile == {"0": 0.75, "1.0": 0.25, "1.5": 0.0, "2.0": 0.0}
    assert s.correct_rate == 0.75 and s.first_turn_pass_rate == 0.25 and s.mean_turns_to_first_correct == 2.0
    assert s.median_speedup_eager == 1.2
    md = markdown(s, [])
    assert "| eager | 75.0% | 50.0% | 25.0% | 25.0% |" in md and NOT_TIMED not in md
    plots = write_plots(tmp_path, s)
    assert len(plots) == 3 and all((tmp_path / p).stat().st_size > 1000 for p in plots)


def test_fast_p_by_kernelbench_allclose_leaves_out_kernels_passed_by_the_float64_rule():
    rows = [_row("a", eager=2.5, compile_=1.2), _row("b", eager=1.2, compile_=0.8), _row("c", correct=False)]
    rows[0].kernelbench_allclose = False  # closer to float64 than the reference, outside its atol/rtol
    rows[1].kernelbench_allclose = True
    s = summarize(rows)
    assert s.fast_p_eager == {
        "0": round(2 / 3, 4),
        "1.0": round(2 / 3, 4),
        "1.5": round(1 / 3, 4),
        "2.0": round(1 / 3, 4),
    }
    assert s.fast_p_eager_kernelbench == {"0": round(1 / 3, 4), "1.0": round(1 / 3, 4), "1.5": 0.0, "2.0": 0.0}
    assert "| eager, KernelBench allclose only | 33.3% | 33.3% | 0.0% | 0.0% |" in markdown(s, [])
