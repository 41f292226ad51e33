"""The judge: compile, check, police and time one candidate against a task.

Each stage is a method that takes an :class:`Evaluation` and returns it
advanced, so the agent's graph can run each as its own node and a UI can show
each as it finishes. Every stage that runs candidate code does so in a fresh
child process (``kernelfix.tools.harness``) under the sandbox's limits; the
reference runs in its own child before any candidate code runs, and outputs are
compared here, in the judge's process.

    judge = Judge("task.py", JudgeConfig(device="cpu"))
    verdict = judge.evaluate(source)            # all stages
    ev = judge.start(source)                    # or stage by stage
    for name in STAGES:                         # compile, correctness, legality, benchmark, profile
        ev = getattr(judge, name)(ev)
    verdict = judge.finish(ev)
"""

from __future__ import annotations

import contextlib
import json
import secrets
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from kernelfix.sandbox import ChildOutcome, Isolation, Limits, credential_paths, run_child, scrubbed_env
from kernelfix.sandbox.isolation import for_gpu
from kernelfix.tools import candidate as candidate_mod
from kernelfix.tools import bottleneck, feedback, input_variants, ncu, ncu_csv, static_checks
from kernelfix.tools.allowlist import is_allowed, make_allowed
from kernelfix.tools.cache_dir import CACHE_ENV, INDUCTOR_CACHE, TRITON_CACHE, cache_root, compiler_caches
from kernelfix.tools.classify import Failure, classify
from kernelfix.tools.compare import compare, inputs_mutated, leaves, relative_error, vacuous_tolerance
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.device_lease import GPU_STAGES, DeviceLease, visible_gpu
from kernelfix.tools.task import Task, TaskError
from kernelfix.tools.verdict import (
    SANDBOX_NOTE,
    Backend,
    Category,
    CompileReport,
    CorrectnessReport,
    ExtensionBuild,
    InputVariant,
    LegalityReport,
    ProfileReport,
    Stage,
    StaticFinding,
    TimingStats,
    Timings,
    TrialReport,
    Verdict,
)

STAGES: tuple[Stage, ...] = ("compile", "correctness", "legality", "benchmark", "profile")


class StageEvent(BaseModel):
    """Progress for a UI: a stage started, moved, finished or was skipped."""

    stage: Stage | Literal["reference"]
    status: Literal["started", "progress", "finished", "skipped"]
    detail: str = ""
    done: int | None = None
    total: int | None = None


EventSink = Callable[[StageEvent], None]


class Evaluation(BaseModel):
    """One candidate on its way through the stages. Serializable, so the agent can checkpoint it.

    ``workdir`` belongs to the judge (candidate source, specs, input copies, logs);
    candidate code may write only its ``build``, ``tmp`` and ``out`` subdirectories
    (and the shared caches), and sees the rest read-only.
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    task: str
    device: str
    workdir: str
    code: str | None = None
    backend: Backend = "unknown"
    sha1: str | None = None
    category: Category | None = None  # the first failure; None while all is well
    failed_stage: Stage | None = None
    message: str | None = None
    compiled: bool = False
    compile: CompileReport | None = None
    correctness: CorrectnessReport | None = None
    legality: LegalityReport | None = None
    timings: Timings | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    profile: ProfileReport | None = None
    warnings: list[str] = Field(default_factory=list)
    stage_seconds: dict[str, float] = Field(default_factory=dict)
    stages_done: list[str] = Field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.category is not None

    @property
    def candidate_path(self) -> Path:
        return Path(self.workdir) / "candidate.py"

    def fail(self, stage: Stage, category: Category, message: str) -> "Evaluation":
        if self.category is None:
            self.category, self.failed_stage, self.message = category, stage, message
        return self


@dataclass
class _Trial:
    index: int
    seed: int
    inputs: Path  # private copy; candidates get their own
    purpose: Literal["correctness", "fresh", "varied"]
    variant: InputVariant | None = None  # varied trials: how their inputs derive from trial variant_of's
    variant_of: int | None = None


@dataclass
class _Reference:
    trials: list[_Trial]
    outputs: dict[int, Any] = field(default_factory=dict)
    outputs64: dict[int, Any] = field(default_factory=dict)  # float64 reference, where the task allows one
    noise: dict[int, float] = field(default_factory=dict)  # the float32 reference's own relative error vs float64
    vacuous: str | None = None  # a trivial output that passes atol/rtol, on which trial
    skipped_variants: dict[str, str] = field(default_factory=dict)
    float64_note: str | None = None
    input_bytes: int = 0
    output_bytes: int = 0

    def noise_for(self, t: _Trial) -> float:
        """The trial's own, else the first trial's: it stands for the task's own input distribution."""
        return self.noise.get(t.index, self.noise.get(0, 0.0))


def resolve_device(requested: str | None) -> tuple[str, str | None]:
    """The device to use and, when it was chosen for the user, a one-line notice."""
    if requested is not None:
        return requested, None
    if torch.cuda.is_available():
        return "cuda", None
    return "cpu", "no CUDA GPU here: judging on cpu (Triton kernels run in the interpreter; nothing is timed)"


def _memory_limit(config: JudgeConfig) -> int:
    if config.memory_limit_gb is not None:
        return int(config.memory_limit_gb * 2**30)
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 16 << 30
    return int(min(total * 3 // 4, 64 << 30))


class Judge:
    """Judges candidates for one task. Thread-safe; the reference is computed once."""

    def __init__(
        self, task: Task | str | Path, config: JudgeConfig | None = None, *, workdir: str | Path | None = None, gpu: str | None = None
    ):
        """``gpu``: the CUDA device (as CUDA_VISIBLE_DEVICES names it) this judge's children use; default the first visible."""
        self.task = task if isinstance(task, Task) else Task.load(task)
        self.config = (config or JudgeConfig()).for_task(self.task.name)
        self.device, self.device_notice = resolve_device(self.config.device)
        self.gpu = gpu
        # GPU stages queue per device, across processes, so timed runs never share a GPU.
        self._lease = DeviceLease(cache_root() / "locks", gpu or visible_gpu()) if self.device == "cuda" else None
        self._gpu_sandbox_notes: list[str] = []  # layers the GPU needed turned off on this machine
        self.allowed_ops = make_allowed(self.config.extra_allowed_ops, self.config.removed_allowed_ops)
        # Unpredictable unless the user fixes it: code run at import cannot regenerate the trials' inputs.
        self.seed = self.config.seed if self.config.seed is not None else secrets.randbelow(2**30)
        self._own_root = workdir is None
        self.root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="kernelfix-judge-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self._private = self.root / "reference"
        self._private.mkdir(parents=True, exist_ok=True)
        # The reference runs from the judge's own copy: what the candidate may do to the user's file changes nothing.
        self._task_copy = self._private / "task.py"
        self._task_copy.write_text(self.task.source)
        self._ref: _Reference | None = None
        self._ref_lock = threading.Lock()
        self._credentials = credential_paths(extra_dirs=[self.task.path.parent, Path.cwd()]) if self.config.hide_credentials else []

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "Judge":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _env(self, workdir: Path) -> dict[str, str]:
        cache = cache_root()
        extra = {
            CACHE_ENV: str(cache),  # the child's HOME is its own tmp dir; the build cache is shared
            "HOME": str(workdir / "tmp"),
            "TMPDIR": str(workdir / "tmp"),
            "TORCH_EXTENSIONS_DIR": str(workdir / "build"),
            "TRITON_CACHE_DIR": str(cache / TRITON_CACHE),
            "TORCHINDUCTOR_CACHE_DIR": str(cache / INDUCTOR_CACHE),
        }
        if self.device == "cpu":
            extra["TRITON_INTERPRET"] = "1"
            extra["CUDA_VISIBLE_DEVICES"] = ""
        elif self.gpu is not None:
            extra["CUDA_VISIBLE_DEVICES"] = self.gpu
        return scrubbed_env(extra)

    def _run(
        self,
        stage: str,
        workdir: Path,
        spec: dict[str, Any],
        timeout_s: float,
        on_event: EventSink | None,
        ui_stage: Stage | Literal["reference"],
        wrap: Sequence[str] = (),
        ev: Evaluation | None = None,
    ) -> ChildOutcome:
        """Run one harness stage in a sandboxed child; ``wrap``: a command (a profiler) that runs the child."""
        for d in _CANDIDATE_DIRS:
            _own_dir(workdir / d)
        (workdir / "logs").mkdir(parents=True, exist_ok=True)
        spec = {"stage": stage, "device": self.device, "init_seed": self.seed, **spec}
        spec_path = workdir / "handoff" / f"{stage}.spec.json"
        if spec_path.is_symlink() or spec_path.exists():
            spec_path.unlink()  # never write through something an earlier stage's candidate planted
        spec_path.write_text(json.dumps(spec, default=str))

        def relay(msg: dict[str, Any]) -> None:
            if on_event is None or msg.get("type") != "phase":
                return
            on_event(StageEvent(stage=ui_stage, status="progress", detail=str(msg.get("phase")), done=msg.get("done"), total=msg.get("total")))

        c = self.config
        limits = Limits(
            wall_s=timeout_s,
            memory_bytes=_memory_limit(c),
            max_processes=c.max_processes,
            output_limit_bytes=int(c.output_limit_mb * 2**20),
        )
        argv = [*wrap, sys.executable, "-m", "kernelfix.tools.harness", str(spec_path)]
        iso = self._isolation(stage, workdir)

        def child() -> ChildOutcome:
            return run_child(argv, cwd=workdir, env=self._env(workdir), limits=limits, isolation=iso, authenticate=True, on_message=relay)

        lease = self._lease.hold(f"{self.task.name} {stage}") if self._lease is not None and stage in GPU_STAGES else contextlib.nullcontext()
        with lease:
            outcome = child()
            # (a wrapping profiler may not pass the message pipe on: no hello there is no sign of trouble)
            if not wrap and outcome.last("hello") is None and outcome.last("error") is None and not outcome.killed_by_us and outcome.signal is None:
                # The worker died before running anything of the candidate's: infrastructure, retried once.
                outcome = child()
        if outcome.forged_messages:
            # Nothing the child said can be trusted: no result, so the stage fails as tampering.
            outcome.messages = [m for m in outcome.messages if m.get("type") in ("hello", "phase")]
        if ev is not None:
            notes = [*outcome.sandbox_notes, *self._gpu_sandbox_notes]
            ev.warnings += [SANDBOX_NOTE + n for n in notes if SANDBOX_NOTE + n not in ev.warnings]
        log = workdir / "logs" / f"{stage}.log"
        log.write_text(
            f"$ {' '.join(argv)}\nreturncode={outcome.returncode} signal={outcome.signal} "
            f"timed_out={outcome.timed_out} wall={outcome.wall_s:.2f}s\n"
            f"--- stdout ({outcome.stdout_bytes} bytes, tail) ---\n{outcome.stdout_tail}\n"
            f"--- stderr ({outcome.stderr_bytes} bytes, tail) ---\n{outcome.stderr_tail}\n"
            f"--- messages ---\n" + "\n".join(json.dumps(m, default=str)[:4000] for m in outcome.messages) + "\n"
            + "".join(f"--- forged ---\n{m}\n" for m in outcome.forged_messages[:20])
            + f"--- sandbox ---\nlayers={outcome.isolation} notes={outcome.sandbox_notes}\n"
        )
        return outcome

    def _isolation(self, stage: str, workdir: Path) -> Isolation:
        """What the stage's child may write and must not see.

        The reference stage writes the judge's private dir; candidate stages write
        only their own build/tmp/out dirs and see neither the private dir nor other
        evaluations' dirs.
        """
        base = self.config.sandbox
        if stage == "reference":
            writable, hidden = [workdir], []
        else:
            # Other evaluations' dirs too: their outputs for the same trials would be answers to copy.
            evals = self.root / "evals"
            siblings = [p for p in evals.iterdir() if p != workdir] if workdir.parent == evals else []
            writable, hidden = [workdir / d for d in _CANDIDATE_DIRS], [self._private, *siblings]
        iso = base.model_copy(
            update={
                "writable": [*map(str, writable), *map(str, compiler_caches()), *base.writable],
                "hidden": [*map(str, hidden), *self._credentials, *base.hidden],
            }
        )
        if self.device == "cuda":
            iso, note = for_gpu(iso)
            if note and note not in self._gpu_sandbox_notes:
                self._gpu_sandbox_notes.append(note)
        return iso

    # ------------------------------------------------------------------ reference

    def reference(self, on_event: EventSink | None = None) -> _Reference:
        """Inputs and reference outputs for every trial, computed once per judge.

        Raises TaskError when the task does not import or run.
        """
        with self._ref_lock:
            if self._ref is not None:
                return self._ref
            c = self.config
            n = c.trials
            purposes: list[Literal["correctness", "fresh", "varied"]] = ["correctness"] * n + ["fresh"] + ["varied"] * len(c.input_variants)
            seeds = [self.seed + 1009 * (i + 1) for i in range(len(purposes))]
            inputs_dir = self._private / "inputs"
            inputs_dir.mkdir(exist_ok=True)
            trials = [_Trial(i, s, inputs_dir / f"inputs_{i}.pt", p) for i, (s, p) in enumerate(zip(seeds, purposes))]
            for k, (t, variant) in enumerate(zip([t for t in trials if t.purpose == "varied"], c.input_variants)):
                t.variant, t.variant_of = variant, k % n  # each varies a different trial's inputs
            with_float64 = {0} | {t.index for t in trials if t.variant}  # the first trial stands for the task's own distribution
            spec = {
                "task_path": str(self._task_copy),
                "float64": c.float64_reference,
                "trials": [
                    {
                        "index": t.index, "seed": t.seed, "inputs": str(t.inputs), "reference": str(self._ref_path(t.index)),
                        "variant": t.variant, "variant_of": t.variant_of,
                        "reference64": str(self._ref_path(t.index, 64)) if c.float64_reference and t.index in with_float64 else None,
                    }
                    for t in trials
                ],
            }
            if on_event:
                on_event(StageEvent(stage="reference", status="started", detail="computing reference outputs"))
            outcome = self._run("reference", self._private, spec, c.run_timeout_s, on_event, "reference")
            result = outcome.last("result")
            if result is None:
                raise TaskError(self._reference_problem(outcome))
            ref = _Reference(trials=trials, input_bytes=int(result["input_bytes"]), output_bytes=int(result["output_bytes"]), float64_note=result.get("float64_note"))
            unchanged = set(result.get("unchanged_variants") or [])
            for t in trials:
                if t.index in unchanged:
                    ref.skipped_variants[t.variant] = "no floating-point tensor inputs to vary"
                    continue
                ref.outputs[t.index] = _take(self._ref_path(t.index))  # reference outputs live only in this process from here on
                if self._ref_path(t.index, 64).exists():
                    ref.outputs64[t.index] = _take(self._ref_path(t.index, 64))
                    ref.noise[t.index] = relative_error(ref.outputs64[t.index], ref.outputs[t.index]) or 0.0
                if t.variant and not _finite(ref.outputs[t.index]):
                    ref.skipped_variants[t.variant] = f"the reference is not finite on {input_variants.describe(t.variant, t.variant_of)}"
                    del ref.outputs[t.index]
                    ref.outputs64.pop(t.index, None)
            ref.trials = [t for t in trials if t.index in ref.outputs]
            for t in (t for t in ref.trials if t.purpose == "correctness"):
                if why := vacuous_tolerance(ref.outputs[t.index], atol=c.atol, rtol=c.rtol):
                    ref.vacuous = f"on trial {t.index} {why}"
                    break
            self._ref = ref
            if on_event:
                on_event(StageEvent(stage="reference", status="finished"))
            return ref

    def _ref_path(self, index: int, bits: int = 32) -> Path:
        return self._private / (f"ref_{index}.pt" if bits == 32 else f"ref{bits}_{index}.pt")

    def _reference_problem(self, outcome: ChildOutcome) -> str:
        err = outcome.last("error")
        where = f"task {self.task.path}"
        if outcome.timed_out:
            return f"{where}: the reference did not finish within {self.config.run_timeout_s:g} s"
        if err is None:
            return f"{where}: the reference process died ({outcome.signal or f'exit code {outcome.returncode}'}): {outcome.stderr_tail.strip()[-500:]}"
        phase = {"load_task": "importing it", "build_reference": "building Model(*get_init_inputs())"}.get(err.get("phase"), "running Model.forward")
        return f"{where}: {err.get('exc_type')} while {phase}: {(err.get('message') or '').strip()[:800]}"

    # ------------------------------------------------------------------ stages

    def start(self, source: str, *, filename: str = "candidate.py", workdir: str | Path | None = None) -> Evaluation:
        """Extract the candidate (from a .py source or a model reply) and run the static checks."""
        t0 = time.monotonic()
        ev_id = uuid.uuid4().hex[:12]
        wd = Path(workdir) if workdir else self.root / "evals" / ev_id
        wd.mkdir(parents=True, exist_ok=True)
        ext = candidate_mod.from_file_text(source, filename)
        ev = Evaluation(id=ev_id, task=self.task.name, device=self.device, workdir=str(wd), code=ext.code, backend=ext.backend, sha1=ext.sha1)
        if ext.code is not None:
            ev.candidate_path.write_text(ext.code)
            (wd / "task.py").write_text(self.task.source)
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

    def _candidate_spec(self, ev: Evaluation) -> dict[str, Any]:
        wd = Path(ev.workdir)
        return {
            "task_path": str(wd / "task.py"),
            "candidate_path": str(ev.candidate_path),
            "build_dir": str(wd / "build"),
            "build": self.config.build.model_dump(),
        }

    def _fail_from(self, ev: Evaluation, stage: Stage, outcome: ChildOutcome, timeout_s: float) -> Evaluation:
        f: Failure = classify(stage, outcome, timeout_s=timeout_s, build_dir=Path(ev.workdir) / "build")
        if stage == "compile" and f.category.family.value == "compile_error":
            ev.compile = CompileReport(backend=ev.backend, seconds=outcome.wall_s, ok=False, errors=f.details, log_path=str(Path(ev.workdir) / "logs" / "compile.log"))
        elif f.details:
            ev.warnings.append("traceback: " + " | ".join(f.details[-4:]))
        if f.category.family.value == "compile_error":
            stage = "compile"
        return ev.fail(stage, f.category, f.message)

    def _timed(self, ev: Evaluation, stage: Stage, on_event: EventSink | None, fn: Callable[[], Evaluation]) -> Evaluation:
        if ev.failed or stage in ev.stages_done:
            if on_event:
                on_event(StageEvent(stage=stage, status="skipped"))
            return ev
        if on_event:
            on_event(StageEvent(stage=stage, status="started"))
        t0 = time.monotonic()
        ev = fn()
        ev.stage_seconds[stage] = round(time.monotonic() - t0, 3)
        ev.stages_done.append(stage)
        if on_event:
            on_event(StageEvent(stage=stage, status="finished", detail=ev.category.value if ev.category else "ok"))
        return ev

    def compile(self, ev: Evaluation, on_event: EventSink | None = None) -> Evaluation:
        """Import the candidate (building its extensions) and construct ModelNew."""

        def run() -> Evaluation:
            self.reference(on_event)  # a broken task stops here, before any candidate code runs
            outcome = self._run("compile", Path(ev.workdir), self._candidate_spec(ev), self.config.compile_timeout_s, on_event, "compile", ev=ev)
            result = outcome.last("result")
            err = outcome.last("error")
            extensions = _extension_builds(outcome)
            cached = bool(extensions) and all(b.cached for b in extensions)
            log_path = str(Path(ev.workdir) / "logs" / "compile.log")
            if result is not None:
                ev.compiled = True
                ev.compile = CompileReport(backend=ev.backend, seconds=outcome.wall_s, ok=True, cached=cached, extensions=extensions, log_path=log_path)
                return ev
            if err is not None and err.get("kind") == "gpu_required":
                ev.compiled = True
                ev.compile = CompileReport(
                    backend=ev.backend, seconds=outcome.wall_s, ok=True, cached=cached, extensions=extensions, note="built for the GPU; not loadable here", log_path=log_path
                )
                return ev.fail("correctness", Category.NO_GPU, f"{err.get('message')}; correctness, legality and timing need a CUDA GPU")
            failed = self._fail_from(ev, "compile", outcome, self.config.compile_timeout_s)
            if failed.compile is not None:
                failed.compile.extensions = extensions
            return failed

        return self._timed(ev, "compile", on_event, run)

    def _stage_inputs(self, ev: Evaluation, trials: list[_Trial]) -> list[dict[str, Any]]:
        """Give the candidate its own copies of the inputs; the judge keeps the originals."""
        d = _fresh_dir(Path(ev.workdir) / "handoff")
        out = []
        for t in trials:
            dst = d / t.inputs.name
            shutil.copyfile(t.inputs, dst)
            out.append({"index": t.index, "seed": t.seed, "inputs": str(dst)})
        return out

    def _compare(self, t: _Trial, out: Any) -> TrialReport:
        """One trial's candidate output against its reference: elementwise, relative error norm, float64."""
        ref, c = self.reference(), self.config
        rep = compare(ref.outputs[t.index], out, atol=c.atol, rtol=c.rtol, trial=t.index, seed=t.seed, rel_error_tol=c.rel_error_tol, noise=ref.noise_for(t))
        update: dict[str, Any] = {"variant": t.variant, "variant_of": t.variant_of}
        if t.index in ref.outputs64:  # relative_error is None where the output does not line up
            update |= {"error_vs_float64": relative_error(ref.outputs64[t.index], out), "reference_error_vs_float64": ref.noise[t.index]}
        return rep.model_copy(update=update)

    def _imprecise(self, report: CorrectnessReport) -> tuple[TrialReport, str] | None:
        """The first trial whose error vs float64 is far above the float32 reference's own, with what to say."""
        c = self.config
        for t in report.trials:
            e, own = t.error_vs_float64, t.reference_error_vs_float64
            if e is not None and own is not None and e > max(c.precision_factor * own, c.precision_floor):
                return t, (
                    f"trial {t.trial}: relative error {e:.2g} against a float64 reference, where the float32 reference's own is {own:.2g}: "
                    "fp16/bf16/TF32 arithmetic (or an approximation) inside a float32 task"
                )
        return None

    def correctness(self, ev: Evaluation, on_event: EventSink | None = None) -> Evaluation:
        """Run ModelNew on every correctness trial (the task's inputs, then their variants) and compare here."""

        def run() -> Evaluation:
            ref = self.reference(on_event)
            trials = [t for t in ref.trials if t.purpose in ("correctness", "varied")]  # correctness first: the in-place check uses the second
            wd = Path(ev.workdir)
            outdir = _fresh_dir(wd / "out" / "correctness")
            spec = {
                **self._candidate_spec(ev),
                "trials": self._stage_inputs(ev, trials),
                "outdir": str(outdir),
                "record_ops": self.config.runtime_legality,
            }
            outcome = self._run("correctness", wd, spec, self.config.run_timeout_s, on_event, "correctness", ev=ev)
            c = self.config
            report = CorrectnessReport(
                atol=c.atol, rtol=c.rtol, init_seed=self.seed, rel_error_tol=c.rel_error_tol, vacuous_tolerance=ref.vacuous,
                skipped_variants=dict(ref.skipped_variants), float64_note=ref.float64_note,
            )
            ev.correctness = report
            result = outcome.last("result")
            if result is None:
                return self._fail_from(ev, "correctness", outcome, self.config.run_timeout_s)
            self._record_ops(ev, result)
            for t in trials:
                out = _load_output(outdir / f"out_{t.index}.pt")
                if isinstance(out, _Unloadable):
                    return ev.fail("correctness", Category.OUTPUT_STRUCTURE, f"trial {t.index}: output is not a tensor or a tuple of tensors ({out.why})")
                report.trials.append(self._compare(t, out))
                after = _load_output(outdir / f"inputs_after_{t.index}.pt")
                if not isinstance(after, _Unloadable):
                    changed = inputs_mutated(torch.load(t.inputs, weights_only=True), after)
                    if changed:
                        report.input_mutated = True
                        report.mutated_inputs = sorted(set(report.mutated_inputs) | set(changed))
            bad = [t for t in report.trials if not t.ok and t.variant is None]
            if bad:
                return ev.fail("correctness", bad[0].category or Category.NUMERICAL, f"trial {bad[0].trial}: {bad[0].problem}")
            if sum(t.variant is None for t in trials) >= 2:  # the harness reruns trials[1]'s contents in trials[0]'s tensors
                second = trials[1]
                inplace = _load_output(outdir / f"out_inplace_{second.index}.pt")
                if not isinstance(inplace, _Unloadable):
                    rep = self._compare(second, inplace)
                    if not rep.ok:
                        return ev.fail(
                            "correctness",
                            Category.OUTPUT_CACHING,
                            f"given the same input tensors with new contents, forward returned a stale result ({rep.problem})",
                        )
            if report.input_mutated:
                return ev.fail("correctness", Category.INPUT_MUTATION, f"forward wrote to its input(s) {report.mutated_inputs}")
            varied = [t for t in report.trials if not t.ok]
            if varied:
                t = varied[0]
                where = input_variants.describe(t.variant, t.variant_of) if t.variant else "varied inputs"
                return ev.fail("correctness", Category.INPUT_DEPENDENT, f"right on the task's own inputs, wrong on trial {t.trial} ({where}): {t.problem}")
            imprecise = self._imprecise(report) if c.precision != "off" else None
            if imprecise is not None:
                t, why = imprecise
                if c.precision == "fail":
                    report.trials[report.trials.index(t)] = t.model_copy(update={"ok": False, "category": Category.PRECISION, "problem": why})
                    return ev.fail("correctness", Category.PRECISION, why)
                report.precision_warning = why
                ev.warnings.append(f"precision: {why}")
            return ev

        return self._timed(ev, "correctness", on_event, run)

    def _record_ops(self, ev: Evaluation, result: dict[str, Any]) -> None:
        """Keep the ops the correctness run recorded, sorted against the allowlist."""
        report = ev.legality or LegalityReport()
        ev.legality = report
        if result.get("ops") is None:
            return
        all_ops: dict[str, int] = {}
        forbidden: dict[str, int] = {}
        for name, chain, count in result["ops"]:
            if not name.startswith("aten::") or any(c.startswith("kernelfix::triton") for c in chain):
                continue  # not an aten op, or Triton's own machinery (interpreter copies, autotuner timing)
            if any(c.startswith("aten::") for c in chain):
                continue  # inside another aten op: shielded by an allowed one, or counted under a forbidden one
            key = name.removeprefix("aten::")
            all_ops[key] = all_ops.get(key, 0) + count
            if not is_allowed(name, self.allowed_ops):
                forbidden[key] = forbidden.get(key, 0) + count
        report.aten_ops, report.forbidden_ops = all_ops, forbidden
        report.runtime_checked = True
        report.recorder_intact = bool(result.get("recorder_intact", True))

    def legality(self, ev: Evaluation, on_event: EventSink | None = None) -> Evaluation:
        """Judge the aten ops recorded during every correctness call against the allowlist."""

        def run() -> Evaluation:
            report = ev.legality or LegalityReport()
            ev.legality = report
            if not self.config.runtime_legality:
                report.note = "runtime legality check switched off in config"
                return ev
            if not report.runtime_checked:
                report.note = "no op record (the correctness stage did not run)"
                return ev
            if not report.recorder_intact:
                return ev.fail("legality", Category.TAMPERING, "the op recorder was switched off during forward")
            if report.forbidden_ops:
                ops = report.forbidden_ops
                top = ", ".join(sorted(ops, key=lambda k: -ops[k])[:5])
                return ev.fail("legality", Category.DISALLOWED_ATEN, f"forward ran torch compute ops: {top}")
            return ev

        return self._timed(ev, "legality", on_event, run)

    def benchmark(self, ev: Evaluation, on_event: EventSink | None = None) -> Evaluation:
        """Time eager, torch.compile and the candidate in one process; police the timing."""

        def run() -> Evaluation:
            if self.device != "cuda":
                ev.warnings.append(f"not timed: timing needs a CUDA GPU (device {self.device})")
                return ev
            ref = self.reference(on_event)
            timing = next(t for t in ref.trials if t.purpose == "correctness")
            fresh = next(t for t in ref.trials if t.purpose == "fresh")
            wd = Path(ev.workdir)
            outdir = _fresh_dir(wd / "out" / "benchmark")
            c = self.config
            spec = {
                **self._candidate_spec(ev),
                "trials": self._stage_inputs(ev, [timing, fresh]),
                "outdir": str(outdir),
                "timing_runs": c.timing_runs,
                "warmup_ms": c.warmup_ms,
                "timing_budget_s": c.timing_budget_s,
                "time_torch_compile": c.time_torch_compile,
                "flush_l2": c.flush_l2,
            }
            outcome = self._run("benchmark", wd, spec, c.bench_timeout_s, on_event, "benchmark", ev=ev)
            base, cand = outcome.last("baseline"), outcome.last("candidate_timing")
            if base is not None:
                ev.timings = Timings(
                    eager=TimingStats(**base["eager"]),
                    compiled=TimingStats(**base["compiled"]) if base.get("compiled") else None,
                    compile_note=base.get("compile_note"),
                    bytes_moved=base["bytes_moved"],
                    bandwidth_gbps=base["bandwidth_gbps"],
                    floor_ms=base["bytes_moved"] / (base["bandwidth_gbps"] * 1e9) * 1e3,
                    l2_flushed=c.flush_l2,
                    gpu=base.get("gpu"),
                )
            if outcome.last("result") is None or cand is None or ev.timings is None:
                return self._fail_from(ev, "benchmark", outcome, c.bench_timeout_s)
            t = ev.timings
            t.candidate = TimingStats(**cand["candidate"])
            starts = [m for m in outcome.messages if m.get("type") == "wall_start"]
            ends = [m for m in outcome.messages if m.get("type") == "wall_end"]
            if len(starts) != 1 or len(ends) != 1 or len([m for m in outcome.messages if m.get("type") == "candidate_timing"]) != 1:
                return ev.fail("benchmark", Category.TIMING_MANIPULATION, "extra or missing timing messages on the judge's channel")
            calls = max(1, int(ends[0].get("calls", 1)))
            t.wall_per_call_ms = (ends[0]["_t"] - starts[0]["_t"]) * 1e3 / calls
            out = _load_output(outdir / f"out_{fresh.index}.pt")
            rep = None if isinstance(out, _Unloadable) else self._compare(fresh, out)
            if rep is None or not rep.ok:
                why = out.why if isinstance(out, _Unloadable) else rep.problem
                return ev.fail("benchmark", Category.OUTPUT_CACHING, f"correct on the trials, wrong on fresh inputs after timing ({why})")
            med = t.candidate.median_ms
            if med < c.timing_wall_ratio * t.wall_per_call_ms - 0.02:
                return ev.fail(
                    "benchmark",
                    Category.TIMING_MANIPULATION,
                    f"CUDA events saw {med:.4g} ms per call, the judge's wall clock {t.wall_per_call_ms:.4g} ms: work ran outside the timed stream",
                )
            if t.floor_ms and t.eager and t.eager.median_ms >= c.excessive_speedup_margin * t.floor_ms and med < c.excessive_speedup_margin * t.floor_ms:
                return ev.fail(
                    "benchmark",
                    Category.EXCESSIVE_SPEEDUP,
                    f"{med:.4g} ms is below the {t.floor_ms:.4g} ms needed to move {t.bytes_moved / 1e6:.1f} MB at {t.bandwidth_gbps:.0f} GB/s",
                )
            ev.speedup_eager = t.eager.median_ms / med if t.eager and med > 0 else None
            ev.speedup_compile = t.compiled.median_ms / med if t.compiled and med > 0 else None
            return ev

        return self._timed(ev, "benchmark", on_event, run)

    def profile(self, ev: Evaluation, on_event: EventSink | None = None) -> Evaluation:
        """Nsight Compute on one forward of a correct, legal candidate (``JudgeConfig.profile``).

        Never changes the verdict: where ncu is missing, not permitted or too slow, the
        evaluation goes on with one warning and torch.profiler's kernel list instead.
        """

        def skip(detail: str) -> Evaluation:
            if on_event:
                on_event(StageEvent(stage="profile", status="skipped", detail=detail))
            return ev

        if not self.config.profile:
            return skip("profiling off")
        if ev.failed:
            return skip("the candidate failed an earlier stage")
        if "profile" in ev.stages_done:
            return skip("done")
        if not (ev.correctness and ev.correctness.trials and "legality" in ev.stages_done):
            return skip("only correct, legal candidates are profiled")
        if self.device != "cuda":
            note = f"not profiled: profiling needs a CUDA GPU (device {self.device})"
            ev.profile = ProfileReport(note=note)
            return skip(note)
        return self._timed(ev, "profile", on_event, lambda: self._profile(ev, on_event))

    def _profile(self, ev: Evaluation, on_event: EventSink | None) -> Evaluation:
        c = self.config
        ref = self.reference(on_event)
        trial = next(t for t in ref.trials if t.purpose == "correctness")
        wd = Path(ev.workdir)
        outdir = wd / "out" / "profile"
        outdir.mkdir(parents=True, exist_ok=True)
        spec = {
            **self._candidate_spec(ev),
            "trials": self._stage_inputs(ev, [trial]),
            "outdir": str(outdir),
            "warmup_calls": c.profile_warmup_calls,
            "nvtx_range": ncu.NVTX_RANGE,
        }
        path, problem = ncu.find(c.ncu_path)
        if path is not None:
            log = outdir / "ncu.csv"
            for extra_metrics in (True, False):  # without the extra metrics if this ncu refuses one
                log.unlink(missing_ok=True)
                wrap = ncu.command(path, log, c.profile_max_kernels, extra_metrics=extra_metrics)
                outcome = self._run("profile_ncu", wd, spec, c.profile_timeout_s, on_event, "profile", wrap=wrap, ev=ev)
                text = log.read_text(errors="replace") if log.exists() else ""
                parsed = ncu_csv.parse(text if '"ID",' in text else text + "\n" + outcome.stdout_tail)
                problem = ncu.diagnose(outcome, parsed, c.profile_timeout_s)
                if problem is None or problem.kind != "metrics":
                    break
            if problem is None:
                result = _stage_result(outcome, outdir / "profile_ncu.json")
                ev.profile = bottleneck.from_ncu(parsed.kernels, timings=ev.timings, task_flops=result.get("flops"), max_launches=c.profile_max_kernels)
                ev.profile.log_path = str(log)
                return ev
        assert problem is not None
        # Said once, as a warning; then the kernel list torch.profiler sees, where that works.
        ev.warnings.append(f"no Nsight Compute profile: {problem.message}")
        outcome = self._run("profile_torch", wd, spec, c.run_timeout_s, on_event, "profile", ev=ev)
        result = _stage_result(outcome, outdir / "profile_torch.json")
        if result.get("kernels") is not None:
            ev.profile = bottleneck.from_kernel_list(result["kernels"], timings=ev.timings, task_flops=result.get("flops"), note=problem.message)
        else:
            err = outcome.last("error")
            why = f"{err.get('exc_type')}: {(err.get('message') or '').strip()[:200]}" if err else (outcome.signal or f"exit code {outcome.returncode}")
            ev.profile = ProfileReport(note=f"{problem.message}; torch.profiler fallback failed too ({why})")
        return ev

    # ------------------------------------------------------------------ verdict

    def finish(self, ev: Evaluation) -> Verdict:
        category = ev.category or Category.OK
        fam = category.family.value
        correct: bool | None = None
        if fam == "correctness_error" or category == Category.OUTPUT_CACHING:
            correct = False
        elif ev.correctness is not None and ev.correctness.trials:
            correct = all(t.ok for t in ev.correctness.trials)
        legal: bool | None
        if fam == "cheating":
            legal = False
        elif ev.legality is not None and ev.legality.runtime_checked:
            legal = not ev.legality.forbidden_ops
        else:
            legal = None
        ok = category == Category.OK
        v = Verdict(
            category=category,
            compiled=ev.compiled,
            correct=correct,
            legal=legal,
            speedup_eager=ev.speedup_eager if ok else None,
            speedup_compile=ev.speedup_compile if ok else None,
            timings=ev.timings,
            task=self.task.name,
            device=self.device,
            backend=ev.backend,
            candidate_sha1=ev.sha1,
            failed_stage=ev.failed_stage,
            message=ev.message,
            compile=ev.compile,
            correctness=ev.correctness,
            legality=ev.legality,
            profile=ev.profile,
            warnings=list(ev.warnings),
            stage_seconds=dict(ev.stage_seconds),
            logs_dir=str(Path(ev.workdir) / "logs"),
        )
        v.feedback = feedback.render(v)
        return v

    def evaluate(self, source: str, *, filename: str = "candidate.py", on_event: EventSink | None = None, workdir: str | Path | None = None) -> Verdict:
        """All stages, in order, stopping at the first failure."""
        ev = self.start(source, filename=filename, workdir=workdir)
        for name in STAGES:
            ev = getattr(self, name)(ev, on_event)
        return self.finish(ev)


def _extension_builds(outcome: ChildOutcome) -> list[ExtensionBuild]:
    """What the child reported about its extension builds; informational, so garbage is dropped."""
    msg = outcome.last("builds")
    out = []
    for b in (msg or {}).get("builds") or []:
        try:
            out.append(ExtensionBuild.model_validate(b))
        except ValueError:
            continue
    return out


class _Unloadable:
    def __init__(self, why: str):
        self.why = why


def _take(path: Path) -> Any:
    """Load a reference file the judge's own child wrote, and delete it."""
    value = torch.load(path, weights_only=True)
    path.unlink()
    return value


def _finite(obj: Any) -> bool:
    return all(bool(torch.isfinite(x).all()) for _, x in leaves(obj) if isinstance(x, torch.Tensor) and x.is_floating_point())


# The only parts of an evaluation's workdir candidate code may write. "handoff" holds a stage's
# spec and input copies, which the harness reads and deletes before it imports the candidate.
_CANDIDATE_DIRS = ("build", "tmp", "out", "handoff")
_MAX_OUTPUT_FILE = 64 << 30


def _own_dir(path: Path) -> Path:
    """``path`` as a real directory: whatever candidate code left there (a symlink, a FIFO) is removed first."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _fresh_dir(path: Path) -> Path:
    """An empty directory for one stage's outputs: nothing a previous stage planted survives."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
    _own_dir(path.parent)
    path.mkdir()
    return path


def _load_output(path: Path) -> Any:
    """A candidate-written file, loaded without executing anything it contains.

    Only a regular file, opened without following links and without blocking: a
    symlink to the judge's files, a FIFO or a device must not stall or fool the judge.
    """
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return _Unloadable("no output was written")
    except OSError as e:
        return _Unloadable(f"output is not a regular file ({e.strerror})")
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return _Unloadable("output is not a regular file")
        if st.st_size > _MAX_OUTPUT_FILE:
            return _Unloadable(f"output file is {st.st_size / 2**30:.1f} GiB")
        try:
            return torch.load(f, weights_only=True)
        except Exception as e:  # pickled objects, subclasses, garbage
            return _Unloadable(f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")


def _stage_result(outcome: ChildOutcome, path: Path) -> dict[str, Any]:
    """A profile child's result: from the message pipe, else from the file it also writes."""
    result = outcome.last("result")
    if result is not None:
        return result
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
