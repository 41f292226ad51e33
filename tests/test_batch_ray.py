"""`kernelfix batch --ray` against a real Ray cluster that this module starts on loopback (`ray start --head`,
two CPUs and two fake GPUs): the same per-task results as the local runner, a Ray worker killed mid-job whose
batch rerun resumes the job, and jobs spread over the GPUs Ray hands out."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from agent_support import REPO, TASK, check_session_dir, reply, write_replay
from proc_support import lock_holder
from test_batch import SCALE, SCALE_REPLAY, batch_cli, settings

from kernelfix.agent.batch.plan import plan
from kernelfix.agent.batch.ray_backend import LOOPBACK_ENV, gpu_share

# Loopback only (no traffic to the machine's network address), no usage report to Ray's servers, and the
# cluster's auth token given here (Ray would otherwise read or write one in ~/.ray).
RAY_ENV = {
    LOOPBACK_ENV: "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "token",
    "RAY_AUTH_TOKEN": secrets.token_hex(32),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _session_members(sid: int) -> list[int]:
    """Processes in session ``sid`` (what `ray start --block` started, workers included)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # field 6 of /proc/PID/stat, counted after the command name
            pids.append(int(stat.parent.name))
    return pids


@pytest.fixture(scope="module")
def ray_cluster():
    """A one-node Ray cluster on 127.0.0.1; its address. Stopped with its own processes only (never `ray stop`)."""
    temp = Path(tempfile.mkdtemp(prefix="kf-ray-"))  # short: Ray's unix socket paths must fit 107 bytes
    port = _free_port()
    argv = [
        sys.executable,
        "-m",
        "ray.scripts.scripts",
        "start",
        "--head",
        "--block",
        "--disable-usage-stats",
        "--node-ip-address=127.0.0.1",
        f"--port={port}",
        f"--temp-dir={temp}",
        "--num-cpus=2",
        "--num-gpus=2",  # fake GPUs: Ray assigns them (CUDA_VISIBLE_DEVICES) as it would real ones
        "--include-dashboard=false",
        f"--dashboard-port={_free_port()}",
        f"--dashboard-agent-listen-port={_free_port()}",
        f"--object-store-memory={100 << 20}",
    ]
    log = open(temp / "ray_start.log", "w+")
    head = subprocess.Popen(
        argv, env={**os.environ, **RAY_ENV}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while "Ray runtime started" not in (temp / "ray_start.log").read_text():
        assert head.poll() is None and time.monotonic() < deadline, (temp / "ray_start.log").read_text()[-3000:]
        time.sleep(0.2)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        head.send_signal(signal.SIGTERM)  # --block: stops what it started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        for pid in _session_members(head.pid):  # anything left behind, by id
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        head.wait()
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def ray_batch(*args: str) -> subprocess.Popen:
    return batch_cli(*args, env=RAY_ENV)


@pytest.mark.slow
def test_ray_backend_gives_the_same_per_task_results(tmp_path, ray_cluster):
    """The per-task function as a Ray task: same turns and outcome as the local runner."""
    replay = write_replay(
        tmp_path / "scale.jsonl",
        [reply("triton_relu_ok.py", "Wrong kernel for this task."), json.loads(SCALE_REPLAY.read_text())],
    )
    common = [
        str(SCALE),
        "--model",
        f"replay:{replay}",
        "--device",
        "cpu",
        "--no-shape-block",
        "--trials",
        "2",
        "--json",
    ]
    found = {}
    for name, extra in (("local", []), ("ray", ["--ray", ray_cluster, "--workers", "1"])):
        proc = ray_batch(*common, "--out", str(tmp_path / name), *extra)
        stdout, stderr = proc.communicate(timeout=400)
        assert proc.returncode == 0, stderr
        (row,) = json.loads(stdout)["rows"]
        found[name] = {
            k: row[k] for k in ("status", "correct", "categories", "turns_to_first_correct", "model_turns", "best_turn")
        }
    assert (
        found["ray"]
        == found["local"]
        == {
            "status": "finished",
            "correct": True,
            "categories": ["correctness_error:numerical", "ok"],
            "turns_to_first_correct": 2,
            "model_turns": 2,
            "best_turn": 2,
        }
    )


@pytest.mark.slow
def test_a_ray_worker_killed_mid_job_is_resumed_by_the_rerun(tmp_path, ray_cluster):
    replays = tmp_path / "replays"
    replays.mkdir()
    write_replay(replays / "relu.jsonl", [reply("triton_wrong_values.py"), reply("triton_relu_ok.py")])
    out = tmp_path / "out"
    args = [
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
        "--ray",
        ray_cluster,
        "--json",
    ]
    (job,) = plan([str(TASK)], settings(out.resolve(), model=f"replay:{replays}"))
    relu = job.session_dir
    proc = ray_batch(*args)
    deadline = time.monotonic() + 300
    while not (relu / "work" / "turn-002" / "logs").exists():  # made as turn 2's candidate worker starts
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "relu's second turn was never judged"
        time.sleep(0.05)
    worker = lock_holder(relu / ".lock")  # the Ray worker process running the session
    assert worker is not None and worker != proc.pid
    os.kill(worker, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr  # the batch goes on to its report; this job did not finish
    (row,) = json.loads(stdout)["rows"]
    assert row["status"] == "unfinished" and row["error"].startswith("Ray task failed"), row
    before = check_session_dir(relu)
    assert [t.index for t in before.turns] == [1] and not before.outcome.finished

    proc = ray_batch(*args)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    (row,) = json.loads(stdout)["rows"]
    assert (row["run"], row["status"], row["correct"]) == ("resumed", "finished", True)
    after = check_session_dir(relu)  # one commit per turn: nothing judged twice
    assert [(t.index, t.verdict.category.value) for t in after.turns] == [(1, "correctness_error:numerical"), (2, "ok")]
    assert after.turns[0] == before.turns[0]


def test_gpu_share_spreads_jobs_over_the_gpus():
    assert gpu_share(per_gpu=4, jobs=4, cluster_gpus=2) == 0.5  # 2 per GPU, not 4 on GPU 0
    assert gpu_share(per_gpu=4, jobs=16, cluster_gpus=2) == 0.25
    assert gpu_share(per_gpu=4, jobs=1, cluster_gpus=8) == 1.0
    assert gpu_share(per_gpu=3, jobs=5, cluster_gpus=0) == 1 / 3  # no GPU known: the user's setting


@pytest.mark.slow
def test_ray_jobs_land_on_every_gpu(tmp_path, ray_cluster):
    """Two jobs with up to 4 sessions per GPU on a 2-GPU node: Ray packs fractional GPUs, so without
    the share fitted to the jobs both would get GPU 0. Each result says the GPU Ray gave it."""
    manifest = tmp_path / "m.jsonl"
    broken = TASK.parent / "broken_import.py"  # fails at its reference: a quick job
    manifest.write_text("".join(json.dumps({"task": str(broken), "target": t}) + "\n" for t in (1.0, 2.0)))
    write_replay(tmp_path / "r.jsonl", ["no code"])
    jobs = plan([str(manifest)], settings(tmp_path / "out", model=f"replay:{tmp_path / 'r.jsonl'}"))
    script = (
        "import json, sys\n"
        "from kernelfix.agent.batch.plan import Job\n"
        "from kernelfix.agent.batch.ray_backend import RayRunner\n"
        "from kernelfix.agent.batch.local_runner import OutDir\n"
        "jobs = [Job.model_validate_json(j) for j in json.loads(sys.stdin.read())]\n"
        f"runner = RayRunner(OutDir({str(tmp_path / 'out')!r}), address={ray_cluster!r}, per_gpu=4, cuda=True)\n"
        "print(json.dumps([r.model_dump() for r in runner.run(jobs)]))\n"
    )
    run = subprocess.run(
        [sys.executable, "-P", "-c", script],
        input=json.dumps([j.model_dump_json() for j in jobs]),
        cwd=REPO,
        env={**os.environ, **RAY_ENV},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout.splitlines()[-1])
    assert [r["status"] for r in results] == ["failed", "failed"] and all("does not run" in r["error"] for r in results)
    assert sorted(r["gpu"] for r in results) == ["0", "1"]
