"""Run a batch's jobs on this machine: one child process per job, N at a time.

    OUT/
      batch.lock               one batch per OUT at a time
      plan.json                the jobs of the latest run
      sessions/<name>/         each job's session (kernelfix.agent.session_dir)
      results/<name>.json      what the latest run did with it (kernelfix.agent.batch.worker.TaskResult)
      logs/<name>.log          its turn lines, appended run after run

Each job runs in its own child (``python -m kernelfix.agent.batch.worker``), so a crash
of one (even a segfault) fails that job alone. The children compile in parallel;
on a GPU machine, worker slot i judges on GPU i mod G, and the judge's device
lease queues GPU stages per device, so timed runs never share a GPU. A finished
session is skipped without starting a child; an unfinished one is resumed.
"""

from __future__ import annotations

import fcntl
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kernelfix.agent.batch.plan import Job
from kernelfix.agent.batch.worker import TaskResult, died_result, finished_result, prior_state
from kernelfix.base import atomic

JobStarted = Callable[[Job], None]
JobDone = Callable[[Job, TaskResult], None]
STOP_GRACE_S = 20.0  # how long an interrupted child may take to record where it stopped


class BatchBusy(Exception):
    """Another batch process is using this OUT directory."""


class OutDir:
    def __init__(self, path: str | Path):
        self.path = Path(path).resolve()
        for sub in ("sessions", "results", "logs"):
            (self.path / sub).mkdir(parents=True, exist_ok=True)
        self._lock = None

    def lock(self) -> None:
        f = open(self.path / "batch.lock", "a+")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            raise BatchBusy(f"{self.path} is in use by another kernelfix batch") from None
        self._lock = f

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def result_path(self, name: str) -> Path:
        return self.path / "results" / f"{name}.json"

    def log_path(self, name: str) -> Path:
        return self.path / "logs" / f"{name}.log"

    def write_plan(self, jobs: list[Job]) -> None:
        text = "[\n" + ",\n".join(j.model_dump_json() for j in jobs) + "\n]\n"
        atomic.write_text(self.path / "plan.json", text)

    def write_result(self, result: TaskResult) -> None:
        atomic.write_json(self.result_path(result.name), result)


def pending(jobs: list[Job], done: JobDone) -> list[Job]:
    """The jobs that must run; ``done`` gets the others (finished by an earlier run) at once."""
    todo = []
    for job in jobs:
        res = finished_result(job)
        if res is None:
            todo.append(job)
        else:
            done(job, res)
    return todo


def default_workers(jobs: int, cpus: int, gpus: int) -> int:
    """Sessions at a time when --workers is not given: half the cores (compiles are CPU work), but at
    least one per GPU, so a machine with more GPUs than that still judges on every one; never more than the jobs."""
    return max(1, min(jobs, max(cpus // 2, gpus)))


class LocalRunner:
    """N worker slots, each running one job at a time in a child process."""

    def __init__(
        self,
        out: OutDir,
        *,
        workers: int,
        gpus: list[str],
        on_start: JobStarted | None = None,
        on_done: JobDone | None = None,
    ):
        self.out = out
        self.workers = max(1, workers)
        self.gpus = gpus
        self.on_start = on_start
        self.on_done = on_done
        self._procs: dict[str, subprocess.Popen] = {}
        self._guard = threading.Lock()
        self._stopping = threading.Event()
        self._report = threading.Lock()  # callbacks one at a time

    def run(self, jobs: list[Job]) -> list[TaskResult]:
        results: dict[str, TaskResult] = {}
        todo: queue.Queue[Job] = queue.Queue()
        for job in pending(jobs, lambda job, res: self._finish(job, res, results)):
            todo.put(job)
        slots = [
            threading.Thread(
                target=self._slot,
                args=(todo, self.gpus[i % len(self.gpus)] if self.gpus else None, results),
                name=f"batch-slot-{i}",
                daemon=True,
            )
            for i in range(min(self.workers, todo.qsize()))
        ]
        for t in slots:
            t.start()
        try:
            while any(t.is_alive() for t in slots):
                for t in slots:
                    t.join(timeout=0.2)
        except BaseException:  # Ctrl-C: every child records where it stopped, then the batch ends
            self.stop()
            for t in slots:
                t.join(timeout=STOP_GRACE_S + 5)
            raise
        return [results[j.name] for j in jobs if j.name in results]

    def stop(self) -> None:
        self._stopping.set()
        with self._guard:
            procs = list(self._procs.values())
        for p in procs:
            _signal(p, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal(p, signal.SIGKILL)

    def _finish(self, job: Job, result: TaskResult, results: dict[str, TaskResult]) -> None:
        self.out.write_result(result)
        with self._report:
            results[job.name] = result
            if self.on_done:
                self.on_done(job, result)

    def _slot(self, todo: queue.Queue, gpu: str | None, results: dict[str, TaskResult]) -> None:
        while not self._stopping.is_set():
            try:
                job = todo.get_nowait()
            except queue.Empty:
                return
            if self.on_start:
                with self._report:
                    self.on_start(job)
            try:
                result = self._run_child(job, gpu)
            except Exception as e:  # could not even start the worker: this job fails, the others go on
                result = TaskResult(
                    name=job.name,
                    task=job.task,
                    session_dir=str(job.session_dir),
                    run="new",
                    status="failed",
                    error=f"cannot run the worker: {e}",
                    gpu=gpu,
                )
            self._finish(job, result, results)

    def _run_child(self, job: Job, gpu: str | None) -> TaskResult:
        result_file = self.out.result_path(job.name)
        result_file.unlink(missing_ok=True)
        log = self.out.log_path(job.name)
        # -P and OUT as the working directory: a source checkout in the caller's cwd never shadows the installed package
        argv = [
            sys.executable,
            "-P",
            "-m",
            "kernelfix.agent.batch.worker",
            "--result",
            str(result_file),
            "--log",
            str(log),
            "--parent",
            str(os.getpid()),
        ]
        if gpu is not None:
            argv += ["--gpu", gpu]
        t0 = time.monotonic()
        before, _ = prior_state(job.session_dir)
        with open(log, "a", encoding="utf-8") as log_f:
            log_f.write(
                f"=== batch run {time.strftime('%Y-%m-%d %H:%M:%S')}: {job.name} ({job.task}){f' on GPU {gpu}' if gpu else ''}\n"
            )
            log_f.flush()
            # Its own session: a Ctrl-C at the terminal reaches the batch, which stops the children in order.
            proc = subprocess.Popen(
                argv,
                cwd=self.out.path,
                stdin=subprocess.PIPE,
                stdout=log_f,
                stderr=log_f,
                text=True,
                start_new_session=True,
            )
            with self._guard:
                self._procs[job.name] = proc
            try:
                proc.communicate(job.model_dump_json())
            finally:
                with self._guard:
                    self._procs.pop(job.name, None)
        try:
            return TaskResult.model_validate_json(result_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            how = (
                f"signal {signal.Signals(-proc.returncode).name}"
                if proc.returncode < 0
                else f"exit code {proc.returncode}"
            )
            return died_result(
                job,
                was_new=before == "new",
                error=f"the worker process died ({how}); see {log}",
                wall_s=time.monotonic() - t0,
                gpu=gpu,
            )


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass
