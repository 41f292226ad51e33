"""[judge] The judge: compile, check, police and time one candidate against a task.

Each stage is a method that takes an :class:`Evaluation` and returns it
advanced, so the agent's graph can run each as its own node and a UI can show
each as it finishes. Two kinds of sandboxed worker do the work (see
``kernelfix.tools.workers``): one reference worker per judge, started in the
background at the first request and shared by every evaluation (it draws the
trials' inputs, runs Model, compares, times the baselines), and one worker per
candidate (it imports the candidate once and runs its compile, trials and
timing). Tensors pass between them through shared memory, never through disk.
The stages themselves are ``kernelfix.tools.stages``, one module each (``compile``,
``correctness``, ``legality``, ``benchmark``, ``profile``, ``sanitize``), and the handles on the
workers ``kernelfix.tools.handles``. Each stage gets a :class:`StageContext` (what it may use of the
judge), so none of them imports the judge back.

    judge = Judge("task.py", JudgeConfig(device="cpu"))
    verdict = judge.evaluate(source)            # all stages
    ev = judge.start(source)                    # or stage by stage
    for name in STAGES:                         # compile, correctness, legality, benchmark, profile, sanitize
        ev = getattr(judge, name)(ev)
    verdict = judge.finish(ev)

Several evaluations of one judge may run at once, from different threads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from kernelfix.base.cache_dir import lock_root
from kernelfix.sandbox import credential_paths
from kernelfix.tools import candidate as candidate_mod
from kernelfix.tools import retry
from kernelfix.tools.classify import disk_full
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.evaluation import STAGES, Evaluation, EventSink, StageEvent
from kernelfix.tools.feedback import verdict_text as feedback
from kernelfix.tools.gpu.lease import DeviceLease, cuda_available, visible_gpu
from kernelfix.tools.handles.candidate_run import CandidateRun, CandidateRuns, tidy
from kernelfix.tools.handles.gpu_share import GpuShare
from kernelfix.tools.handles.reference import Reference
from kernelfix.tools.handles.worker_context import WorkerContext
from kernelfix.tools.handles.worker_handle import Deadline, WorkerGone
from kernelfix.tools.legality import static_checks
from kernelfix.tools.legality.allowlist import make_allowed
from kernelfix.tools.stages import (
    benchmark as timing_stage,
)
from kernelfix.tools.stages import (
    compile as compile_stage,
)
from kernelfix.tools.stages import (
    correctness as correctness_stage,
)
from kernelfix.tools.stages import (
    legality as legality_stage,
)
from kernelfix.tools.stages import (
    profile as profile_stage,
)
from kernelfix.tools.stages import (
    profile_prestart,
)
from kernelfix.tools.stages import (
    sanitize as sanitizer_stage,
)
from kernelfix.tools.stages.stage_context import StageContext
from kernelfix.tools.task import Task
from kernelfix.tools.transport.protocol import Standby
from kernelfix.tools.verdict import SANDBOX_NOTE, Category, CompileReport, LegalityReport, Stage, Verdict

if TYPE_CHECKING:
    from kernelfix.tools.gpu.floor import TaskFloor
    from kernelfix.tools.gpu.specs import GpuSpec

__all__ = ["Judge", "resolve_device"]


def resolve_device(requested: str | None) -> tuple[str, str | None]:
    """The device to use and, when it was chosen for the user, a one-line notice."""
    if requested is not None:
        return requested, None
    if cuda_available():
        return "cuda", None
    return "cpu", "no CUDA GPU here: judging on cpu (Triton kernels run in the interpreter; nothing is timed)"


class Judge:
    """Judges candidates for one task. Thread-safe; the reference is computed once."""

    def __init__(
        self,
        task: Task | str | Path,
        config: JudgeConfig | None = None,
        *,
        workdir: str | Path | None = None,
        gpu: str | None = None,
    ):
        """``gpu``: the CUDA device (as CUDA_VISIBLE_DEVICES names it) this judge's workers use; default the first visible."""
        self.task = task if isinstance(task, Task) else Task.load(task)
        self.config = (config or JudgeConfig()).for_task(self.task.name)
        if self.config.backward is None:  # the flag or config wins; else the task's own BACKWARD = True
            self.config = self.config.model_copy(update={"backward": self.task.declares_backward})
        self.device, self.device_notice = resolve_device(self.config.device)
        self.gpu = gpu
        self._sandbox_notes: list[str] = []  # layers the GPU needed turned off on this machine
        self.allowed_ops = make_allowed(self.config.extra_allowed_ops, self.config.removed_allowed_ops)
        # Unpredictable unless the user fixes it: code run at import cannot know the trials' inputs.
        self.seed = self.config.seed if self.config.seed is not None else secrets.randbelow(2**30)
        self._own_root = workdir is None
        self.root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="kernelfix-judge-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self._private = self.root / "reference"
        self._private.mkdir(parents=True, exist_ok=True)
        # The reference runs from the judge's own copy: what the candidate may do to the user's file changes nothing.
        self._task_copy = self._private / "task.py"
        self._task_copy.write_text(self.task.source)
        self._credentials = (
            credential_paths(extra_dirs=[self.task.path.parent, Path.cwd()]) if self.config.hide_credentials else []
        )
        self.ref = Reference(self._worker_context())
        self._runs = CandidateRuns(self._worker_context)
        # A server's: verdicts go back before the worker's exit (0.1 s on the H100), then ``after_exit(workdir)``.
        self.exit_later, self.after_exit = False, None
        # GPU stages queue per device, across processes, so timed runs never share a GPU.
        lease = DeviceLease(lock_root(), gpu or visible_gpu()) if self.device == "cuda" else None
        self._share = GpuShare(lease, self.ref, self.task.name, lambda: self.config)

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        self._share.close()
        # The candidates' workers' exits beside the reference's (each a CUDA context's teardown: 0.1-0.3 s on the H100).
        with ThreadPoolExecutor(1, thread_name_prefix="kernelfix-close") as pool:
            ending = pool.submit(self._runs.close)
            self.ref.close()  # in the caller's thread: a caller holding the reference's lock still closes it
            ending.result()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "Judge":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _note_sandbox(self, note: str | None) -> None:
        if note and note not in self._sandbox_notes:
            self._sandbox_notes.append(note)

    def _worker_context(self) -> WorkerContext:
        return WorkerContext(**self._context_fields())

    def _context_fields(self) -> dict[str, object]:
        return dict(
            task=self.task,
            config=self.config,
            device=self.device,
            gpu=self.gpu,
            seed=self.seed,
            root=self.root,
            private=self._private,
            task_copy=self._task_copy,
            credentials=self._credentials,
            lease=self.lease,
            room=self.room,
            note_sandbox=self._note_sandbox,
            trial_bytes=self._trial_bytes,
        )

    def _trial_bytes(self) -> int | None:
        size = getattr(getattr(self, "ref", None), "size", None)  # the reference is made with this context
        return size.trial_bytes if size is not None else None

    def stage_context(self) -> StageContext:
        """What a stage gets of this judge; built for each stage, so it sees the judge's config as it is then."""
        return StageContext(
            **self._context_fields(),
            allowed_ops=self.allowed_ops,
            ref=self.ref,
            reference=self.reference,
            run_for=self.run_for,
            release=self.release,
        )

    def lease(self, what: str, *, shared: bool = False) -> contextlib.AbstractContextManager:
        """The GPU's lock for a piece of work on it (tools/gpu/lease.py): alone, for what a result needs it
        alone for (timing, the profile, the baselines' timing), or ``shared`` beside other judges' correctness
        trials and warm-ups. Inside ``room``, never inside another hold."""
        return self._share.lease(what, shared=shared)

    def room(self, what: str, need_bytes: int | None = None) -> contextlib.AbstractContextManager:
        """Room on the GPU for a stage's memory, for the whole stage (tools/gpu/lease.py): given while
        every stage's declaration fits the GPU's budget (tools/gpu/room.py). ``need_bytes``: this stage's
        declaration (determinism's two trials); default a GPU stage's of this task, its reference's cache included.
        Meanwhile this judge keeps what its reference caches. Take it before the GPU's lock."""
        return self._share.room(what, need_bytes)

    def prestart(self, workdir: str | Path, *, wait: bool = False) -> None:
        """Start a candidate worker now for the evaluation that will use ``workdir`` (the agent calls
        this while the model writes its reply): Python, torch and CUDA are up by the time the candidate
        arrives, and the reference starts too. An evaluation of another workdir ignores it."""
        self.ref.start_background()
        run = self._runs.start_ahead(Path(workdir), self.task.source)
        if (
            run is not None and wait
        ):  # until it waits for its candidate (tests, benchmarks); a failure shows when it is used
            try:
                run.handle.expect([Standby.KIND], Deadline("standby", self.config.import_timeout_s))
            except WorkerGone:
                pass

    def has_standby(self, workdir: str | Path) -> bool:
        return self._runs.has_standby(Path(workdir))

    def drop_standby(self, workdir: str | Path) -> None:
        """End the worker started ahead for ``workdir`` whose candidate never came (a search's slot
        skipped or cancelled mid-reply, a model call that failed)."""
        self._runs.drop_standby(Path(workdir))

    def run_for(self, ev: Evaluation, on_event: EventSink | None = None) -> CandidateRun:
        """The evaluation's candidate worker: one started ahead for its workdir, else a new one
        (and after a resume from a checkpoint, a new one again)."""
        stage = "compile" if not ev.stages_done else "correctness"

        def relay(msg: dict) -> None:
            if on_event is not None:
                on_event(
                    StageEvent(
                        stage=stage,
                        status="progress",
                        detail=str(msg.get("phase")),
                        done=msg.get("done"),
                        total=msg.get("total"),
                    )
                )

        return self._runs.run_for(ev, relay)

    def release(self, ev: Evaluation) -> None:
        """End the evaluation's worker (finish does this; a failed stage too: its context may be poisoned),
        and a standby one its workdir never used (a reply with no code)."""
        profile_prestart.cancel(ev)  # a profiled run started ahead that no stage handed its go
        out = self._runs.release(ev)
        if out is not None:
            ev.warnings += [SANDBOX_NOTE + n for n in out.sandbox_notes if SANDBOX_NOTE + n not in ev.warnings]
        self.ref.release_owned(ev.id)

    # ------------------------------------------------------------------ reference

    def reference(self, on_event: EventSink | None = None) -> Reference:
        """The task's reference, started and ready (Model built). Raises TaskError when the task does not
        import or build, ``ReferenceUnavailable`` when the machine cannot run it."""
        if on_event:
            self.ref.on_event = lambda m: on_event(
                StageEvent(stage="reference", status="progress", detail=str(m.get("phase")))
            )
            on_event(StageEvent(stage="reference", status="started", detail="starting the reference"))
        self.ref.wait()
        self.ref.survey(self.lease)
        if on_event:
            on_event(StageEvent(stage="reference", status="finished"))
        return self.ref

    # ------------------------------------------------------------------ stages

    def task_floor(self, *, with_baseline: bool = True) -> "TaskFloor | None":
        """The task's floor on this GPU (tools/gpu/floor.py; None off the GPU or before the reference reported its sizes)."""
        return self.ref.task_floor(self.device, self.lease, with_baseline=with_baseline)

    def gpu_spec(self) -> "GpuSpec | None":
        """The GPU's numbers as its reference worker read them (the system prompt shows them); None off the GPU."""
        return self.ref.gpu_spec(self.device)

    def start(self, source: str, *, filename: str = "candidate.py", workdir: str | Path | None = None) -> Evaluation:
        """Extract the candidate (from a .py source or a model reply) and run the static checks."""
        t0 = time.monotonic()
        self.ref.start_background()  # the task's import and Model overlap the candidate's build
        ev_id = uuid.uuid4().hex[:12]
        wd = Path(workdir) if workdir else self.root / "evals" / ev_id
        wd.mkdir(parents=True, exist_ok=True)
        ext = candidate_mod.from_file_text(source, filename)  # (its parsing is thread-safe: tools/pysource.py)
        ev = Evaluation(
            id=ev_id,
            task=self.task.name,
            device=self.device,
            workdir=str(wd),
            code=ext.code,
            backend=ext.backend,
            sha1=ext.sha1,
        )
        if ext.code is not None:
            try:
                ev.candidate_path.write_text(ext.code)
                (wd / "task.py").write_text(self.task.source)
            except OSError as e:
                full = disk_full(e, wd)
                if full is None:
                    raise
                return ev.fail("extract", full.category, full.message)
        if ext.failure is not None:
            stage: Stage = "compile" if ext.failure == Category.SYNTAX else "extract"
            if ext.failure == Category.SYNTAX:
                ev.compile = CompileReport(backend=ext.backend, seconds=0.0, ok=False, errors=[ext.message or ""])
            return ev.fail(stage, ext.failure, ext.message or ext.failure.value)
        findings = static_checks.check(ext.code, self.config)
        ev.legality = LegalityReport(static_findings=findings)
        ev.warnings += [f"line {f.line}: {f.message}" for f in findings if f.severity == "warning"]
        errs = static_checks.errors(findings)
        ev.stage_seconds["static"] = time.monotonic() - t0
        if errs:
            ev.legality.note = "rejected before running: " + "; ".join(f"line {f.line}: {f.message}" for f in errs[:3])
            return ev.fail("legality", errs[0].category or Category.TAMPERING, errs[0].message)
        return ev

    def _timed(
        self,
        ev: Evaluation,
        stage: Stage,
        on_event: EventSink | None,
        fn: Callable[[], Evaluation],
        *,
        after_failure: bool = False,
    ) -> Evaluation:
        """Run ``fn`` as ``stage``, timed, unless the evaluation failed before (``after_failure``: a stage that
        runs on failures too) or did the stage already."""
        if (ev.failed and not after_failure) or stage in ev.stages_done:
            if on_event:
                on_event(StageEvent(stage=stage, status="skipped"))
            return ev
        if on_event:
            on_event(StageEvent(stage=stage, status="started"))
        t0 = time.monotonic()
        try:
            ev = fn()
        except OSError as e:  # the judge's own write on a full disk: the machine's fault, said as such
            full = disk_full(e, Path(ev.workdir))
            if full is None:
                raise
            ev.fail(stage, full.category, full.message)
        ev.stage_seconds[stage] = round(time.monotonic() - t0, 3)
        ev.stages_done.append(stage)
        if ev.failed and not after_failure:
            self.release(ev)  # a worker that failed is done; one whose context a fault poisoned must not go on
        if on_event:
            on_event(StageEvent(stage=stage, status="finished", detail=ev.category.value if ev.category else "ok"))
        return ev

    def compile(self, ev: Evaluation, on_event: EventSink | None = None) -> Evaluation:
        """Import the candidate (building its extensions) and construct ModelNew; the reference starts meanwhile."""
        return self._timed(ev, "compile", on_event, lambda: compile_stage.run(self.stage_context(), ev, on_event))

    def correctness(self, ev: Evaluation, on_event: EventSink | None = None) -> Evaluation:
        """Run ModelNew on every correctness trial (the task's inputs, then their variants) and compare."""
        return self._timed(
            ev, "correctness", on_event, lambda: correctness_stage.run(self.stage_context(), ev, on_event)
        )

    def legality(self, ev: Evaluation, on_event: EventSink | None = None) -> Evaluation:
        """Judge the aten ops recorded during every correctness call against the allowlist."""
        return self._timed(ev, "legality", on_event, lambda: legality_stage.run(self.stage_context(), ev))

    def benchmark(self, ev: Evaluation, on_event: EventSink | None = None) -> Evaluation:
        """Time the candidate against the cached eager and torch.compile baselines; police the timing."""
        return self._timed(ev, "benchmark", on_event, lambda: timing_stage.run(self.stage_context(), ev, on_event))

    def profile(self, ev: Evaluation, on_event: EventSink | None = None, *, enabled: bool | None = None) -> Evaluation:
        """Nsight Compute on one forward of a correct, legal candidate (``JudgeConfig.profile``, or ``enabled`` for this
        evaluation alone); never changes the verdict."""
        ctx = self.stage_context()
        if (
            enabled is not None and enabled != ctx.config.profile
        ):  # one evaluation's choice, not the judge's (a served request's)
            ctx = dataclasses.replace(ctx, config=ctx.config.model_copy(update={"profile": enabled}))
        skipped = profile_stage.skip(ctx, ev)
        if skipped is not None:
            if on_event:
                on_event(StageEvent(stage="profile", status="skipped", detail=skipped))
            return ev
        return self._timed(ev, "profile", on_event, lambda: profile_stage.profile(ctx, ev, on_event))

    def sanitize(self, ev: Evaluation, on_event: EventSink | None = None, *, enabled: bool | None = None) -> Evaluation:
        """compute-sanitizer on a wrong or crashing CUDA/Triton candidate (any with ``JudgeConfig.sanitize``),
        on a reduced input; never changes the verdict, names the cause (tools/stages/sanitize.py). ``enabled``: this
        evaluation's choice, as ``sanitize_failures`` (False: not even a correct kernel under ``sanitize``); None: the config's."""
        ctx = self.stage_context()
        if enabled is not None:  # one evaluation's choice (a reward's request: no reward reads the cause)
            update = {"sanitize_failures": True} if enabled else {"sanitize_failures": False, "sanitize": False}
            ctx = dataclasses.replace(ctx, config=ctx.config.model_copy(update=update))
        skipped = sanitizer_stage.skip(ctx, ev)
        if skipped is not None:
            if on_event:
                on_event(StageEvent(stage="sanitize", status="skipped", detail=skipped))
            return ev
        return self._timed(ev, "sanitize", on_event, lambda: sanitizer_stage.run(ctx, ev, on_event), after_failure=True)

    # ------------------------------------------------------------------ verdict

    def finish(self, ev: Evaluation) -> Verdict:
        """The evaluation's verdict (``Evaluation.verdict``), with the sandbox's notes and the feedback the model reads."""
        t0 = time.monotonic()
        if self.exit_later:  # the notes its outcome will carry are known from its start
            ev.warnings += [
                SANDBOX_NOTE + n
                for n in self._runs.end_after(ev, self.after_exit)
                if SANDBOX_NOTE + n not in ev.warnings
            ]
            self.ref.release_owned(ev.id)
        else:
            self.release(ev)
            tidy(Path(ev.workdir))
        ev.breakdown["finish.release"] = round(
            time.monotonic() - t0, 3
        )  # the worker's exit, unless it comes after the verdict
        notes = [SANDBOX_NOTE + n for n in self._sandbox_notes if SANDBOX_NOTE + n not in ev.warnings]
        v = ev.verdict(notes)
        v.feedback = feedback.render(v)
        return v

    def evaluate_with_retries(
        self,
        source: str,
        *,
        filename: str = "candidate.py",
        on_event: EventSink | None = None,
        on_retry: Callable[[int, float, Verdict], None] | None = None,
        check: Callable[[], None] | None = None,
        profile: bool | None = None,
        workdir: str | Path | None = None,
        sanitize: bool | None = None,
    ) -> Verdict:
        """``evaluate``, judged again after a pause while the verdict is a transient machine fault
        (tools/retry.py), at most ``infra_retries`` times; the verdict lists the faults met.
        ``on_retry(tries_so_far, pause_s, verdict)`` before each pause; ``check`` may raise to stop.
        ``workdir``: the first try's (one ``prestart`` readied); a retry gets a fresh one."""
        faults: list[str] = []
        while True:
            v = self.evaluate(
                source,
                filename=filename,
                on_event=on_event,
                profile=profile,
                workdir=None if faults else workdir,
                sanitize=sanitize,
            )
            if not retry.should_retry(v.category, len(faults), self.config.infra_retries):
                v.infra_retries = faults
                return v
            wait = retry.backoff_s(self.config.infra_backoff_s, len(faults))
            faults.append(retry.fault_text(v.category, v.message))
            if on_retry is not None:
                on_retry(len(faults), wait, v)
            retry.pause(wait, check)

    def evaluate(
        self,
        source: str,
        *,
        filename: str = "candidate.py",
        on_event: EventSink | None = None,
        workdir: str | Path | None = None,
        profile: bool | None = None,
        sanitize: bool | None = None,
    ) -> Verdict:
        """All stages, in order, stopping at the first failure. ``profile``, ``sanitize``: this evaluation's choices
        (None: the config's; ``sanitize`` as ``sanitize_failures``, see ``sanitize``)."""
        ev = self.start(source, filename=filename, workdir=workdir)
        choice = {"profile": profile, "sanitize": sanitize}
        if (profile if profile is not None else self.config.profile) and not ev.failed:
            # the profiled run's start (a new Python and torch under Nsight Compute) goes beside the build, the trials and
            # the timing; the profile stage hands it its go, a failure cancels it (tools/stages/profile_prestart.py)
            profile_prestart.start(self.stage_context(), ev)
        try:
            for name in STAGES:
                stage = getattr(self, name)
                ev = stage(ev, on_event, enabled=choice[name]) if name in choice else stage(ev, on_event)
        except BaseException:
            self.release(ev)
            raise
        return self.finish(ev)
