"""The same batch on a Ray cluster (``kernelfix batch --ray ADDRESS``; ``pip install 'kernelfix[ray]'``).

Each job is ``kernelfix.agent.batch.worker.run_logged`` (the local runner's per-task
function) run as a Ray task: same session directory, same judge, same result.
OUT, the task files and replay files must be at the same paths on every node
(a shared filesystem). Each task asks for one CPU, and on a GPU cluster
1/``per_gpu`` of a GPU: Ray then sets CUDA_VISIBLE_DEVICES for the task, and the
judge's device lease (a lock file per GPU in each node's kernelfix cache)
queues the GPU stages of the ``per_gpu`` sessions that share a GPU, so their
compiles overlap and their timings do not. A worker that dies fails its job
only. API keys are not shipped: set the key's variable on the cluster's nodes.
"""

from __future__ import annotations

import os
from pathlib import Path

from kernelfix.agent.batch.plan import Job
from kernelfix.agent.batch.runner import JobDone, OutDir, pending
from kernelfix.agent.batch.worker import TaskResult, prior_state

# Passed to every Ray worker: offline litellm, the same kernelfix cache location where one is set.
_FORWARDED_ENV = ("LITELLM_LOCAL_MODEL_COST_MAP", "KERNELFIX_CACHE", "TRITON_INTERPRET")


class RayUnavailable(Exception):
    pass


def ray_module():
    try:
        import ray
    except ImportError:
        raise RayUnavailable("--ray needs Ray: pip install 'kernelfix[ray]'") from None
    return ray


def _job_on_ray(job_json: str, log_path: str) -> str:
    """The Ray task: one job, in the Ray worker's process (JSON in and out: no pickled kernelfix types)."""
    from kernelfix.agent.batch.worker import run_logged

    job = Job.model_validate_json(job_json)
    return run_logged(job, Path(log_path)).model_dump_json()


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
        ray = ray_module()
        results: dict[str, TaskResult] = {}
        todo = pending(jobs, lambda job, res: self._finish(job, res, results))
        if todo:
            env = {k: os.environ[k] for k in _FORWARDED_ENV if k in os.environ}
            ray.init(address=self.address, runtime_env={"env_vars": env}, log_to_driver=False, include_dashboard=False)
            try:
                self._run(ray, todo, results)
            finally:
                ray.shutdown()
        return [results[j.name] for j in jobs if j.name in results]

    def _run(self, ray, todo: list[Job], results: dict[str, TaskResult]) -> None:
        task = ray.remote(_job_on_ray).options(num_cpus=1, num_gpus=(1 / self.per_gpu) if self.cuda else 0, max_retries=0)
        refs = {}
        fresh = {job.name: prior_state(job.session_dir)[0] == "new" for job in todo}
        for job in todo:
            refs[task.remote(job.model_dump_json(), str(self.out.log_path(job.name)))] = job
        try:
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1)
                for ref in ready:
                    job = refs.pop(ref)
                    try:
                        res = TaskResult.model_validate_json(ray.get(ref))
                    except Exception as e:  # the worker died, or Ray lost the task: this job fails, the batch goes on
                        res = TaskResult(
                            name=job.name, task=job.task, session_dir=str(job.session_dir), run="new" if fresh[job.name] else "resumed",
                            status="failed",
                            error=f"Ray task failed: {type(e).__name__}: {e}"
                        )
                    self._finish(job, res, results)
        except BaseException:
            for ref in refs:  # Ctrl-C: the sessions record where they stopped (KeyboardInterrupt in each task)
                ray.cancel(ref)
            raise
