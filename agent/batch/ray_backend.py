"""The same batch on a Ray cluster (``kernelfix batch --ray ADDRESS``; ``pip install 'kernelfix[ray]'``).

Each job is ``kernelfix.agent.batch.worker.run_logged`` (the local runner's per-task
function) run as a Ray task: same session directory, same judge, same result.
OUT, the task files and replay files must be at the same paths on every node
(a shared filesystem). Each task asks for one CPU, and on a GPU cluster
1/``per_gpu`` of a GPU: Ray then sets CUDA_VISIBLE_DEVICES for the task, and the
judge's device lease (a lock file per GPU in each node's kernelfix cache)
queues the GPU stages of the ``per_gpu`` sessions that share a GPU, so their
compiles overlap and their timings do not. Ray packs fractional GPUs (it fills
GPU 0 before it uses GPU 1), so a batch of fewer than ``per_gpu`` x GPUs jobs asks
for a larger share each: ``ceil(jobs / GPUs)`` sessions per GPU, every GPU used.
A worker that dies fails its job only, and a rerun resumes it. API keys are not
shipped: set the key's variable on the cluster's nodes.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from pathlib import Path

from kernelfix.agent.batch.local_runner import JobDone, OutDir, pending
from kernelfix.agent.batch.plan import Job
from kernelfix.agent.batch.worker import TaskResult, died_result, prior_state

# Passed to every Ray worker: offline litellm, the same kernelfix cache location where one is set.
_FORWARDED_ENV = ("LITELLM_LOCAL_MODEL_COST_MAP", "KERNELFIX_CACHE", "TRITON_INTERPRET")


class RayUnavailable(Exception):
    pass


# Ray takes the node's network address even for a cluster of one machine; this (Ray's switch for
# single-machine platforms, read when ray is imported) keeps a throwaway `--ray local` cluster on loopback.
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def ray_module(address: str | None = None):
    if address == "local":
        os.environ.setdefault(LOOPBACK_ENV, "0")
    try:
        import ray
    except ImportError:
        raise RayUnavailable("--ray needs Ray: pip install 'kernelfix[ray]'") from None
    return ray


def _job_on_ray(job_json: str, log_path: str) -> str:
    """The Ray task: one job, in the Ray worker's process (JSON in and out: no pickled kernelfix types)."""
    import ray

    from kernelfix.agent.batch.worker import run_logged

    job = Job.model_validate_json(job_json)
    res = run_logged(job, Path(log_path))
    gpus = ",".join(str(g) for g in ray.get_gpu_ids())  # the GPU Ray gave this task (its CUDA_VISIBLE_DEVICES)
    return res.model_copy(update={"gpu": gpus or None}).model_dump_json()


def gpu_share(per_gpu: int, jobs: int, cluster_gpus: float) -> float:
    """The fraction of a GPU each job asks Ray for: at most ``per_gpu`` sessions on a GPU, and no more
    than the jobs need, since Ray fills one GPU before the next."""
    if cluster_gpus < 1:
        return 1 / per_gpu  # no GPU known yet (an autoscaling cluster): Ray waits for one
    return 1 / max(1, min(per_gpu, math.ceil(jobs / int(cluster_gpus))))


class RayRunner:
    def __init__(self, out: OutDir, *, address: str, per_gpu: int, cuda: bool, on_done: JobDone | None = None):
        self.out = out
        self.address = address
        self.per_gpu = max(1, per_gpu)
        self.cuda = cuda
        self.on_done = on_done

    def _finish(self, job: Job, result: TaskResult, results: dict[str, TaskResult]) -> None:
        self.out.write_result(result)
        results[job.name] = result
        if self.on_done:
            self.on_done(job, result)

    def run(self, jobs: list[Job]) -> list[TaskResult]:
        results: dict[str, TaskResult] = {}
        todo = pending(jobs, lambda job, res: self._finish(job, res, results))
        if todo:
            env = {k: os.environ[k] for k in _FORWARDED_ENV if k in os.environ}
            ray = ray_module(self.address)
            # Ray's driver prints cluster errors (a worker that died) on stdout, which is `--json`'s: to stderr with them.
            with contextlib.redirect_stdout(sys.stderr):
                ray.init(
                    address=self.address, runtime_env={"env_vars": env}, log_to_driver=False, include_dashboard=False
                )
                try:
                    self._run(ray, todo, results)
                finally:
                    ray.shutdown()
        return [results[j.name] for j in jobs if j.name in results]

    def _run(self, ray, todo: list[Job], results: dict[str, TaskResult]) -> None:
        share = gpu_share(self.per_gpu, len(todo), ray.cluster_resources().get("GPU", 0)) if self.cuda else 0
        task = ray.remote(_job_on_ray).options(num_cpus=1, num_gpus=share, max_retries=0)
        refs = {}
        fresh = {job.name: prior_state(job.session_dir)[0] == "new" for job in todo}
        t0 = time.monotonic()
        for job in todo:
            refs[task.remote(job.model_dump_json(), str(self.out.log_path(job.name)))] = job
        try:
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1)
                for ref in ready:
                    job = refs.pop(ref)
                    try:
                        res = TaskResult.model_validate_json(ray.get(ref))
                    except Exception as e:  # the worker died, or Ray lost the task: this job stops, the batch goes on
                        why = " ".join(str(e).split())[:500]
                        res = died_result(
                            job,
                            was_new=fresh[job.name],
                            error=f"Ray task failed: {type(e).__name__}: {why}",
                            wall_s=time.monotonic() - t0,
                        )
                    self._finish(job, res, results)
        except BaseException:
            for ref in refs:  # Ctrl-C: the sessions record where they stopped (KeyboardInterrupt in each task)
                ray.cancel(ref)
            raise
