"""``kernelfix.Judge``: the judge as a library, the supported way to call it from Python.

    import kernelfix

    with kernelfix.Judge("task.py") as judge:                 # a path, a Task, or the task's source text
        verdict = judge.evaluate("candidate.py")              # a path, source text, or a model's reply
        verdict = await judge.aevaluate(reply_text)           # the same, off the event loop

One judge per task. It keeps its reference worker warm between calls (the task's import,
``Model``, the trials' reference outputs and the eager/torch.compile baselines are computed
once), so every call after the first pays for the candidate alone. It is thread-safe: calls
from several threads run side by side, their builds in parallel, their GPU stages queued on
the device lease. A machine fault (``infra:*``) is judged again after a pause, as
``kernelfix eval`` does. docs/service.md has the details, the server and the RL rewards.

A thin, typed face over the staged judge (``kernelfix.tools.judge.Judge``, ``engine`` here):
its stages, checkpoints and workers stay behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from kernelfix.library.sources import (
    FILENAME,
    CandidateKind,
    candidate_source,
    path_hint,
    task_from_text,
    text_kind,
    text_task_words,
)
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.evaluation import EventSink
from kernelfix.tools.judge import Judge as Engine
from kernelfix.tools.task import Task, TaskError
from kernelfix.tools.verdict import Verdict

__all__ = ["Judge", "judge_config"]

log = logging.getLogger(__name__)
STANDBY_WAIT_S = 0.25  # how long a call waits for a standby worker still being started


def judge_config(config: JudgeConfig | Mapping[str, Any] | None = None, **overrides: Any) -> JudgeConfig:
    """``config`` (a JudgeConfig, its fields as a dict, or None for the defaults) with the overrides
    that are not None, validated as the config file is (pydantic's ValidationError when wrong)."""
    base = config.model_dump() if isinstance(config, JudgeConfig) else dict(config or {})
    return JudgeConfig.model_validate({**base, **{k: v for k, v in overrides.items() if v is not None}})


class Judge:
    """Judges candidate kernels for one task; keeps the task's reference warm between calls.

    ``task``: a task file's path, a ``Task``, or the task's source text (a ``str`` with a line
    break; ``name`` then names it, default ``task_<sha1 prefix>``: per-task config overrides and
    the verdict use it). ``device``: "cuda" or "cpu" (default: the config's, else cuda when there
    is a GPU). ``backward``: judge the backward pass too (default: the config's, else the task's
    own ``BACKWARD = True``). ``config``: a ``JudgeConfig`` or a dict of its fields. ``gpu``: the
    CUDA device this judge's workers use, as CUDA_VISIBLE_DEVICES names it. ``workdir``: keep the
    judge's files there (default: a temporary directory removed by ``close``). ``keep_files``:
    False deletes each evaluation's files (logs, build sources) once its verdict is made and its
    candidate's worker has ended, and its verdict then has no ``logs_dir`` (what a long training run
    wants; the verdict goes back before that worker's exit, 0.1 s on the H100). ``standby``: candidate workers
    kept started ahead (Python, torch and the GPU context up), so a call's candidate goes straight to
    its import and build (a server's warm verdicts; each costs a process and, on a GPU, a context).

    Raises ``TaskError`` when the task is unusable (unreadable, not Python, lacking Model,
    get_inputs or get_init_inputs); a task that fails to import or run raises it from the first
    ``evaluate`` (or ``warm``).
    """

    def __init__(
        self,
        task: Task | str | os.PathLike[str],
        *,
        device: Literal["cuda", "cpu"] | None = None,
        backward: bool | None = None,
        config: JudgeConfig | Mapping[str, Any] | None = None,
        name: str | None = None,
        gpu: str | None = None,
        workdir: str | os.PathLike[str] | None = None,
        keep_files: bool = True,
        standby: int = 0,
    ):
        cfg = judge_config(config, device=device, backward=backward)
        self.keep_files = keep_files
        self._own_root = workdir is None
        root = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="kernelfix-judge-"))
        # A task given as text: its errors are said of the text, not of the file it was written to here.
        self._text_name: str | None = (name or "") if isinstance(task, str) and "\n" in task else None
        try:
            self.engine = Engine(_as_task(task, name, root), cfg, workdir=root, gpu=gpu)
        except BaseException:
            if self._own_root:
                shutil.rmtree(root, ignore_errors=True)
            raise
        self.root = root
        if not keep_files:  # nobody reads a worker's log: it ends after its verdict went back, then its files go
            self.engine.exit_later, self.engine.after_exit = True, self._drop_workdir
        self.standby = standby
        self._ready: list[Path] = []  # workdirs whose candidate worker was started ahead
        self._starting = 0
        self._lock = threading.Condition()
        self._in_flight = 0
        self._closed = False

    # ------------------------------------------------------------------ what it judges, and where

    @property
    def task(self) -> Task:
        return self.engine.task

    @property
    def config(self) -> JudgeConfig:
        """The settings in force: the given config, the overrides, the task's own section applied."""
        return self.engine.config

    @property
    def device(self) -> str:
        return self.engine.device

    @property
    def device_notice(self) -> str | None:
        """Set when the device was chosen for the caller (no GPU here: cpu)."""
        return self.engine.device_notice

    @property
    def gpu(self) -> str | None:
        return self.engine.gpu

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._in_flight} in flight"
        return f"<kernelfix.Judge {self.task.name} on {self.device}{f' gpu {self.gpu}' if self.gpu else ''}, {state}>"

    # ------------------------------------------------------------------ judging

    def warm(self) -> None:
        """Start the task's reference now and wait until it is ready (the first ``evaluate`` does this
        itself, overlapped with the candidate's build). Raises ``TaskError`` when the task does not run."""
        with self._use(), self._task_words():
            self.engine.reference()
            self._start_ahead()

    def evaluate(
        self,
        candidate: str | os.PathLike[str],
        *,
        kind: CandidateKind = "auto",
        profile: bool | None = None,
        sanitize: bool | None = None,
        retries: bool = True,
        on_event: EventSink | None = None,
        on_retry: Callable[[int, float, Verdict], None] | None = None,
    ) -> Verdict:
        """The verdict on one candidate: a path (.py, or a saved model reply .md/.txt) or text (see
        ``candidate_source``; ``kind`` says which text it is when you know: "code" or "reply").
        ``profile``: Nsight Compute on a correct, legal kernel this time (default: the config's).
        ``sanitize``: compute-sanitizer on a wrong or crashing CUDA/Triton kernel this time, for the cause in
        ``Verdict.sanitizer`` (default: the config's ``sanitize_failures``, on); False skips the stage (a reward
        reads only the category and the speedup, which it never changes: docs/sanitizer.md).
        ``retries``: judge again after a pause on a machine fault, up to ``infra_retries`` times
        (the verdict's ``infra_retries`` lists them). ``on_event`` gets each stage's progress and
        ``on_retry(tries, pause_s, verdict)`` each retry, both in the calling thread.
        Raises ``TaskError`` when the task does not import or run (never the candidate's fault)."""
        source, filename = candidate_source(candidate, kind)
        return self._judge(
            source, filename, profile=profile, sanitize=sanitize, retries=retries, on_event=on_event, on_retry=on_retry
        )

    def evaluate_text(self, text: str, *, kind: CandidateKind = "auto", **options: Any) -> Verdict:
        """``evaluate`` for text that is never read as a path, whatever it looks like: what a server or a reward
        passes (a model's output naming a file on this machine is judged as the text it is; a verdict on text that
        looks like a path says so). ``kind``: "code", "reply", or "auto" (a reply when it holds a complete fenced block)."""
        if not isinstance(text, str):
            raise TypeError(f"evaluate_text takes source text, not {type(text).__name__}")
        return self._judge(text, FILENAME[text_kind(text) if kind == "auto" else kind], **options)

    def _judge(
        self,
        source: str,
        filename: str,
        *,
        profile: bool | None = None,
        sanitize: bool | None = None,
        retries: bool = True,
        on_event: EventSink | None = None,
        on_retry: Callable[[int, float, Verdict], None] | None = None,
    ) -> Verdict:
        with self._use(), self._task_words():
            with self._lock:
                # The worker started after the last verdict is usually registered within milliseconds; a fork server
                # still importing takes seconds, and a worker of the call's own is then sooner.
                until = time.monotonic() + STANDBY_WAIT_S
                while not self._ready and self._starting and not self._closed and time.monotonic() < until:
                    self._lock.wait(max(0.0, until - time.monotonic()))
                workdir = self._ready.pop() if self._ready else None
            try:
                if retries:
                    v = self.engine.evaluate_with_retries(
                        source,
                        filename=filename,
                        on_event=on_event,
                        on_retry=on_retry,
                        profile=profile,
                        workdir=workdir,
                        sanitize=sanitize,
                    )
                else:
                    v = self.engine.evaluate(
                        source,
                        filename=filename,
                        on_event=on_event,
                        profile=profile,
                        workdir=workdir,
                        sanitize=sanitize,
                    )
            finally:
                if workdir is not None:
                    self.engine.drop_standby(workdir)  # unused (an extraction failure) or used: gone either way
            self._start_ahead_later()  # counted in flight: close() waits for it, so no worker starts after close
        if not self.keep_files:
            v.logs_dir = None  # removed once its worker has ended (``_drop_workdir``)
        return path_hint(v, source)

    async def aevaluate(self, candidate: str | os.PathLike[str], **options: Any) -> Verdict:
        """``evaluate`` in a worker thread: the event loop goes on meanwhile. Cancelling the awaiting
        task does not stop the evaluation under way (its verdict is dropped when it ends)."""
        return await asyncio.to_thread(self.evaluate, candidate, **options)

    def _start_ahead(self) -> None:
        """Keep ``standby`` candidate workers started for the next calls (none by default). A workdir is
        offered to a call only once its worker is registered, so no call runs beside a worker meant for it."""
        while self._reserve():
            self._start_one()

    def _reserve(self) -> bool:
        """Count one more worker starting, if ``standby`` wants one (a call that finds none ready waits a moment for it)."""
        with self._lock:
            if self._closed or len(self._ready) + self._starting >= self.standby:
                return False
            self._starting += 1
            return True

    def _start_one(self) -> None:
        workdir = self.engine.root / "evals" / uuid.uuid4().hex[:12]
        try:
            self.engine.prestart(workdir)
        finally:
            with self._lock:
                self._starting -= 1
                closed = self._closed
                if not closed:
                    self._ready.append(workdir)
                self._lock.notify_all()
        if closed:
            self.engine.drop_standby(workdir)

    def _start_ahead_later(self) -> None:
        """``_start_ahead`` in a thread of its own, so the verdict goes back without waiting for the next
        worker's launch (a fork through the sandbox's layers, milliseconds; after a judge's first verdict also
        the start of the standby's fork server, 3.5 s on the H100). It counts as a call in flight (``close``
        waits for it); the next call waits up to ``STANDBY_WAIT_S`` for it, then starts a worker of its own."""
        if not self._reserve():
            return
        with self._lock:
            self._in_flight += 1

        def start() -> None:
            try:
                self._start_one()
                self._start_ahead()  # standby > 1: the rest
            except Exception:  # the next call starts its worker itself, as without a standby
                log.warning("starting a standby candidate worker failed", exc_info=True)
            finally:
                with self._lock:
                    self._in_flight -= 1
                    self._lock.notify_all()

        threading.Thread(target=start, name="kernelfix-standby", daemon=True).start()

    def _await_standby(self) -> None:
        """Until no standby worker is starting (tests)."""
        with self._lock:
            while self._starting:
                self._lock.wait()

    def _drop_workdir(self, workdir: Path) -> None:
        """An evaluation's files, once its worker has ended (the engine's ``after_exit``)."""
        wd = workdir.resolve()
        if wd.parent == (self.engine.root / "evals").resolve():  # only an evaluation directory this judge made
            shutil.rmtree(wd, ignore_errors=True)

    # ------------------------------------------------------------------ lifetime

    @contextlib.contextmanager
    def _task_words(self):
        """A TaskError about a task given as text, said of the text (``text_task_words``)."""
        try:
            yield
        except TaskError as e:
            if self._text_name is None:
                raise
            raise TaskError(text_task_words(str(e), self.task.path, self._text_name or None)) from None

    @contextlib.contextmanager
    def _use(self):
        """One call under way: ``close`` waits for it; a closed judge refuses it."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self!r} is closed")
            self._in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1
                self._lock.notify_all()

    def close(self) -> None:
        """Wait for the evaluations under way, then end the reference worker and remove the judge's
        temporary files (a ``workdir`` given to it stays). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            while self._in_flight:
                self._lock.wait()
        self.engine.close()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> "Judge":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "Judge":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _as_task(task: Task | str | os.PathLike[str], name: str | None, root: Path) -> Task:
    """A Task from a path, a Task, or source text (written under ``root`` so that the judge, the
    messages and the per-task overrides see a file named after it)."""
    if isinstance(task, Task):
        return task
    if isinstance(task, str) and "\n" in task:
        return task_from_text(task, name, root / "task")
    if isinstance(task, (str, os.PathLike)):
        if name is not None:
            raise ValueError("name= is for a task given as source text; a task file is named by its file")
        return Task.load(task)
    raise TypeError(f"a task is a path, a Task or source text, not {type(task).__name__}")
