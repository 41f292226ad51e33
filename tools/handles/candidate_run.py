"""[judge] The judge's handle on one evaluation's candidate worker: compile, trials and timing in one process.

One sandboxed process per evaluation, not one per stage: Python, torch and CUDA
start once, the extension is loaded once. The handle knows the deadlines:

- import (and ModelNew's construction): ``import_timeout_s`` of time while no
  compiler runs (a candidate that sleeps at import is killed within it), within
  ``compile_timeout_s`` overall;
- each forward: max(``forward_timeout_s``, ``forward_timeout_factor`` x the
  reference's forward time), compilers excepted (Triton compiles at first call);
- timing: no progress for that long, within ``bench_timeout_s``.

A failure ends the worker (a CUDA fault poisons its context); ``failure`` names it.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from kernelfix.sandbox import ChildOutcome
from kernelfix.tools.classify import Failure, classify
from kernelfix.tools.evaluation import Evaluation
from kernelfix.tools.handles import sandboxing
from kernelfix.tools.handles.worker_context import WorkerContext
from kernelfix.tools.handles.worker_handle import Deadline, WorkerGone, WorkerHandle
from kernelfix.tools.transport.protocol import (
    Builds,
    Built,
    CandidateOutput,
    CandidateSpec,
    Go,
    Ops,
    OpsRequest,
    Phase,
    Prepared,
    Release,
    Released,
    RunTrial,
    Standby,
    Time,
    Timed,
    Warmed,
    Warmup,
    parse,
)
from kernelfix.tools.verdict import ExtensionBuild


class CandidateRun:
    def __init__(
        self, ctx: WorkerContext, workdir: Path, candidate_path: Path, on_phase=None, *, standby: bool = False
    ):
        t0 = time.monotonic()
        c = ctx.config
        self.ctx, self.config, self.workdir = ctx, c, workdir
        for d in sandboxing.CANDIDATE_DIRS:
            sandboxing.own_dir(workdir / d)
        (workdir / "logs").mkdir(parents=True, exist_ok=True)
        spec = CandidateSpec(
            task_path=str(workdir / "task.py"),
            candidate_path=str(candidate_path),
            build_dir=str(workdir / "build"),
            build=c.build.model_dump(),
            device=ctx.device,
            init_seed=ctx.seed,
            record_ops=c.runtime_legality,
            warmup_max_bytes=int(c.warmup_max_gb * 2**30) if ctx.device == "cuda" else 0,
            standby=standby,
            backward=bool(c.backward),
        )
        evals = ctx.root / "evals"
        siblings = [p for p in evals.iterdir() if p != workdir] if workdir.parent == evals and evals.is_dir() else []
        iso, note = sandboxing.isolation(
            "candidate",
            c,
            workdir=workdir,
            private=ctx.private,
            siblings=siblings,
            credentials=ctx.credentials,
            device=ctx.device,
        )
        ctx.note_sandbox(note)
        self.notes = [n for n in [note] if n]
        lifetime = c.compile_timeout_s + c.run_timeout_s + c.bench_timeout_s
        self.handle = WorkerHandle(
            "kernelfix.tools.workers.candidate.server",
            spec.model_dump(),
            spec_path=workdir / "handoff" / "candidate.spec.json",
            cwd=workdir,
            env=sandboxing.env("candidate", workdir, ctx.device, ctx.gpu),
            limits=sandboxing.limits(c, lifetime),
            isolation=iso,
            on_phase=on_phase,
            fork=c.fork_server,
            fork_kind=fork_kind(None if standby else candidate_path),
        )
        # Before the worker's clock starts: its dirs, the sandbox's GPU check (once per boot), its cgroup.
        self.setup_s = self.handle.child.t0 - t0
        self.built_msg: dict[str, Any] | None = None
        self.warmed_msg: Warmed | None = None
        self._warming: threading.Thread | None = None
        self._warm_error: BaseException | None = None
        self.standby = standby

    def go(self, on_phase=None) -> None:
        """Hand a standby worker its candidate (it is on disk now): import, build, warm up."""
        if self.standby:
            self.standby = False
            self.handle.on_phase = on_phase or self.handle.on_phase
            self.handle.child.send(Go.KIND)

    # ------------------------------------------------------------------ deadlines

    def forward_limit(self, ref_ms: float | None) -> float:
        c = self.config
        floor = c.forward_timeout_s if self.ctx.device == "cuda" else max(c.forward_timeout_s, c.cpu_forward_timeout_s)
        return max(floor, c.forward_timeout_factor * (ref_ms or 0.0) / 1e3)

    # ------------------------------------------------------------------ stages

    def built(self) -> Built:
        if self.built_msg is None:
            c = self.config
            self.built_msg = parse(
                self.handle.expect([Built.KIND], Deadline("import", c.import_timeout_s, hard_s=c.compile_timeout_s)),
                Built,
            )
        return self.built_msg

    def warm(self, lease: Callable[[], AbstractContextManager], input_bytes: Callable[[], int | None]) -> None:
        """Warm up (first-call compilation, autotuning) in the background, under ``lease()`` (a shared
        hold of the GPU) when it runs at all: the judge meanwhile waits for its reference. ``input_bytes()``
        (may wait for the reference's count): the inputs' size, which decides whether a warm-up runs."""
        if self._warming is not None or self.warmed_msg is not None:
            return
        self._warming = threading.Thread(
            target=self._warm, args=(lease, input_bytes), daemon=True, name="kernelfix-warmup"
        )
        self._warming.start()

    def _warm(self, lease: Callable[[], AbstractContextManager], input_bytes: Callable[[], int | None]) -> None:
        try:
            limit = int(self.config.warmup_max_gb * 2**30) if self.ctx.device == "cuda" else 0
            size = input_bytes() if limit > 0 else None
            if limit <= 0 or (size is not None and size > limit):  # nothing runs: no hold
                why = "off" if limit <= 0 else f"inputs are {size / 2**30:.1f} GiB"  # type: ignore[operator]
                self.warmed_msg = Warmed(done=False, why=why)
                return
            with lease():  # the deadline counts from the hold: waiting for another judge's timed run is no hang
                deadline = Deadline(
                    "the warm-up forward", self.forward_limit(None), hard_s=self.config.compile_timeout_s
                )
                self.warmed_msg = self.handle.ask(Warmup(input_bytes=size), Warmed, deadline)
        except BaseException as e:  # WorkerGone, or the lease's own failure: raised to whoever waits
            self._warm_error = e

    def warmed(
        self,
        lease: Callable[[], AbstractContextManager] | None = None,
        input_bytes: Callable[[], int | None] | None = None,
    ) -> Warmed:
        """The warm-up's reply, once it ran (started here, in this thread, if nobody started it)."""
        if self.warmed_msg is None:
            self.built()
            if self._warming is None:
                self._warm(lease or contextlib.nullcontext, input_bytes or (lambda: None))
            else:
                self._warming.join()
            if self._warm_error is not None:
                raise self._warm_error
        assert self.warmed_msg is not None
        return self.warmed_msg

    def start_breakdown(self) -> dict[str, float]:
        """Where the compile stage's seconds went, from the times the worker's messages arrived:
        ``worker_start`` (fork or exec of the sandboxed process, its namespaces and imports, to the
        worker's first word), ``runtime`` (torch's CUDA entry points, the op recorder), ``task_import``,
        ``candidate_import`` (its extensions' builds or cached loads, Triton's parse) and ``model``
        (ModelNew's construction). A worker started ahead (``standby``) counts from its ``go``."""
        at: dict[str, float] = {}
        for m in self.handle.since(0):
            kind = m.get("type")
            key = m.get("phase") if kind == Phase.KIND else kind
            if key and key not in at:
                at[key] = float(m.get("_t", 0.0))
        if not {"hello", "load_task", "import_candidate", Built.KIND} <= at.keys():
            return {}
        out: dict[str, float] = {}
        if Standby.KIND not in at:
            out["compile.sandbox_setup"] = self.setup_s
            out["compile.worker_start"] = at["hello"]
            out["compile.runtime"] = at["load_task"] - at["hello"]
        out["compile.task_import"] = at["import_candidate"] - at["load_task"]
        imported = self.built().import_seconds if self.built_msg is not None else 0.0
        out["compile.candidate_import"] = imported
        out["compile.model"] = max(0.0, at[Built.KIND] - at["import_candidate"] - imported)
        if self.handle.child.forked and Standby.KIND not in at:  # from the fork server (kernelfix.sandbox.zygote)
            waited = getattr(self.handle.child.proc, "waited_s", 0.0)
            if waited > 0.001:  # the fork server's imports (torch, triton, ...), once per process
                out["compile.fork_server_imports"] = waited
                out["compile.worker_start"] -= waited
        return {k: round(v, 3) for k, v in out.items()}

    def builds(self) -> list[ExtensionBuild]:
        """What the worker reported about its extension builds; informational, so garbage is dropped."""
        msg = next((m for m in reversed(self.handle.since(0)) if m.get("type") == Builds.KIND), None)
        out = []
        for b in (msg or {}).get("builds") or []:
            try:
                out.append(ExtensionBuild.model_validate(b))
            except ValueError:
                continue
        return out

    def forward(self, p: Prepared, fds: list[int]) -> CandidateOutput:
        """One forward on a prepared trial; ``fds`` (the arenas the reference just made) go with the request."""
        try:
            request = RunTrial(
                index=p.index,
                slot=p.slot,
                in_arena=p.in_arena,
                inputs=p.inputs,
                input_specs=p.input_specs,
                out=p.out,
                out_arena=p.out_arena,
                expected_specs=p.expected_specs,
                grads=p.grads,
            )
            deadline = Deadline(
                f"forward on trial {p.index}", self.forward_limit(p.ref_ms), hard_s=self.config.run_timeout_s
            )
            return self.handle.ask(request, CandidateOutput, deadline, fds=fds)
        finally:
            for fd in fds:
                _close(fd)

    def ops(self) -> Ops:
        return self.handle.ask(OpsRequest(), Ops, Deadline("the op record", 60.0))

    def time(self, slot: int, timing: dict[str, Any], ref_ms: float | None) -> list[dict[str, Any]]:
        """Time the candidate on a bound slot; the messages it sent meanwhile (timing, wall clock)."""
        mark = self.handle.mark()
        idle = self.forward_limit(ref_ms) * 25  # a block of 25 timed calls between progress reports
        self.handle.ask(
            Time(slot=slot, timing=timing),
            Timed,
            Deadline("timing", self.config.bench_timeout_s, idle_s=max(idle, 30.0)),
        )
        return self.handle.since(mark)

    def release(self, slots: list[int], outs: list[int], *, final: bool = True) -> None:
        """The worker drops its mappings of these arenas; ``final`` (the stage is over): and gives its allocator's
        free blocks back, which between trials its next forward takes again."""
        if self.handle.alive:
            try:
                self.handle.ask(Release(slots=slots, outs=outs, final=final), Released, Deadline("release", 30.0))
            except WorkerGone:
                pass

    # ------------------------------------------------------------------ endings

    def failure(self, stage: str, e: WorkerGone) -> Failure:
        limit = {"compile": self.config.compile_timeout_s, "benchmark": self.config.bench_timeout_s}.get(
            stage, self.config.run_timeout_s
        )
        return classify(
            stage, e.outcome, timeout_s=limit, build_dir=self.workdir / "build", trial_bytes=self.ctx.trial_bytes()
        )

    def sandbox_notes(self) -> list[str]:
        """What its outcome will say of the sandbox's layers, known from its start."""
        return self.handle.child.sandbox_notes() if self.handle.child.launch_error is None else []

    def close(self) -> ChildOutcome | None:
        out = self.handle.close()
        if out is not None:
            _write_log(self.workdir / "logs" / "candidate.log", self.handle.argv, out)
        return out


def fork_kind(candidate_path: Path | None) -> str:
    """Which fork server the worker starts from: the one that imported what the candidate's language needs."""
    from kernelfix.sandbox.zygote import kind_for_candidate

    try:
        code = candidate_path.read_text(errors="replace") if candidate_path is not None else None
    except OSError:
        code = None
    return kind_for_candidate(code)


def _close(fd: int) -> None:
    import os

    try:
        os.close(fd)
    except OSError:
        pass


def _write_log(path: Path, argv: list[str], out: ChildOutcome) -> None:
    try:
        path.write_text(
            f"$ {' '.join(argv)}\nreturncode={out.returncode} signal={out.signal} timed_out={out.timed_out} "
            f"deadline={out.deadline} wall={out.wall_s:.2f}s\n"
            f"--- stdout ({out.stdout_bytes} bytes, tail) ---\n{out.stdout_tail}\n"
            f"--- stderr ({out.stderr_bytes} bytes, tail) ---\n{out.stderr_tail}\n"
            f"--- messages ---\n"
            + "\n".join(json.dumps(m, default=str)[:4000] for m in out.messages)
            + "\n"
            + "".join(f"--- forged ---\n{m}\n" for m in out.forged_messages[:20])
            + f"--- sandbox ---\nlayers={out.isolation} notes={out.sandbox_notes}\n"
        )
    except OSError:  # a full disk must not hide the verdict
        pass


class CandidateRuns:
    """A judge's candidate workers: one per evaluation in progress (by its id), and those started ahead for an
    evaluation to come (by the workdir it will use). Thread-safe."""

    def __init__(self, context: Callable[[], WorkerContext]):
        self._context = context
        self._runs: dict[str, CandidateRun] = {}
        self._standby: dict[Path, CandidateRun] = {}  # started ahead, by the workdir their evaluation will use
        self._lock = threading.Lock()
        self.exits = Exits()

    def start_ahead(self, workdir: Path, task_source: str) -> CandidateRun | None:
        """A standby worker for ``workdir``, started now; None when one is there already."""
        wd = workdir.resolve()
        with self._lock:
            if wd in self._standby:
                return None
            wd.mkdir(parents=True, exist_ok=True)
            (wd / "task.py").write_text(task_source)
            run = self._standby[wd] = CandidateRun(self._context(), wd, wd / "candidate.py", standby=True)
        return run

    def has_standby(self, workdir: Path) -> bool:
        return workdir.resolve() in self._standby

    def drop_standby(self, workdir: Path) -> None:
        with self._lock:
            idle = self._standby.pop(workdir.resolve(), None)
        if idle is not None:
            idle.close()

    def run_for(self, ev: Evaluation, relay: Callable[[dict], None]) -> CandidateRun:
        with self._lock:
            run = self._runs.get(ev.id)
            if run is None:
                run = self._standby.pop(Path(ev.workdir).resolve(), None)
                if run is not None and run.handle.alive:
                    run.go(relay)
                else:
                    run = CandidateRun(self._context(), Path(ev.workdir), ev.candidate_path, on_phase=relay)
                self._runs[ev.id] = run
            return run

    def end_after(self, ev: Evaluation, then: Callable[[Path], None] | None = None) -> list[str]:
        """``release``, its worker's exit and the workdir's tidying in the background (``Exits``); the sandbox notes
        the worker's outcome will carry. A standby worker its workdir never used is ended now."""
        run = self._take(ev)
        notes = run.sandbox_notes() if run is not None else []
        self.exits.start(run, Path(ev.workdir), then)
        return notes

    def release(self, ev: Evaluation) -> ChildOutcome | None:
        """End the evaluation's worker and a standby one its workdir never used; the worker's outcome, if it had one."""
        run = self._take(ev)
        return run.close() if run is not None else None

    def _take(self, ev: Evaluation) -> CandidateRun | None:
        """The evaluation's worker, no longer tracked; a standby worker its workdir never used, ended."""
        with self._lock:
            run = self._runs.pop(ev.id, None)
            idle = self._standby.pop(Path(ev.workdir).resolve(), None)
        if idle is not None:
            idle.close()
        return run

    def close(self) -> None:
        self.exits.wait()
        with self._lock:
            runs, self._runs = [*self._runs.values(), *self._standby.values()], {}
            self._standby = {}
        for run in runs:
            run.close()


# What an evaluation keeps once judged: its logs, the candidate and the sources it built from,
# never bulk data (a candidate's scratch files, objects, libraries). A full disk is a machine fault.
_KEEP_SUFFIXES = {".py", ".cu", ".cpp", ".cc", ".cuh", ".h", ".hpp", ".ninja", ".log", ".txt", ".json", ".md"}
_KEEP_MAX_BYTES = 4 << 20


def tidy(workdir: Path) -> None:
    """Drop what a judged evaluation need not keep (its scratch, objects and libraries); keep its logs and sources."""
    for d in ("tmp", "out", "handoff"):
        shutil.rmtree(workdir / d, ignore_errors=True)
    build = workdir / "build"
    if build.is_dir() and not build.is_symlink():
        for p in build.rglob("*"):
            try:
                if p.is_symlink() or (
                    p.is_file() and (p.suffix not in _KEEP_SUFFIXES or p.stat().st_size > _KEEP_MAX_BYTES)
                ):
                    p.unlink()
            except OSError:
                pass


class Exits:
    """Candidate workers ended after their verdict went back (``Judge.finish(exit_later=True)``), each in a thread
    of its own: a worker's exit is its CUDA context's teardown, 0.1 s on the H100, which its caller need not wait
    for. ``wait`` joins them all (a judge's close)."""

    def __init__(self) -> None:
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()

    def start(self, run: CandidateRun | None, workdir: Path, then: Callable[[Path], None] | None = None) -> None:
        """End ``run`` (if any), tidy ``workdir``, then ``then(workdir)``, in the background."""

        def end() -> None:
            try:
                if run is not None:
                    run.close()
                tidy(workdir)
                if then is not None:
                    then(workdir)
            except Exception:  # a worker already gone, files already removed: nothing of a verdict depends on it
                pass
            finally:
                with self._lock:
                    self._threads.discard(threading.current_thread())

        t = threading.Thread(target=end, name="kernelfix-worker-exit", daemon=True)
        with self._lock:
            self._threads.add(t)
        t.start()

    def wait(self) -> None:
        while True:
            with self._lock:
                pending = list(self._threads)
            if not pending:
                return
            for t in pending:
                t.join()
