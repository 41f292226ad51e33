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

from kernelfix import atomic
from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.batch.plan import BatchSettings, Job, PlanError
from kernelfix.agent.batch.worker import TaskResult, prior_state
from kernelfix.agent.session_dir import read_trajectory
from kernelfix.capture.errors import CaptureFailed, CaptureInputError
from kernelfix.capture.files import CaptureFiles
from kernelfix.tools.config import JudgeConfig
from kernelfix.tune.decide import promising
from kernelfix.tune.jobs import plan_job, task_stem
from kernelfix.tune.model_call import ModelCall
from kernelfix.tune.tune_config import TuneConfig
from kernelfix.tune.tune_report import KeptSwap, ModuleRow, SwapTrial, TuneReport
from kernelfix.version import __version__

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
    judge: JudgeConfig
    agent: AgentConfig
    script_args: list[str] = field(default_factory=list)
    backward: bool | None = None  # --backward; None: as the script (a training step ranks forward+backward)
    judge_device: str | None = None  # --device; None: where the model runs
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
        self.o = opts
        self.say = say
        self.run_sessions = run_sessions
        self.path = opts.out / REPORT
        self._call: ModelCall | None = None
        self._trials = None

    # ------------------------------------------------------------------ the steps

    def run(self) -> TuneReport:
        from kernelfix.tune.text import ranking_text

        r = self.start()
        if r.ranking is None:
            self.rank(r)
        else:
            self.say(f"ranking from {self.path} (a rerun: finished steps are not redone)")
        self.say(ranking_text(r))
        self.release()  # the sessions' judges get the GPU's memory; the keep step runs the script again
        if self.o.rank_only:
            return r
        self.capture(r)
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
            differs = [what for what, same in (
                ("script", r.script == str(o.script.resolve()) and r.script_sha256 == sha), ("script arguments", r.script_args == o.script_args),
                ("--backward", o.backward is None or o.backward == r.backward),
            ) if not same]
            if differs:
                raise TuneInputError(
                    f"{o.out} holds a tune of {r.script} {' '.join(r.script_args)} (backward {r.backward}); this one differs in its "
                    f"{', '.join(differs)}: give another --out, or remove {self.path} to start over there"
                )
            r.top, r.llm, r.done = o.top, o.llm, False
            r.judge_device = o.judge_device or r.judge_device  # new sessions judge there; started ones keep their own settings
            return r
        call = self.model_call()
        now = time.time()
        r = TuneReport(
            kernelfix_version=__version__, created_at=now, updated_at=now, script=str(o.script.resolve()), script_args=list(o.script_args),
            script_sha256=sha, model_name=call.name, model_class=f"{type(call.module).__module__}.{type(call.module).__qualname__}",
            inputs=call.signature(), device=str(call.device), judge_device=o.judge_device or call.device.type,
            backward=bool(o.backward) or call.trains, llm=o.llm, top=o.top,
        )
        if o.backward is None and call.trains:
            r.notes.append("the script trains (its model's call had gradients enabled and trainable parameters): ranked by forward+backward, "
                           "the sessions judge the backward too")
        o.out.mkdir(parents=True, exist_ok=True)
        self.save(r)
        return r

    def model_call(self) -> ModelCall:
        from kernelfix.tune.model_call import run_to_model_call

        if self._call is None:
            try:
                self._call = run_to_model_call(self.o.script, self.o.script_args, need_grad=bool(self.o.backward))
            except CaptureInputError as e:
                raise TuneInputError(str(e)) from None
            if self._call.device.type == "cpu":
                os.environ.setdefault("TRITON_INTERPRET", "1")  # swapped Triton kernels run here, in the interpreter
        return self._call

    def release(self) -> None:
        """Drop this process's hold on the model (and the captures' copies of it) and their GPU memory."""
        import gc

        import torch

        self._call = None
        self._trials = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def rank(self, r: TuneReport) -> None:
        from kernelfix.tune.model_profile import profile_model
        from kernelfix.tune.rank import ranking, rows

        call = self.model_call()
        self.say(f"profiling {r.model_name} ({type(call.module).__name__}) on {call.device}: {self.o.cfg.profile_steps} "
                 + ("forward+backward steps" if r.backward else "forwards"))
        prof = profile_model(call, backward=r.backward, steps=self.o.cfg.profile_steps)
        r.ranking = ranking(prof, str(call.device), backward=r.backward)
        r.modules = rows(prof, r.model_name, r.model_class.rsplit(".", 1)[-1], min_share=self.o.cfg.min_share, measure=r.ranking.measure)
        self.save(r)

    def capture(self, r: TuneReport) -> None:
        from kernelfix.capture.pipeline import capture

        tasks = self.o.out / "tasks"
        for row in [m for m in r.modules if m.candidate]:
            if len(r.selected) >= r.top:
                break
            if row.selected or row.skipped:
                continue
            files = CaptureFiles(tasks / f"{task_stem(row.module)}.py")
            if files.task.is_file() and files.manifest.is_file():
                manifest = files.read_manifest()
                note = "captured earlier"
            else:
                self.say(f"capturing {row.module} (#{row.rank}, {100 * row.share:.1f}%): every signature it is called with")
                try:
                    manifest = capture(
                        self.o.script, row.module, files.task, calls="all", max_calls=self.o.cfg.max_calls, script_args=self.o.script_args,
                        force=True, config=self.o.judge, with_grad=r.backward,
                    ).manifest
                except (CaptureFailed, CaptureInputError) as e:
                    self.release()
                    row.skipped = f"capture cannot take it: {e}"
                    self.say(f"  {row.module}: skipped: {row.skipped}")
                    self.save(r)
                    continue
                self.release()
                note = f"{sum(manifest.graph_ops.values())} ATen ops, {max(1, len(manifest.calls))} signature(s), reproduces its calls"
            if r.backward and not manifest.backward:
                row.skipped = ("its task has no backward: in the training step it computes nothing that needs a gradient "
                               "(no trainable parameter, no input that requires grad)")
                self.say(f"  {row.module}: skipped: {row.skipped}")
            else:
                row.selected, row.task = True, str(files.task.resolve())
                self.say(f"  {row.module}: {files.task} ({note})")
            self.save(r)
        if not r.selected:
            from kernelfix.tune.text import no_candidates_text

            self.say(no_candidates_text(r, self.o.cfg))

    def optimize(self, r: TuneReport) -> None:
        settings = BatchSettings(out=str(self.o.out.resolve()), agent=self.o.agent, judge=self.o.judge.model_copy(update={
            "device": r.judge_device, "backward": True if r.backward else self.o.judge.backward,
        }))
        jobs: dict[str, Job] = {}
        for row in r.selected:
            if row.skipped:
                continue
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
        self.say(f"optimizing {len(jobs)} module{'s' if len(jobs) > 1 else ''} with {r.llm}; sessions in {self.o.out / 'sessions'}")
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
        todo = [m for m in ready if m.swap is None or m.swap.best_turns != [m.best_turn]]
        if todo:
            self.say(f"trying {len(todo)} swap{'s' if len(todo) > 1 else ''} in {r.model_name}: its output, and its "
                     + ("forward+backward" if r.backward else "forward") + f" timed in {self.o.cfg.rounds} paired rounds, eager and compiled")
        for m in todo:
            m.swap = self.trials(r).trial([(m.module, m.session)], [m.best_turn])
            self.say(trial_text(m.swap, self.o.cfg))
            self.save(r)
        kept = [m for m in ready if m.swap is not None and m.swap.kept]
        # Swaps inside the noise alone but faster at the median join the kept ones: their gains add up (decide.py).
        hopeful = [m for m in ready if m.swap is not None and not m.swap.kept
                   and promising(m.swap.eager, m.swap.compiled, self.o.cfg)]
        group = kept + hopeful if len(kept) + len(hopeful) > 1 else kept
        r.combined = self._combined(r, group)
        if r.combined is not None and r.combined.kept:
            r.kept = [KeptSwap(module=mod, session=s) for mod, s in zip(r.combined.modules, r.combined.sessions)]
            return self._done(r)
        if hopeful and len(kept) > 1:  # the group failed: the swaps kept alone, together
            note = f"the swaps {', '.join(m.module for m in group)} together: {r.combined.reason}"
            if note not in r.notes:
                r.notes.append(note)
            r.combined = self._combined(r, kept)
            if r.combined is not None and r.combined.kept:
                r.kept = [KeptSwap(module=mod, session=s) for mod, s in zip(r.combined.modules, r.combined.sessions)]
                return self._done(r)
        if kept:  # together they are not faster: the best one alone, which was
            best = max(kept, key=lambda m: m.swap.eager.speedup or 0.0)
            r.kept = [KeptSwap(module=best.module, session=best.session)]
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
        modules = [m.module for m in kept]
        turns = [m.best_turn for m in kept]
        if r.combined is not None and r.combined.modules == modules and r.combined.best_turns == turns:
            return r.combined
        self.say(f"trying the {len(kept)} kept swaps together")
        t = self.trials(r).trial([(m.module, m.session) for m in kept], turns)
        self.say(trial_text(t, self.o.cfg))
        return t

    def trials(self, r: TuneReport):
        from kernelfix.tune.swaps import Trials

        if self._trials is None:
            self._trials = Trials(self.model_call(), model_name=r.model_name, cfg=self.o.cfg, judge_cfg=self.o.judge, backward=r.backward, say=self.say)
        return self._trials

    def save(self, r: TuneReport) -> None:
        r.updated_at = time.time()
        atomic.write_json(self.path, r)
