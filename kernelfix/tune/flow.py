"""The tune, step by step, each step recorded in ``DIR/report.json`` before the next begins.

    rank      run the script to its model's call; profile; rank (kept: a rerun reuses it)
    capture   the top K modules worth a kernel, each ``--calls all`` into DIR/tasks/ (a module capture
              cannot trace keeps its row with the reason and the next one takes its place)
    optimize  one batch session per captured module in DIR/sessions/ (finished ones skipped, the others
              resumed, as `kernelfix batch` does)
    keep      each correct kernel tried in the model, then the kept ones together; report.kept is
              what ``kernelfix.load_tuned`` applies

A rerun of the same command does only what is left: a trial is redone only when its session's best
kernel changed (a resumed session found a better one).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.batch.plan import BatchSettings, Job, PlanError
from kernelfix.agent.batch.worker import TaskResult, prior_state
from kernelfix.agent.session_dir import read_trajectory
from kernelfix.base import atomic
from kernelfix.base.version import __version__
from kernelfix.capture.errors import CaptureFailed, CaptureInputError
from kernelfix.capture.files import CaptureFiles
from kernelfix.tools.config import JudgeConfig
from kernelfix.tune.decide import promising
from kernelfix.tune.jobs import plan_job, task_stem
from kernelfix.tune.model_call import ModelCall, collections_skip_what_was_there, free_memory
from kernelfix.tune.tune_config import TuneConfig
from kernelfix.tune.tune_report import KeptSwap, ModuleRow, SwapTrial, TuneReport, instances, label

REPORT = "report.json"

RunSessions = Callable[[list[Job]], dict[str, TaskResult]]


class TuneInputError(Exception):
    """Bad input (exit 2): no script, the script fails, a report of another tune in DIR, a bad model."""


@dataclass
class TuneOptions:
    script: Path
    out: Path
    llm: str
    top: int
    cfg: TuneConfig
    judge: JudgeConfig  # its device: --device (None: where the script builds the model); the sessions judge there
    agent: AgentConfig
    script_args: list[str] = field(default_factory=list)
    backward: bool | None = None  # --backward; None: as the script (a training step ranks forward+backward)
    rank_only: bool = False  # --rank-only: the ranking, nothing captured or optimized


def read_report(out: str | Path) -> TuneReport | None:
    f = Path(out) / REPORT
    if not f.is_file():
        return None
    try:
        return TuneReport.model_validate_json(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise TuneInputError(f"cannot read {f}: {str(e).splitlines()[0]}") from None


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class Tune:
    def __init__(self, opts: TuneOptions, *, say: Callable[[str], None], run_sessions: RunSessions):
        from kernelfix.tune.text import fit_lines

        self.o = opts
        self.say = lambda text: say(
            fit_lines(text)
        )  # every line within the terminal's 120 columns, broken between words
        self.run_sessions = run_sessions
        self.path = opts.out / REPORT
        self._call: ModelCall | None = None
        self._trials = None

    # ------------------------------------------------------------------ the steps

    @collections_skip_what_was_there()
    def run(self) -> TuneReport:
        from kernelfix.tune.text import ranking_text

        r = self.start()
        if r.ranking is None:
            self.rank(r)
        else:
            self.say(f"ranking from {self.path} (a rerun: finished steps are not redone)")
        self.release()  # capture runs the script again; the sessions' judges get the GPU's memory
        self.capture(r)  # capture's checks on the targets, in rank order, before any session
        self.say(ranking_text(r))
        if not r.selected:
            from kernelfix.tune.text import no_candidates_text

            self.say(no_candidates_text(r, self.o.cfg))
        if self.o.rank_only:
            return r
        if not r.selected:
            r.done = True
            self.save(r)
            return r
        self.optimize(r)
        self.keep(r)
        r.done = True
        self.save(r)
        return r

    def start(self) -> TuneReport:
        o = self.o
        if not o.script.is_file():
            raise TuneInputError(f"no such script: {o.script}")
        sha = _sha256(o.script)
        r = read_report(o.out)
        if r is not None:
            differs = [
                what
                for what, same in (
                    ("script", r.script == str(o.script.resolve()) and r.script_sha256 == sha),
                    ("script arguments", r.script_args == o.script_args),
                    ("--backward", o.backward is None or o.backward == r.backward),
                )
                if not same
            ]
            if differs:
                raise TuneInputError(
                    f"{o.out} holds a tune of {r.script} {' '.join(r.script_args)} (backward {r.backward}); this one differs in its "
                    f"{', '.join(differs)}: give another --out, or remove {self.path} to start over there"
                )
            r.top, r.llm, r.done = o.top, o.llm, False
            r.judge_device = (
                o.judge.device or r.judge_device
            )  # new sessions judge there; started ones keep their own settings
            return r
        call = self.model_call()
        now = time.time()
        r = TuneReport(
            kernelfix_version=__version__,
            created_at=now,
            updated_at=now,
            script=str(o.script.resolve()),
            script_args=list(o.script_args),
            script_sha256=sha,
            model_name=call.name,
            model_class=f"{type(call.module).__module__}.{type(call.module).__qualname__}",
            inputs=call.signature(),
            device=str(call.device),
            judge_device=o.judge.device or call.device.type,
            backward=call.trains,
            why=call.why,
            llm=o.llm,
            top=o.top,
        )
        o.out.mkdir(parents=True, exist_ok=True)
        self.save(r)
        return r

    def model_call(self) -> ModelCall:
        from kernelfix.tune.model_call import run_to_model_call

        if self._call is None:
            try:
                self._call = run_to_model_call(self.o.script, self.o.script_args, backward=self.o.backward)
            except CaptureInputError as e:
                raise TuneInputError(str(e)) from None
            if self.o.judge.device:
                self._move(self._call, self.o.judge.device)
            if self._call.device.type == "cpu":
                os.environ.setdefault("TRITON_INTERPRET", "1")  # swapped Triton kernels run here, in the interpreter
        return self._call

    def _move(self, call: ModelCall, device: str) -> None:
        """--device D: the model and its recorded call on D, and one step there to show that the model runs there."""
        import torch

        from kernelfix.capture.script import is_user_file, shown_path
        from kernelfix.tune.model_profile import step_fn

        dev = torch.device(device)
        if call.device.type == dev.type:
            return
        call.to(dev)
        try:
            step_fn(call.module, call, backward=False)()
        except Exception as e:
            import traceback

            frames = [f for f in traceback.extract_tb(e.__traceback__) if is_user_file(f.filename)]
            where = (
                f" at {shown_path(frames[-1].filename)}:{frames[-1].lineno} ({(frames[-1].line or '').strip()})"
                if frames
                else ""
            )
            raise TuneInputError(
                f"the model does not run on {device} once moved there{where}: {type(e).__name__}: {str(e).splitlines()[0][:300]}. "
                f"A forward that makes tensors on a fixed device cannot be moved: build the model on {device} in the script "
                "(its own --device argument, if it has one) and leave out tune's --device"
            ) from None

    def release(self) -> None:
        """Drop this process's hold on the model (and the captures' copies of it) and their GPU memory."""
        self._call = self._trials = None
        free_memory()

    def rank(self, r: TuneReport) -> None:
        from kernelfix.tune.model_profile import profile_model
        from kernelfix.tune.rank import ranking

        call = self.model_call()
        what, _, why = r.why.partition(": ")
        from kernelfix.tune.text import wrapped

        self.say(
            wrapped(
                f"profiling {r.model_name} ({type(call.module).__name__}) on {call.device}, {what} ({why}): "
                f"{self.o.cfg.profile_steps} " + ("forward+backward steps" if r.backward else "forwards")
            )
        )
        prof = profile_model(call, backward=r.backward, steps=self.o.cfg.profile_steps)
        self._profile = prof
        r.ranking = ranking(prof, str(call.device), backward=r.backward)
        self._rerank(r)

    def _rerank(self, r: TuneReport) -> None:
        """The targets from the profile, less those capture cannot take (their parts take their place); what was
        already decided of each target (captured, selected) is kept."""
        from kernelfix.tune.rank import rows

        before = {m.kind: m for m in r.modules if m.kind}
        r.modules = rows(
            self._profile,
            r.model_name,
            r.model_class.rsplit(".", 1)[-1],
            min_share=self.o.cfg.min_share,
            measure=r.ranking.measure,
            excluded=r.uncapturable,
        )
        for m in r.modules:
            old = before.get(m.kind)
            if old is not None and m.candidate:
                m.capture, m.selected, m.task = old.capture, old.selected, old.task
        self.save(r)

    def capture(self, r: TuneReport) -> None:
        """Capture each target (its first instance) in rank order until ``top`` are captured: a target capture cannot
        take is marked with why, and the ranking is made again without it (what it holds can take its place)."""
        from kernelfix.capture.pipeline import capture
        from kernelfix.tune.tune_report import label

        tasks = self.o.out / "tasks"
        while True:
            failed = False
            for row in [m for m in r.modules if m.candidate]:
                if len(r.selected) >= r.top:
                    break
                if row.selected or row.capture not in (None, "ok"):
                    continue
                files = CaptureFiles(tasks / f"{task_stem(row.module)}.py")
                if files.task.is_file() and files.manifest.is_file():
                    manifest = files.read_manifest()
                    note = "captured earlier"
                else:
                    self.say(
                        f"capturing {label(row)} (#{row.rank}, {100 * row.share:.1f}%) from {row.module}: every signature it is called with"
                    )
                    try:
                        manifest = capture(
                            self.o.script,
                            row.module,
                            files.task,
                            calls="all",
                            max_calls=self.o.cfg.max_calls,
                            script_args=self.o.script_args,
                            force=True,
                            config=self.o.judge,
                            with_grad=r.backward,
                            backward=r.backward,
                        ).manifest
                    except (CaptureFailed, CaptureInputError) as e:
                        self.release()
                        row.capture = str(e)
                        self.say(f"  {label(row)}: capture cannot take it: {e}")
                        if row.kind and getattr(self, "_profile", None) is not None:
                            r.uncapturable[row.kind] = f"capture cannot take it: {e}"
                            self._rerank(r)
                            failed = True
                            break
                        self.save(r)
                        continue
                    self.release()
                    note = f"{sum(manifest.graph_ops.values())} ATen ops, {max(1, len(manifest.calls))} signature(s), reproduces its calls"
                row.capture = "ok"
                row.selected, row.task = True, str(files.task.resolve())
                if r.backward and not manifest.backward:
                    note += "; nothing in it needs a gradient in the training step: its forward is tuned"
                self.say(f"  {label(row)}: {files.task} ({note})")
                self.save(r)
            if not failed:
                return

    def optimize(self, r: TuneReport) -> None:
        allowed = [
            *self.o.judge.extra_allowed_ops,
            *[op for op in self.o.cfg.library_ops if op not in self.o.judge.extra_allowed_ops],
        ]
        jobs: dict[str, Job] = {}
        for row in r.selected:
            if row.skipped:
                continue
            # A target whose task has no backward (nothing in it needs a gradient) is judged on its forward.
            backward = r.backward and CaptureFiles(Path(row.task)).read_manifest().backward
            settings = BatchSettings(
                out=str(self.o.out.resolve()),
                agent=self.o.agent,
                judge=self.o.judge.model_copy(
                    update={
                        "device": r.judge_device,
                        "backward": True if backward else self.o.judge.backward,
                        "extra_allowed_ops": allowed,
                    }
                ),
            )
            try:
                job = plan_job(row, settings, r.llm)
            except PlanError as e:
                row.skipped = f"its session cannot run: {e}"
                self.say(f"  {row.module}: skipped: {row.skipped}")
                continue
            row.session = str(job.session_dir)
            jobs[row.module] = job
        self.save(r)
        if not jobs:
            return
        self.say(
            f"optimizing {len(jobs)} module{'s' if len(jobs) > 1 else ''} with {r.llm}; sessions in {self.o.out / 'sessions'}"
        )
        try:
            self.run_sessions(list(jobs.values()))
        finally:  # interrupted too: what the sessions did so far
            for module, job in jobs.items():
                self._record_session(r.row(module), job)
            self.save(r)

    def _record_session(self, row: ModuleRow, job: Job) -> None:
        state, traj = prior_state(job.session_dir)
        row.session_status = {"new": None, "finished": "finished", "unfinished": "unfinished", "dead": "failed"}[state]
        traj = traj or read_trajectory(job.session_dir, unreadable_as_none=True)
        if traj is not None:
            row.correct = traj.outcome.success
            row.best_turn = traj.outcome.best_turn
            row.task_speedup_eager = traj.outcome.best_speedup_eager

    def keep(self, r: TuneReport) -> None:
        from kernelfix.tune.text import trial_text

        ready = [m for m in r.selected if m.correct and m.session and (Path(m.session) / "best.py").is_file()]
        for m in r.selected:
            if m.session and not m.correct and m.swap is None:
                self.say(f"  {m.module}: no correct kernel ({m.session_status or 'not run'}): nothing to swap")
        if (
            self.o.cfg.trials == "together" and len(ready) > 1
        ):  # every correct kernel at once first: one compile of the model
            r.combined = self._combined(r, ready)
            if r.combined is not None and r.combined.kept:
                r.kept = [_kept(m) for m in ready]
                return self._done(r)
            self.say("  together they are not kept: each alone")
        todo = [m for m in ready if m.swap is None or m.swap.best_turns != [m.best_turn]]
        if todo:
            self.say(
                f"trying {len(todo)} swap{'s' if len(todo) > 1 else ''} in {r.model_name}: its output, and its "
                + ("forward+backward" if r.backward else "forward")
                + f" timed in {self.o.cfg.rounds} paired rounds, eager and compiled"
            )
        for m in todo:
            m.swap = self.trials(r).trial([(i, m.session) for i in instances(m)], [m.best_turn], targets=[label(m)])
            self.say(trial_text(m.swap, self.o.cfg))
            self.save(r)
        kept = [m for m in ready if m.swap is not None and m.swap.kept]
        # Swaps inside the noise alone but faster at the median join the kept ones: their gains add up (decide.py).
        hopeful = [
            m
            for m in ready
            if m.swap is not None and not m.swap.kept and promising(m.swap.eager, m.swap.compiled, self.o.cfg)
        ]
        group = kept + hopeful if len(kept) + len(hopeful) > 1 else kept
        r.combined = self._combined(r, group)
        if r.combined is not None and r.combined.kept:
            r.kept = [_kept(m) for m in group]
            return self._done(r)
        if hopeful and len(kept) > 1:  # the group failed: the swaps kept alone, together
            note = f"the swaps {', '.join(m.module for m in group)} together: {r.combined.reason}"
            if note not in r.notes:
                r.notes.append(note)
            r.combined = self._combined(r, kept)
            if r.combined is not None and r.combined.kept:
                r.kept = [_kept(m) for m in kept]
                return self._done(r)
        if kept:  # together they are not faster: the best one alone, which was
            best = max(kept, key=lambda m: m.swap.eager.speedup or 0.0)
            r.kept = [_kept(best)]
            if r.combined is not None and r.combined.modules != [best.module]:
                note = f"the swaps {', '.join(r.combined.modules)} together: {r.combined.reason}; kept the best alone, {best.module}"
                if note not in r.notes:
                    r.notes.append(note)
            r.combined = best.swap
        else:
            r.kept = []
        self._done(r)

    def _done(self, r: TuneReport) -> None:
        if self._trials is not None:
            r.notes += [n for n in self._trials.notes if n not in r.notes]
        self.save(r)

    def _combined(self, r: TuneReport, kept: list[ModuleRow]) -> SwapTrial | None:
        from kernelfix.tune.text import trial_text

        if not kept:
            return None
        if len(kept) == 1:
            return kept[0].swap
        modules = [i for m in kept for i in instances(m)]
        turns = [m.best_turn for m in kept]
        if r.combined is not None and r.combined.modules == modules and r.combined.best_turns == turns:
            return r.combined
        self.say(f"trying the {len(kept)} swaps together")
        t = self.trials(r).trial(
            [(i, m.session) for m in kept for i in instances(m)], turns, targets=[label(m) for m in kept]
        )
        self.say(trial_text(t, self.o.cfg))
        return t

    def trials(self, r: TuneReport):
        from kernelfix.tune.swaps import Trials

        if self._trials is None:
            self._trials = Trials(
                self.model_call(),
                model_name=r.model_name,
                cfg=self.o.cfg,
                judge_cfg=self.o.judge,
                backward=r.backward,
                say=self.say,
            )
        return self._trials

    def save(self, r: TuneReport) -> None:
        r.updated_at = time.time()
        atomic.write_json(self.path, r)


def _kept(m: ModuleRow) -> KeptSwap:
    return KeptSwap(module=m.module, session=m.session, instances=[i.module for i in m.instances])
