"""A turn through the judge: the steps the chain's nodes and a search's candidate tasks share."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

from kernelfix.agent.events import Notice, StageUpdate
from kernelfix.agent.models import ModelReply
from kernelfix.agent.session_dir import SessionDir
from kernelfix.agent.state import ChatMessage, Turn
from kernelfix.tools import retry
from kernelfix.tools.evaluation import STAGES, Evaluation, StageEvent
from kernelfix.tools.handles.reference_failures import ReferenceUnavailable
from kernelfix.tools.judge import Judge
from kernelfix.tools.retry import MachineFault


def model_turn(
    index: int, messages: list[ChatMessage], reply: ModelReply, *, hints: list[str], started_at: float, **tree
) -> Turn:
    """A model turn before judging; ``tree``: parent, branch, round."""
    return Turn(
        index=index,
        source="model",
        messages=messages,
        reply=ChatMessage(role="assistant", content=reply.content, reasoning_content=reply.reasoning_content),
        hints=hints,
        usage=reply.usage,
        started_at=started_at,
        **tree,
    )


def _clean_workdir(store: SessionDir, judge: Judge, index: int):
    """Turn ``index``'s working directory, emptied of an attempt cut short; one where a worker started
    ahead for it waits (Judge.prestart; a try that failed before its reply) is kept as it is."""
    wd = store.eval_dir(index)
    if not judge.has_standby(wd):
        shutil.rmtree(wd, ignore_errors=True)
    return wd


def prestart(store: SessionDir, judge: Judge, index: int) -> None:
    """Start turn ``index``'s candidate worker in a clean working directory before its reply exists."""
    judge.prestart(_clean_workdir(store, judge, index))


def drop_prestart(store: SessionDir, judge: Judge, index: int) -> None:
    """Turn ``index`` will not be judged here after all: its worker started ahead ends now, not with the session."""
    judge.drop_standby(store.eval_dir(index))


def start(store: SessionDir, judge: Judge, turn: Turn, emit: Callable[[object], None]) -> Evaluation:
    """Extract the turn's candidate (sets ``turn.code``) in a fresh working directory."""
    wd = _clean_workdir(store, judge, turn.index)
    if turn.source == "model":
        ev = judge.start(turn.reply.content, filename="reply.md", workdir=wd)
    else:
        ev = judge.start(turn.code or "", filename=turn.submitted_as or "candidate.py", workdir=wd)
    turn.code = ev.code
    emit(
        StageUpdate(
            turn=turn.index,
            event=StageEvent(stage="extract", status="finished", detail=ev.category.value if ev.category else "ok"),
        )
    )
    return ev


def reference_ready(judge: Judge, emit: Callable[[object], None], check: Callable[[], None]) -> None:
    """The task's reference, started and surveyed, before any model turn: a machine fault there (the GPU's
    memory held by a process outside kernelfix) is waited out as a turn's is (``settle``), and one that
    persists raises ``MachineFault`` (the session is kept; a resume or a rerun of the batch starts here)."""
    faults: list[str] = []
    while True:
        try:
            judge.reference(lambda e: emit(StageUpdate(turn=None, event=e)))
            return
        except ReferenceUnavailable as e:
            tried = len(faults)
            faults.append(retry.fault_text(e.category, e.message))
            if not retry.should_retry(e.category, tried, judge.config.infra_retries):
                raise MachineFault(faults, what="the task's reference") from e
            wait = retry.backoff_s(judge.config.infra_backoff_s, tried)
            emit(
                Notice(
                    text=f"the machine could not run the task's reference ({faults[-1][:200]}); trying again in {wait:.0f} s"
                )
            )
            retry.pause(wait, check)


def settle(
    store: SessionDir,
    judge: Judge,
    turn: Turn,
    ev: Evaluation,
    emit: Callable[[object], None],
    check: Callable[[], None],
) -> tuple[Evaluation, list[str]]:
    """The turn's evaluation once the machine has judged it: while the verdict is a machine fault
    (infra:*, tools/retry.py), the same candidate is judged again after a pause, up to
    ``infra_retries`` times. (evaluation, the faults met). A fault that persists, or one no pause
    cures (too_large), raises ``MachineFault``: no turn is spent and nothing reaches the model; the
    session stops there and a resume judges the candidate again."""
    faults: list[str] = []
    while ev.failed and ev.category is not None and ev.category.machine_fault:
        tried = len(faults)
        faults.append(retry.fault_text(ev.category, ev.message))
        abandon(judge, ev)
        if not retry.should_retry(ev.category, tried, judge.config.infra_retries):
            raise MachineFault(faults, turn=turn.index)
        wait = retry.backoff_s(judge.config.infra_backoff_s, tried)
        emit(
            Notice(
                text=f"turn {turn.index}: the machine could not judge it ({faults[-1][:200]}); judging it again in {wait:.0f} s"
            )
        )
        retry.pause(wait, check)
        ev = start(store, judge, turn, emit)
        for name in STAGES:
            check()
            ev = getattr(judge, name)(ev, lambda e: emit(StageUpdate(turn=turn.index, event=e)))
    return ev, faults


def finish(judge: Judge, turn: Turn, ev: Evaluation, faults: list[str] = ()) -> None:  # type: ignore[assignment]
    """The verdict (with the machine faults met on the way) and the turn's times."""
    turn.verdict = judge.finish(ev)
    turn.verdict.infra_retries = list(faults)
    turn.judge_s = round(sum(ev.stage_seconds.values()), 3)
    turn.finished_at = time.time()
    turn.wall_s = round(turn.finished_at - turn.started_at, 3)


def abandon(judge: Judge, ev: Evaluation) -> None:
    """An evaluation cut short in a thread that goes on (a search's candidate, the user left): finish
    releases its candidate worker; the verdict is not kept."""
    try:
        judge.finish(ev)
    except Exception:  # already failing: the original error is the one to raise
        pass
