"""[judge] The judge's handle on its reference worker: started once, shared by every evaluation.

Thread-safe: evaluations of one judge may run side by side (their candidates
each in a worker of their own); requests to the reference worker queue on one
lock. The worker starts in the background as soon as the judge is asked for it
(``start``), so a candidate's build overlaps the task's import, Model's
construction and the first trials' reference outputs. What the worker learns
of the task (a vacuous tolerance, variants it cannot run, why there is no
float64 reference, tensor sizes) is kept here for every later report; the
baselines go to a cache on disk (``timing.baselines``) keyed by task, torch,
GPU and timing settings.

Failures are sorted: the task's own (``TaskError``: it does not import, its
forward raises), the machine's (``ReferenceUnavailable``: the task does not fit,
another process holds the GPU's memory, the worker died) which become ``infra:``
verdicts, never the candidate's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from kernelfix.tools import input_sets
from kernelfix.tools import trials as trial_plan
from kernelfix.tools.gpu import room as gpu_room
from kernelfix.tools.handles import reference_failures, sandboxing
from kernelfix.tools.handles.reference_baselines import ReferenceBaselines
from kernelfix.tools.handles.reference_failures import ReferenceUnavailable
from kernelfix.tools.handles.worker_context import WorkerContext
from kernelfix.tools.handles.worker_handle import Deadline, WorkerGone, WorkerHandle
from kernelfix.tools.task import TaskError
from kernelfix.tools.task_size import TaskSize
from kernelfix.tools.timing import baselines
from kernelfix.tools.transport.protocol import (
    CandidateOutput,
    Check,
    Checked,
    Determinism,
    DeterminismRequest,
    Prepare,
    Prepared,
    ReferenceReady,
    ReferenceSpec,
    Release,
    Released,
    Reply,
    Request,
    Sized,
    Survey,
    Surveyed,
    TrialPlan,
    Trim,
    Trimmed,
    parse,
)
from kernelfix.tools.verdict import Category

ID_SPAN = 10**9  # arena ids per reference worker: a restarted worker's ids never name its predecessor's


R = TypeVar("R", bound=Reply)


class Reference(ReferenceBaselines):
    def __init__(self, ctx: WorkerContext):
        self.ctx = ctx
        self.config = ctx.config
        self.trials: list[TrialPlan] = trial_plan.plan(ctx.seed, ctx.config)
        self.ready: ReferenceReady | None = None
        self.vacuous: str | None = None
        self.skipped_variants: dict[str, str] = {}
        self.float64_note: str | None = None
        self.input_bytes = self.output_bytes = 0
        self.size: TaskSize | None = None  # counted on the meta device before anything is allocated
        self.sized = threading.Event()  # set once ``size`` is known, or known not to come
        self.gpu_total_bytes: int | None = None  # the GPU's memory, as the worker said with its count
        self._generation = 0  # workers started so far: each names its arenas from generation * ID_SPAN
        self.ref_ms: dict[int, float] = {}
        self.noise: dict[int, float] = {}
        self.surveyed = False
        self._baselines: dict[int | None, baselines.Baseline] = {}  # by input set (None: get_inputs())
        self._gpu_dirty = False  # a request ran on the GPU since its memory was last given back
        self.last_trim: Trimmed | None = None
        self._owned: dict[str, tuple[set[int], set[int]]] = {}  # arenas prepared per evaluation, not yet released
        self._spared: set[str] = set()  # evaluations whose arenas the worker keeps as spares (``release(keep=True)``)
        self._worker: WorkerHandle | None = None
        self._task_error: TaskError | None = None
        # Lock order, everywhere: the GPU lease first, then this lock (a stage holds the lease while it asks
        # for trials; a survey or a baseline that took this lock first and then waited for the lease would
        # wait for that stage forever).
        self._lock = threading.RLock()
        self._thread_lock = threading.Lock()
        self._start_thread: threading.Thread | None = None
        self._start_error: BaseException | None = None
        self._closed = False  # no worker starts after close (a background start that had not begun yet)
        self.on_event: Callable[[dict[str, Any]], None] | None = None

    # ------------------------------------------------------------------ lifecycle

    def start_background(self) -> None:
        """Start the worker (task import, Model) without waiting: a candidate's build overlaps it."""
        with self._thread_lock:  # never waits for a request in flight
            if self._start_thread is None and self._worker is None and self._task_error is None and not self.surveyed:
                self._start_thread = threading.Thread(
                    target=self._start_quietly, daemon=True, name="kernelfix-reference"
                )
                self._start_thread.start()

    def _start_quietly(self) -> None:
        try:
            self.ensure()
            self.survey(self.ctx.lease)
        except BaseException as e:  # raised again to whoever waits for the reference
            self._start_error = e

    def ensure(self) -> ReferenceReady:
        """The running worker's readiness; starts (or restarts) it. Raises TaskError or ReferenceUnavailable."""
        with self._lock:
            if self._task_error is not None:
                raise self._task_error
            if self._closed:
                raise ReferenceUnavailable(Category.WORKER, "the judge was closed")
            if self._worker is not None and self._worker.alive and self.ready is not None:
                return self.ready
            try:
                return self._start()
            finally:
                self.sized.set()  # counted, or known not to be (a task the meta device cannot run, a failed start)

    def _start(self) -> ReferenceReady:
        j = self.ctx
        wd = j.private
        self._generation += 1
        spec = ReferenceSpec(
            task_path=str(j.task_copy),
            device=j.device,
            init_seed=j.seed,
            float64=self.config.float64_reference,
            inputs_on_device=self.config.inputs_on_device,
            cache_bytes=int(self.config.reference_cache_gb * 2**30),
            atol=self.config.atol,
            rtol=self.config.rtol,
            rel_error_tol=self.config.rel_error_tol,
            truth_factor=self.config.truth_factor if self.config.float64_reference else None,
            memory_limit_bytes=sandboxing.memory_limit(self.config),
            backward=bool(self.config.backward),
            id_base=self._generation * ID_SPAN,
        )
        iso, note = sandboxing.isolation(
            "reference", self.config, workdir=wd, private=wd, siblings=[], credentials=[], device=j.device
        )
        j.note_sandbox(note)
        self._worker = WorkerHandle(
            "kernelfix.tools.workers.reference.server",
            spec.model_dump(),
            spec_path=wd / "reference.spec.json",
            cwd=wd,
            env=sandboxing.env("reference", wd, j.device, j.gpu),
            limits=sandboxing.limits(self.config, 10**7),
            isolation=iso,
            on_phase=self._relay,
            fork=self.config.fork_server,
            fork_kind="reference",
        )
        deadline = Deadline("the reference's start", self.config.run_timeout_s, stretch=True)
        try:
            msg = self._worker.expect([Sized.KIND, ReferenceReady.KIND], deadline)
            if msg["type"] == Sized.KIND:  # the worker counts a trial's tensors first, when it can
                sized = parse(msg, Sized)
                self.size = TaskSize.model_validate(sized.model_dump(exclude={"gpu_total_bytes"}))
                self.gpu_total_bytes = sized.gpu_total_bytes
                self.sized.set()  # a warm-up waiting for it goes on while the worker builds Model
                msg = self._worker.expect([ReferenceReady.KIND], deadline)
            self.ready = parse(msg, ReferenceReady)
        except WorkerGone as e:
            self._failed(e)
        if self.ready.input_sets and not self.surveyed and all(t.input_set is None for t in self.trials):
            # Only the worker imports the task: the sets' count arrives with it, and each set gets its trials.
            self.trials = input_sets.plan(self.ctx.seed, self.config, len(self.ready.input_sets))
        if self.float64_note is None:
            self.float64_note = self.ready.float64_note
        return self.ready

    def counted_input_bytes(self) -> int | None:
        """One trial's input bytes once the worker has counted them (waits for its start to get that far;
        starts it if nobody has); None when they cannot be known before a trial runs."""
        if not self.sized.is_set() and not self.surveyed:
            self.start_background()
            self.sized.wait()
        if self.size is not None:
            return self.size.input_bytes
        return self.input_bytes or None

    def wait(self) -> ReferenceReady:
        """Wait for a background start (or start now)."""
        t = self._start_thread
        if t is not None:
            t.join()
            self._start_thread = None
            if self._start_error is not None:
                err, self._start_error = self._start_error, None
                raise err
        return self.ensure()

    def cgroup_dirs(self) -> list[str]:
        """The running worker's cgroup directories (it lives as long as the judge; nothing else may linger)."""
        w = self._worker
        cg = w.child.cgroup if w is not None and w.alive else None
        return [str(d) for d in cg.dirs.values()] if cg is not None else []

    def close(self) -> None:
        self._closed = True  # before the lock: a background start still waiting for it gives up
        with self._lock:
            if self._worker is not None:
                self._worker.close()
                self._worker = None

    def wait_idle(self) -> None:
        """Until no request of this judge's holds the reference (another evaluation's trial, or the baseline's
        torch.compile: seconds of CPU work under this lock, outside the GPU's lease for a small task). A piece
        of a stage waits here before it takes the GPU's lock: waiting inside it kept the lock held, and an
        exclusive (timed) hold queued behind it stopped every judge's shared holds meanwhile (8 s on the H100
        bench). Holds nothing after: the lock order (the lease first, then this lock) is unchanged."""
        with self._lock:
            pass

    def stop_idle(self) -> bool:
        """Stop a worker no request uses and no evaluation holds arenas of (its CUDA context and all
        it keeps go back to the GPU); ``ensure`` starts another when asked, which computes the same
        trials from their seeds. False when busy, in use, or not running."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if (
                self._worker is None
                or not self._worker.alive
                or self._owned
                or self._start_thread is not None
                or not self.surveyed
            ):
                return False
            self._worker.close()
            self._worker, self.ready, self._gpu_dirty = None, None, False
            return True
        finally:
            self._lock.release()

    def _relay(self, msg: dict[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event(msg)

    # ------------------------------------------------------------------ failures

    def _failed(self, e: WorkerGone) -> None:
        """Sort the worker's failure (reference_failures.sort); it is gone either way (the next request starts another)."""
        out = e.outcome
        self._forget_worker()
        sized = out.last(Sized.KIND)
        if sized is not None:
            self.size = TaskSize.model_validate(parse(sized, Sized).model_dump(exclude={"gpu_total_bytes"}))
        err = reference_failures.sort(
            out, self.ctx.task.path, self.config, self.input_bytes + self.output_bytes, self.size
        )
        if isinstance(err, TaskError):
            self._task_error = err
        raise err

    def _forget_worker(self) -> None:
        """The worker has ended: the next request starts another (it computes its trials again)."""
        self._worker = None
        self.ready = None
        self._owned.clear()  # its arenas went with it
        self._spared.clear()

    @property
    def holds_gpu_memory(self) -> bool:
        """Whether the worker may keep GPU memory past its last request (cached trials, free blocks)."""
        return self._gpu_dirty and self._worker is not None and self._worker.alive

    def give_back_gpu_memory(self) -> int | None:
        """Drop the trials kept on the GPU and return the allocator's free blocks (another judge's stage
        wants the memory; each trial is computed again when asked, from its seed). Bytes freed; None when
        the worker is busy (a request in flight keeps what it uses: asked again later)."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self._worker is None or not self._worker.alive:
                return 0
            msg = self._worker.ask(Trim(), Trimmed, Deadline("the reference's trim", 60.0))
            self._gpu_dirty = False
            self.last_trim = msg
            return msg.freed
        except WorkerGone as e:
            self._failed(e)
            raise  # unreachable
        finally:
            self._lock.release()

    def _request(self, request: Request, reply: type[R], timeout_s: float, *, stretch: bool = False) -> R:
        with self._lock:
            try:
                return self._send(
                    request, reply, Deadline(f"the reference's {request.KIND}", timeout_s, stretch=stretch)
                )
            except WorkerGone as e:
                self._failed(e)
                raise  # unreachable: _failed always raises

    def _send(self, request: Request, reply: type[R], deadline: Deadline) -> R:
        """One request to the worker (started if need be); WorkerGone for the caller to sort."""
        self.ensure()
        assert self._worker is not None
        self._gpu_dirty = self.ctx.device == "cuda"
        return self._worker.ask(request, reply, deadline)

    # ------------------------------------------------------------------ requests

    def survey(self, lease: Callable[..., Any]) -> None:
        """Every planned trial's reference, once, before any candidate's trial: the variants the task
        cannot run drop out of ``trials``, the vacuous-tolerance and float64 notes are known, and
        what fits the worker's cache stays there for every later candidate."""
        if self.surveyed:
            return
        with self._lock:
            self.ensure()  # outside the lease: the task's import and Model are CPU work
        with self.ctx.room("reference"), lease("reference", shared=True), self._lock:
            if self.surveyed:
                return
            msg = self._request(Survey(trials=self.trials), Surveyed, self.config.run_timeout_s * 2, stretch=True)
            by_index = {t.index: t for t in self.trials}
            for p in msg.trials:  # a large task's survey stops at the first trial its cache cannot hold
                self._learn(by_index[p.index], p)
            self.trials = [t for t in self.trials if t.variant is None or t.variant not in self.skipped_variants]
            self.surveyed = True

    def _learn(self, trial: TrialPlan, p: Prepared) -> None:
        if p.skipped is not None:
            if trial.variant:
                self.skipped_variants[trial.variant] = p.skipped
            return
        self.input_bytes, self.output_bytes = (
            max(self.input_bytes, p.input_bytes),
            max(self.output_bytes, p.output_bytes),
        )
        self.ref_ms[trial.index] = p.ref_ms
        if p.noise is not None:
            self.noise[trial.index] = p.noise
        if p.vacuous and self.vacuous is None and trial.purpose == "correctness":
            self.vacuous = f"on trial {trial.index} {p.vacuous}"
        if p.float64_note and trial.float64 and not p.has_float64 and self.float64_note is None:
            self.float64_note = p.float64_note

    def prepare(
        self, trial: TrialPlan, into: int | None = None, *, owner: str | None = None, inputs_only: bool = False
    ) -> tuple[Prepared, list[int]]:
        """A trial's inputs in an input slot (a new arena, or ``into``) and an output arena; their fds.
        ``owner``: the evaluation whose arenas they are (``release_owned`` frees what it left). ``inputs_only``:
        for timing, never checked: the worker skips the trial's float64 truth."""
        with self._lock:
            if into is not None and not self._current(into):
                raise ReferenceUnavailable(
                    Category.WORKER,
                    f"the reference worker restarted while trial {trial.index}'s inputs were in use; it is judged again",
                )
            p = self._request(
                Prepare(trial=trial, into=into, inputs_only=inputs_only, owner=owner),
                Prepared,
                self.config.run_timeout_s,
            )
            fds = self._worker.recv_fds() if p.skipped is None else []  # type: ignore[union-attr]
            if owner is not None and p.skipped is None:
                slots, outs = self._owned.setdefault(owner, (set(), set()))
                if into is None and p.slot is not None:
                    slots.add(p.slot)
                if p.out is not None:
                    outs.add(p.out)
        self._learn(trial, p)
        return p, fds

    def release_owned(self, owner: str) -> None:
        """Free the arenas an evaluation still holds: a stage that failed between a trial's prepare and
        its release left them (on the H100 each failed try of 19_ReLU left 12 GiB in the reference,
        which the next try then lacked). Best effort: a worker that is gone holds nothing."""
        if owner not in self._owned:  # it prepared nothing (a format or static failure): no need to wait for the
            return  # lock, which the reference's start or another evaluation's request may hold for seconds
        with self._lock:
            slots, outs = self._owned.pop(owner, (set(), set()))
            spares = owner in self._spared
        if slots or outs or spares:  # its spares too (the worker's Handoff), where a stage failed midway
            try:
                self.release(sorted(slots), sorted(outs), owner=owner)
            except Exception:
                pass

    def check(self, trial: TrialPlan, output: CandidateOutput, slot: int | None) -> Checked:
        with self._lock:
            if output.out is not None and not self._current(output.out):
                # The worker that prepared this trial ended (another evaluation's request met a fault) and a new one
                # started: the trial's reference and arenas went with it. The machine's fault, never the candidate's.
                raise ReferenceUnavailable(
                    Category.WORKER, f"the reference worker restarted while trial {trial.index} ran; it is judged again"
                )
        return self._request(Check(trial=trial.index, output=output, slot=slot), Checked, self.config.run_timeout_s)

    def _current(self, arena_id: int) -> bool:
        """Whether an arena id is the running worker's (not a predecessor's)."""
        return arena_id // ID_SPAN == self._generation

    def release(
        self, slots: list[int] = (), outs: list[int] = (), *, owner: str | None = None, keep: bool = False
    ) -> None:  # type: ignore[assignment]
        """Arenas given back. ``owner`` (an evaluation's id) with ``keep``: the worker keeps them as that evaluation's
        spares, for its next trial; ``owner`` without ``keep``: its stage is over, and its spares go too."""
        with self._lock:
            slots, outs = [s for s in slots if self._current(s)], [o for o in outs if self._current(o)]
            if not slots and not outs and (keep or owner not in self._spared):
                return  # a predecessor's (they went with it), or nothing of the owner's is left
            for owned_slots, owned_outs in self._owned.values():
                owned_slots.difference_update(slots)
                owned_outs.difference_update(outs)
            if self._worker is None or not self._worker.alive:
                return  # a restarted worker holds none of them
            self._request(Release(slots=list(slots), outs=list(outs), owner=owner, keep=keep), Released, 60.0)
            if owner is not None:
                (self._spared.add if keep else self._spared.discard)(owner)

    def determinism(self, trial: TrialPlan, lease: Callable[..., Any]) -> Determinism:
        need = gpu_room.stage_need(self.size, self.config, 0)  # two trials' references at once, nothing cached beside
        with self.ctx.room("determinism", 2 * need[0] if need is not None else None), lease("determinism", shared=True):
            return self._request(DeterminismRequest(trial=trial), Determinism, self.config.run_timeout_s)
