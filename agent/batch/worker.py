"""One batch job: create, resume or skip its session, run it, and say how it went.

``run_task`` is the per-task function of every backend: the local runner calls it
in a child process per job (``python -m kernelfix.agent.batch.worker``), Ray calls it
as a remote task. It never raises for a session's failure: a crash, a task that
does not run or a model that fails becomes a ``TaskResult`` with the error.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from kernelfix.agent.batch.plan import Job
from kernelfix.agent.session_dir import SETTINGS, SessionDir, SessionError, read_trajectory
from kernelfix.agent.state import Trajectory
from kernelfix.base import atomic

Prior = Literal["new", "finished", "unfinished", "dead"]


class TaskResult(BaseModel):
    """What one batch run did with one job (OUT/results/<name>.json)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    task: str
    session_dir: str
    run: Literal["new", "resumed", "skipped"]  # what this run of the batch did with the session
    status: Literal["finished", "unfinished", "failed"]  # finished: the session ended; unfinished: resumable
    error: str | None = None
    wall_s: float = 0.0
    gpu: str | None = None


def prior_state(session_dir: Path) -> tuple[Prior, Trajectory | None]:
    """Where an earlier run left this job's session.

    new: nothing there yet; finished: the session ended (skip it); unfinished: killed or
    interrupted, a resume continues it; dead: it stopped in a way no resume changes (a task
    that does not run).
    """
    if not (session_dir / SETTINGS).is_file():
        return "new", None
    traj = read_trajectory(session_dir, unreadable_as_none=True)
    if traj is None:
        return "unfinished", None
    if traj.outcome.finished:
        return "finished", traj
    if traj.outcome.resumable or traj.outcome.stop_reason is None:
        return "unfinished", traj
    return "dead", traj


def finished_result(job: Job) -> TaskResult | None:
    """The result for a job an earlier run finished (or that no resume can change), else None: it must run."""
    prior, traj = prior_state(job.session_dir)
    if prior not in ("finished", "dead"):
        return None
    error = traj.outcome.stop_reason if prior == "dead" and traj else None
    return TaskResult(
        name=job.name,
        task=job.task,
        session_dir=str(job.session_dir),
        run="skipped",
        status="finished" if prior == "finished" else "failed",
        error=error,
    )


def died_result(job: Job, *, was_new: bool, error: str, wall_s: float = 0.0, gpu: str | None = None) -> TaskResult:
    """The result of a job whose worker died (killed, crashed, lost by Ray): unfinished when a rerun can resume it."""
    after, _ = prior_state(job.session_dir)
    return TaskResult(
        name=job.name,
        task=job.task,
        session_dir=str(job.session_dir),
        run="new" if was_new else "resumed",
        status="unfinished" if after == "unfinished" else "failed",
        error=error,
        wall_s=round(wall_s, 3),
        gpu=gpu,
    )


def _set_aside(path: Path) -> Path:
    """A session directory that cannot be opened (killed while it was being created) moves out of the way, kept."""
    dest = path.with_name(f"{path.name}.unusable-{time.strftime('%Y%m%d-%H%M%S')}")
    path.rename(dest)
    return dest


class TaskInterrupted(KeyboardInterrupt):
    """The job was interrupted (Ctrl-C, SIGTERM); ``result`` says where it stopped."""

    def __init__(self, result: TaskResult):
        super().__init__("interrupted")
        self.result = result


def open_or_create(job: Job, prior: Prior, model_for_new, on_event) -> tuple[SessionDir, str]:
    """The job's session directory, and whether this run creates or resumes it."""
    from kernelfix.agent.session import Session

    path = job.session_dir
    if prior == "unfinished":
        try:
            return SessionDir.open(path), "resumed"
        except SessionError as e:
            moved = _set_aside(path)
            if on_event:
                from kernelfix.agent.events import Notice

                on_event(Notice(text=f"{e}; moved to {moved}, starting afresh"))
    elif path.exists() and any(path.iterdir()):  # killed while being created, before its settings were written
        _set_aside(path)
    candidate = Path(job.candidate).read_text(encoding="utf-8") if job.candidate else None
    session = Session.create(
        path,
        task_path=job.task,
        model=model_for_new(),
        agent=job.agent,
        judge_config=job.settings.judge,
        candidate=candidate,
        candidate_name=Path(job.candidate).name if job.candidate else "candidate.py",
        candidate_path=job.candidate,
    )
    return session.store, "new"


def run_task(job: Job, *, gpu: str | None = None, on_event=None) -> TaskResult:
    """Run (or resume, or skip) the job's session. Raises only TaskInterrupted."""
    from kernelfix.agent.models import ModelError, make_model
    from kernelfix.agent.session import Session
    from kernelfix.tools.judge import Judge
    from kernelfix.tools.retry import MachineFault
    from kernelfix.tools.task import TaskError

    t0 = time.monotonic()
    path = job.session_dir
    run = "new"

    def result(status, error=None) -> TaskResult:
        return TaskResult(
            name=job.name,
            task=job.task,
            session_dir=str(path),
            run=run,
            status=status,
            error=error,
            wall_s=round(time.monotonic() - t0, 3),
            gpu=gpu,
        )

    done = finished_result(job)
    if done is not None:
        return done
    prior, _ = prior_state(path)
    api_key = os.environ.get(job.settings.agent.api_key_env) if job.settings.agent.api_key_env else None
    try:
        store, run = open_or_create(job, prior, lambda: make_model(job.model, job.agent, api_key=api_key), on_event)
        # the session's own settings, as `kernelfix resume` uses them
        model = make_model(store.settings.model, store.settings.agent, api_key=api_key)
        with Judge(store.task(), store.settings.judge, workdir=store.work_dir, gpu=gpu) as judge:
            outcome = Session(store, model, on_event=on_event, judge=judge).run()
        return result("finished" if outcome.finished else "unfinished")
    except KeyboardInterrupt:
        raise TaskInterrupted(result("unfinished", "interrupted")) from None
    except ModelError as e:
        # the session recorded where it stopped; a rerun of the batch resumes it
        return result("unfinished" if e.kind == "unavailable" else "failed", f"model error ({e.kind}): {e}")
    except MachineFault as e:  # kept where it stopped: a rerun of the batch judges that candidate again
        return result("unfinished", f"{e}; the session is kept, a rerun of the batch continues it")
    except TaskError as e:
        return result("failed", f"the task does not run: {e}")
    except SessionError as e:
        return result("failed", str(e))
    except Exception as e:  # a bug or a broken environment: this job fails, the batch goes on
        return result("failed", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}")


# --------------------------------------------------------------------------- child process entry


def _die_with_parent(parent: int) -> None:
    """SIGTERM when the batch process dies, even by SIGKILL (Linux), so no session runs on unattended."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if os.getppid() != parent:  # it died before the prctl
        os.kill(os.getpid(), signal.SIGTERM)


_stopping = False


def _terminate(signum, frame):
    """The first SIGTERM stops the job; the session records where it stopped, the sandbox kills the running child.

    Later ones are ignored. When the batch process dies, PDEATHSIG comes again each time the kernel
    reparents this worker to another of the batch's dying threads, a few ms apart. A second
    KeyboardInterrupt used to land while the session was recording the first, and the record was lost
    (trajectory.json kept its last turn's write) or came out empty (no turns).
    """
    global _stopping
    if _stopping:
        return
    _stopping = True
    raise KeyboardInterrupt


def run_logged(job: Job, log_path: Path, *, gpu: str | None = None) -> TaskResult:
    """``run_task`` with the session's turn lines appended to ``log_path``; an interruption becomes its result."""
    from kernelfix.agent.headless import HeadlessReporter
    from kernelfix.base.terminal import console as make_console

    # Line-buffered: what the session printed is in the log even if the worker is killed outright.
    with open(log_path, "a", encoding="utf-8", buffering=1) as log:
        console = make_console(file=log, highlight=False, force_terminal=False)  # a file: each line whole
        try:
            res = run_task(job, gpu=gpu, on_event=HeadlessReporter(console=console, status_console=console))
        except TaskInterrupted as e:
            res = e.result
        if res.error:
            console.print(f"batch: {res.status}: {res.error}", markup=False)
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m kernelfix.agent.batch.worker", description="run one batch job (JSON on stdin)"
    )
    p.add_argument("--result", required=True, help="write the TaskResult JSON here")
    p.add_argument("--log", required=True, help="append the session's turn lines here")
    p.add_argument("--gpu", help="CUDA device for the judge's children")
    p.add_argument("--parent", type=int, help="the batch process; exit when it dies")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    if args.parent:
        _die_with_parent(args.parent)
    job = Job.model_validate_json(sys.stdin.read())
    res = run_logged(job, Path(args.log), gpu=args.gpu)
    atomic.write_json(Path(args.result), res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
