"""The tune's sessions are a batch's: one job per captured module, in ``DIR/sessions/<name>``.

Jobs are planned by :func:`kernelfix.agent.batch.plan.plan` (names that find the same session again,
a task that does not load refused before anything runs), run by the batch's local runner (one worker
process per session, GPU stages queued per GPU) or one after the other in the terminal UI, and a
rerun skips finished sessions and resumes the others, as ``kernelfix batch`` does.

Which recorded replies a replay model gives each module: ``--model replay:FILE`` answers every
session from FILE; ``--model replay:DIR`` answers a module's session from ``DIR/<task stem>.jsonl``
(the module path with ``_`` for ``.``: ``model_blocks_0_attn.jsonl``, batch's rule), else from
``DIR/<ModuleClass>.jsonl`` (``CausalSelfAttention.jsonl``: one recording serves every instance of a
class, as its kernel reads each instance's own weights).
"""

from __future__ import annotations

from pathlib import Path

from kernelfix.agent.batch.plan import BatchSettings, Job, PlanError, plan
from kernelfix.agent.batch.worker import TaskResult, prior_state
from kernelfix.agent.models import REPLAY_PREFIX
from kernelfix.tune.tune_report import ModuleRow


def task_stem(module_path: str) -> str:
    """``model.blocks.0.attn`` -> ``model_blocks_0_attn`` (capture's default file name)."""
    return module_path.replace(".", "_")


def module_model(llm: str, row: ModuleRow) -> str:
    """The model string for this module's session (replay files by module, then by class, under replay:DIR)."""
    if not llm.startswith(REPLAY_PREFIX):
        return llm
    path = Path(llm[len(REPLAY_PREFIX) :])
    if not path.is_dir():
        return llm
    for name in (task_stem(row.module), row.module_class.rsplit(".", 1)[-1]):
        f = path / f"{name}.jsonl"
        if f.is_file():
            return f"{REPLAY_PREFIX}{f.resolve()}"
    raise PlanError(
        f"no replay file for {row.module}: neither {path / (task_stem(row.module) + '.jsonl')} nor {path / (row.module_class.rsplit('.', 1)[-1] + '.jsonl')}"
    )


def plan_job(row: ModuleRow, settings: BatchSettings, llm: str) -> Job:
    """The batch job of one captured module; PlanError says why it cannot run."""
    model = module_model(llm, row)
    jobs = plan([row.task], settings.model_copy(update={"agent": settings.agent.model_copy(update={"model": model})}))
    return jobs[0]


def run_headless(jobs: list[Job], out: Path, *, workers: int | None, console) -> dict[str, TaskResult]:
    """The batch's local runner with its progress display; KeyboardInterrupt stops every worker (each session
    records where it stopped) and propagates. Where they judge is the jobs' own judge settings (tune set it)."""
    import os

    from kernelfix.agent.batch.local_runner import BatchBusy, LocalRunner, OutDir, default_workers
    from kernelfix.agent.batch.progress import BatchProgress
    from kernelfix.tools.gpu.visible import visible_gpus

    outdir = OutDir(out)
    try:
        outdir.lock()
    except BatchBusy as e:
        raise PlanError(f"{e} (another kernelfix tune or batch on {out})") from None
    try:
        gpus = visible_gpus() if any(j.settings.judge.device == "cuda" for j in jobs) else []
        n = workers or default_workers(len(jobs), os.cpu_count() or 2, len(gpus))
        outdir.write_plan(jobs)
        with BatchProgress(len(jobs), console) as progress:
            runner = LocalRunner(outdir, workers=n, gpus=gpus, on_start=progress.started, on_done=progress.finished)
            results = runner.run(jobs)
    finally:
        outdir.unlock()
    return {r.name: r for r in results}


def session_state(job: Job) -> str:
    return prior_state(job.session_dir)[0]
