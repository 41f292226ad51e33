"""Run a session: create or open its directory, drive the graph, report events.

    session = Session.create(dir, task_path=..., model=make_model(...), agent=AgentConfig(), judge_config=JudgeConfig())
    outcome = session.run()            # blocks; events go to on_event, steering comes from session.controls
    Session.open(dir, model).run()     # after a kill or a stop: continues from the last checkpoint

A UI runs ``run()`` in a worker thread. ``run()`` raises what stopped it early
(ModelError, KeyboardInterrupt, TaskError), after writing trajectory.json with
``outcome.finished = False``; the checkpoints still hold every judged turn.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from pathlib import Path

from kernelfix.agent import policy
from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.events import Controls, EventSink, Notice, SessionAborted, SessionEnded, SessionStarted
from kernelfix.agent.graph import build_graph
from kernelfix.agent.models import ChatModel, ModelError
from kernelfix.agent.runtime import Runtime
from kernelfix.agent.session_dir import SessionDir
from kernelfix.agent.state import REOPENABLE, Outcome, SessionState, Settings, TaskInfo, Trajectory, totals
from kernelfix.base.version import __version__
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.judge import Judge
from kernelfix.tools.retry import MachineFault
from kernelfix.tools.task import Task, TaskError

log = logging.getLogger(__name__)

THREAD_ID = "session"
RECURSION_LIMIT = 10_000  # supersteps per run: ~10 per turn, plus pauses; the policy ends sessions, not this


class Session:
    def __init__(
        self,
        store: SessionDir,
        model: ChatModel,
        *,
        controls: Controls | None = None,
        on_event: EventSink | None = None,
        judge: Judge | None = None,
    ):
        self.store = store
        self.model = model
        self.controls = controls or Controls()
        self._on_event = on_event
        self._judge = judge
        self._emit_lock = threading.Lock()  # a round's candidates report from several threads: one event at a time

    @classmethod
    def create(
        cls,
        session_dir: str | Path,
        *,
        task_path: str | Path,
        model: ChatModel,
        agent: AgentConfig,
        judge_config: JudgeConfig,
        candidate: str | None = None,
        candidate_name: str = "candidate.py",
        candidate_path: str | None = None,
        **kwargs,
    ) -> "Session":
        """A new session directory. Raises TaskError (unusable task) or SessionError (directory in the way)."""
        task = Task.load(task_path)
        store = SessionDir.create(
            session_dir,
            task=task,
            model=model.name,
            agent=agent,
            judge=judge_config,
            candidate_source=candidate,
            candidate_name=candidate_name,
            candidate_path=candidate_path,
        )
        return cls(store, model, **kwargs)

    @classmethod
    def open(cls, session_dir: str | Path, model: ChatModel, **kwargs) -> "Session":
        return cls(SessionDir.open(session_dir), model, **kwargs)

    # ------------------------------------------------------------------ events and records

    def emit(self, event) -> None:
        if self._on_event is None:
            return
        with self._emit_lock:
            try:
                self._on_event(event)
            except Exception:  # a UI's bug must not lose a session
                log.exception("event callback failed on %s", type(event).__name__)

    def trajectory(self, state: SessionState, *, finished: bool, device: str) -> Trajectory:
        s = self.store.settings
        task_source = self.store.task_path.read_text(encoding="utf-8")
        return Trajectory(
            kernelfix_version=__version__,
            session_id=s.session_id,
            task=TaskInfo(name=Path(s.task_path).stem, path=s.task_path, sha1=s.task_sha1, source=task_source),
            model=s.model,
            settings=Settings(agent=s.agent, judge=s.judge),
            device=device,
            created_at=s.created_at,
            updated_at=time.time(),
            turns=state.turns,
            totals=totals(state.turns, state.rounds),
            outcome=self.outcome(state, finished=finished, timed=device == "cuda"),
            rounds=state.rounds,
        )

    def outcome(self, state: SessionState, *, finished: bool, timed: bool) -> Outcome:
        best = state.best
        cfg = self.store.settings.agent
        return Outcome(
            finished=finished,
            stop_reason=state.stop_reason,
            stop_kind=state.stop_kind,
            success=best is not None,
            goal_met=any(policy.goal_met(t, cfg, timed=timed) for t in state.turns),
            best_turn=best.index if best else None,
            best_speedup_eager=best.verdict.speedup_eager if best else None,
            best_speedup_compile=best.verdict.speedup_compile if best else None,
        )

    # ------------------------------------------------------------------ run

    def run(self) -> Outcome:
        store = self.store
        store.lock()
        self.controls.rearm()
        saver = store.checkpointer()
        # Every candidate of a round in its own thread: drawing and building at once is the point of a width.
        width = store.settings.agent.width
        cfg = {
            "configurable": {"thread_id": THREAD_ID},
            "recursion_limit": RECURSION_LIMIT,
            "max_concurrency": max(4, width + 1),
        }
        judge = graph = None
        restore = self._abort_on_signals()
        try:
            judge = self._judge or Judge(store.task(), store.settings.judge, workdir=store.work_dir)
            self._running = (graph, cfg, judge)
            rt = Runtime(
                store=store,
                judge=judge,
                model=self.model,
                controls=self.controls,
                emit=self.emit,
                on_trajectory=self._writer(judge),
            )
            graph = build_graph(rt).compile(checkpointer=saver)
            self._running = (graph, cfg, judge)
            inp, state, resumed = self._starting_point(graph, cfg)
            rt.planned = state.round_slots  # a round cut short: its unfinished slots run again, grouped as planned
            self.emit(
                SessionStarted(
                    session_dir=str(store.path),
                    task=Path(store.settings.task_path).stem,
                    model=self.model.name,
                    device=judge.device,
                    resumed=resumed,
                    turns_done=len(state.turns),
                    width=width,
                )
            )
            if judge.device_notice:
                self.emit(Notice(text=judge.device_notice))
            if inp is not None or _unfinished(graph.get_state(cfg)):
                graph.invoke(inp, cfg, durability="sync")
            state = SessionState.model_validate(graph.get_state(cfg).values)
            self._writer(judge)(state, True)
            outcome = self.outcome(state, finished=True, timed=judge.device == "cuda")
            self.emit(SessionEnded(outcome=outcome, session_dir=str(store.path)))
            return outcome
        except BaseException as e:
            if judge is not None:
                self._record_interruption(e, graph, cfg, judge)
            raise
        finally:
            restore()
            if judge is not None and self._judge is None:
                judge.close()  # its reference worker and any standby candidate worker end with the session
            saver.conn.close()
            store.unlock()

    def _abort_on_signals(self):
        """Ctrl-C (and a batch worker's SIGTERM) reach only the main thread; a round's candidates run in
        others. Abort them too (they stop at their next check), then raise as before. Returns the undo."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        saved = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            old = signal.getsignal(sig)
            if callable(old):  # a handler that raises (KeyboardInterrupt); the default SIGTERM just ends the process

                def handler(signum, frame, old=old):
                    self.controls.abort()
                    old(signum, frame)

                saved[sig] = old
                signal.signal(sig, handler)
        return lambda: [signal.signal(sig, old) for sig, old in saved.items()]

    def _writer(self, judge: Judge):
        def write(state: SessionState, finished: bool) -> None:
            self.store.write_trajectory(self.trajectory(state, finished=finished, device=judge.device))

        return write

    def _starting_point(self, graph, cfg) -> tuple[SessionState | None, SessionState, bool]:
        """(graph input, state so far, resumed): a new session's input, or None to continue from the checkpoint."""
        snap = graph.get_state(cfg)
        if not snap.values:
            s = self.store.settings
            return (
                SessionState(pending_candidate=s.candidate_source, pending_candidate_name=s.candidate_name),
                SessionState(),
                False,
            )
        state = SessionState.model_validate(snap.values)
        if not _unfinished(snap) and state.stop_kind in REOPENABLE:
            # Ended on a limit: the router decides again, under limits a resume may have raised.
            graph.update_state(cfg, {"next_step": None, "stop_reason": None, "stop_kind": None}, as_node="feedback")
        return None, state, True

    def record_interruption(self, e: BaseException) -> None:
        """From another thread, while ``run`` is stuck (a judge stage in flight) and the process is about to
        exit: trajectory.json says where the run stopped, as ``run`` itself would have written it."""
        running = getattr(self, "_running", None)
        if running is not None:
            self._record_interruption(e, *running)

    def _record_interruption(self, e: BaseException, graph, cfg, judge: Judge) -> None:
        """trajectory.json says the run stopped early and why, from what the checkpoints hold."""
        state = SessionState()
        try:
            values = graph.get_state(cfg).values if graph is not None else {}
            state = SessionState.model_validate(values) if values else state
        except Exception:  # an unreadable checkpoint: record the interruption all the same
            log.exception("cannot read the last checkpoint")
        reason, resumable = _interruption(e)
        state = state.model_copy(update={"stop_reason": reason, "stop_kind": None})
        traj = None
        try:
            traj = self.trajectory(state, finished=False, device=judge.device)
            traj.outcome.resumable = resumable
            self.store.write_trajectory(traj)
        except Exception:  # a full disk may fail this too: logged, and the original error is the one to raise
            log.exception("cannot record the interruption (%s) in %s", reason, self.store.path)
        if traj is not None:  # the UI hears where the run stopped even when the disk refused the record
            self.emit(SessionEnded(outcome=traj.outcome, session_dir=str(self.store.path)))


def _unfinished(snap) -> bool:
    """Whether the graph has steps left to run from this checkpoint.

    ``snap.next`` alone is not enough: it leaves out nodes whose writes were saved before
    the process died but before the next checkpoint was made (a kill in that gap). Those
    nodes are in ``snap.tasks``; ``invoke(None)`` applies their writes and goes on, where
    treating the session as ended would stop it with no stop reason and no further turn.
    """
    return bool(snap.next or snap.tasks)


def _interruption(e: BaseException) -> tuple[str, bool]:
    """Why the run stopped early, and whether a resume can continue it."""
    if isinstance(e, TaskError):
        return f"the task does not run: {e}", False
    if isinstance(e, SessionAborted):
        what = "left by the user mid-turn"
    elif isinstance(e, KeyboardInterrupt):
        what = "interrupted by the user"
    elif isinstance(e, ModelError):
        what = f"model error ({e.kind}): {e}"
    elif isinstance(e, MachineFault):
        what = str(e)
    else:
        what = f"{type(e).__name__}: {e}"
    return f"{what}; `kernelfix resume` continues the session", True
