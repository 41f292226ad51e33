"""The loop as a LangGraph StateGraph.

    START -> prepare -> control -+-> generate -> extract -> compile -> correctness -> legality -> benchmark -> profile -> feedback -> control
                                 +-> submit ---^                      (one node per judge stage, from STAGES)
                                 +-> pause -> control
                                 +-> finish -> END

``control`` is the router: it reads the state and the UI's controls and
writes its decision (and any stop reason) into the state, so a resumed session
makes the same decision. Every node's output is checkpointed before the next
node runs; side effects (the git commit, trajectory.json) are idempotent, so a
node re-run after a kill changes nothing twice.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langgraph.graph import END, START, StateGraph

from kernelfix.agent import policy, prompting
from kernelfix.agent.config import AgentConfig
from kernelfix.agent.events import (
    Controls,
    ModelDelta,
    ModelReplied,
    ModelRetry,
    Notice,
    SessionPaused,
    SessionUnpaused,
    StageUpdate,
    TurnJudged,
    TurnStarted,
)
from kernelfix.agent.models import ChatModel, ModelReply, ReplayExhausted
from kernelfix.agent.session import SessionDir
from kernelfix.agent.shapes import shape_block
from kernelfix.agent.state import ChatMessage, SessionState, Turn
from kernelfix.tools.judge import STAGES, Judge, StageEvent

Update = dict[str, Any]


@dataclass
class Runtime:
    """What the nodes work with besides the state; rebuilt on every run, never checkpointed."""

    store: SessionDir
    judge: Judge
    model: ChatModel
    controls: Controls
    emit: Callable[[Any], None]
    on_trajectory: Callable[[SessionState, bool], None]  # (state, finished): write trajectory.json

    @property
    def config(self) -> AgentConfig:
        return self.store.settings.agent

    @property
    def timed(self) -> bool:
        return self.judge.device == "cuda"


def _next_index(state: SessionState) -> int:
    return state.turns[-1].index + 1 if state.turns else 1


def build_graph(rt: Runtime) -> StateGraph:
    g = StateGraph(SessionState)
    task = rt.judge.task
    system = prompting.system_prompt(rt.judge.config, rt.judge.device)

    def prepare(state: SessionState) -> Update:
        if state.prepared:
            return {}
        # A task that does not run stops the session here (TaskError), before any model turn is spent on it.
        rt.judge.reference(lambda e: rt.emit(StageUpdate(turn=None, event=e)))
        block = None
        if rt.config.shape_block:
            block, problem = shape_block(rt.store.task_path, timeout_s=rt.judge.config.run_timeout_s)
            if problem:
                rt.emit(Notice(text=f"no shape block in the first prompt: {problem}"))
        return {"prepared": True, "shape_block": block}

    def control(state: SessionState) -> Update:
        c, cfg = rt.controls, rt.config
        last = state.turns[-1] if state.turns else None
        stop: tuple[str, str] | None = None
        step = "generate"
        if c.stop_requested:
            stop = ("user_stop", "stopped by the user")
        elif c.accept_requested:
            best = state.best
            stop = ("user_accept", "accepted by the user" + (f": best is turn {best.index}" if best else ": no correct candidate yet"))
        elif last is not None and policy.goal_met(last, cfg, timed=rt.timed):
            stop = ("goal", policy.describe_goal(last, cfg))
        elif state.pending_candidate is not None or c.has_candidate:
            step = "submit"
        elif reason := policy.max_turns_reached(state, cfg):
            stop = ("max_turns", reason)
        elif reason := policy.budget_spent(state, cfg):
            stop = ("budget", reason)
        elif c.paused:
            step = "pause"
        if stop is not None:
            return {"next_step": "end", "stop_kind": stop[0], "stop_reason": stop[1]}
        return {"next_step": step, "stop_kind": None, "stop_reason": None}

    def pause(state: SessionState) -> Update:
        rt.emit(SessionPaused(after_turn=state.turns[-1].index if state.turns else None))
        while not rt.controls.wait_while_paused(timeout=1.0):
            pass
        if not rt.controls.paused:
            rt.emit(SessionUnpaused())
        return {}

    def generate(state: SessionState) -> Update:
        index = _next_index(state)
        wd = rt.store.eval_dir(index)
        shutil.rmtree(wd, ignore_errors=True)  # leftovers of an attempt cut short
        rt.judge.prestart(wd)  # its worker starts Python, torch and CUDA while the model writes
        hints = rt.controls.take_hints()
        task_msg = prompting.task_prompt(task.name, task.source, shape_block=state.shape_block, goal=prompting.goal_text(rt.config, rt.judge.device))
        messages = prompting.build_messages(system, task_msg, state.turns, hints)
        started = time.time()
        rt.emit(TurnStarted(turn=index, source="model"))
        prompt_sha = hashlib.sha256(json.dumps([m.model_dump(mode="json") for m in messages], sort_keys=True).encode()).hexdigest()
        try:
            journaled = rt.store.journaled_reply(state.model_calls, prompt_sha)
            if journaled is not None:  # received before a kill, never checkpointed: not asked (or paid for) again
                reply = ModelReply.model_validate(journaled)
                rt.emit(Notice(text=f"turn {index}: the model's reply was received before the interruption; using it"))
            else:
                reply = rt.model.complete(
                    messages,
                    call_index=state.model_calls,
                    on_delta=lambda ch, text: rt.emit(ModelDelta(turn=index, channel=ch, text=text)),
                    on_retry=lambda n, err, wait: rt.emit(ModelRetry(turn=index, attempt=n, error=err, wait_s=wait)),
                )
                rt.store.journal_reply(state.model_calls, prompt_sha, reply)
        except ReplayExhausted as e:
            return {"next_step": "end", "stop_kind": "replay_end", "stop_reason": str(e)}
        except BaseException:
            for h in hints:  # the turn never happened: its hints wait for the next try
                rt.controls.hint(h)
            raise
        rt.emit(ModelReplied(turn=index, usage=reply.usage))
        turn = Turn(
            index=index,
            source="model",
            messages=messages,
            reply=ChatMessage(role="assistant", content=reply.content, reasoning_content=reply.reasoning_content),
            hints=hints,
            usage=reply.usage,
            started_at=started,
        )
        return {"current": turn, "evaluation": None, "model_calls": state.model_calls + 1}

    def submit(state: SessionState) -> Update:
        if state.pending_candidate is not None:
            turn = Turn(index=0, source="candidate", code=state.pending_candidate, submitted_as=state.pending_candidate_name, started_at=time.time())
        else:
            code = rt.controls.take_candidate()
            if code is None:
                return {"current": None}
            turn = Turn(index=_next_index(state), source="user", code=code, submitted_as="candidate.py", started_at=time.time())
        rt.emit(TurnStarted(turn=turn.index, source=turn.source))
        return {"current": turn, "evaluation": None, "pending_candidate": None}

    def extract(state: SessionState) -> Update:
        turn = state.current.model_copy(deep=True)
        wd = rt.store.eval_dir(turn.index)
        if not rt.judge.has_standby(wd):
            shutil.rmtree(wd, ignore_errors=True)  # leftovers of an attempt cut short
        if turn.source == "model":
            ev = rt.judge.start(turn.reply.content, filename="reply.md", workdir=wd)
        else:
            ev = rt.judge.start(turn.code or "", filename=turn.submitted_as or "candidate.py", workdir=wd)
        turn.code = ev.code
        rt.emit(StageUpdate(turn=turn.index, event=StageEvent(stage="extract", status="finished", detail=ev.category.value if ev.category else "ok")))
        return {"current": turn, "evaluation": ev}

    def stage_node(name: str) -> Callable[[SessionState], Update]:
        method = getattr(rt.judge, name)

        def run(state: SessionState) -> Update:
            index = state.current.index
            ev = method(state.evaluation.model_copy(deep=True), lambda e: rt.emit(StageUpdate(turn=index, event=e)))
            return {"evaluation": ev}

        run.__name__ = name
        return run

    def feedback(state: SessionState) -> Update:
        turn = state.current.model_copy(deep=True)
        ev = state.evaluation
        turn.verdict = rt.judge.finish(ev)
        turn.judge_s = round(sum(ev.stage_seconds.values()), 3)
        turn.finished_at = time.time()
        turn.wall_s = round(turn.finished_at - turn.started_at, 3)
        best = state.best
        is_best = policy.is_better(turn, best)
        if is_best:
            best = turn
        model_turns = state.model_turns + (turn.source == "model")
        turn.feedback = prompting.feedback_message(
            turn, best=best, config=rt.config, device=rt.judge.device, turns_left=rt.config.max_turns - model_turns
        )
        turn.commit = rt.store.record_turn(turn, is_best=is_best)
        update = {"turns": [*state.turns, turn], "current": None, "evaluation": None, "best_turn": best.index if best else None}
        rt.on_trajectory(state.model_copy(update=update), False)
        rt.emit(TurnJudged(turn=turn, best_turn=update["best_turn"]))
        return update

    def finish(state: SessionState) -> Update:
        rt.on_trajectory(state, True)
        return {"next_step": "end"}

    g.add_node("prepare", prepare)
    g.add_node("control", control)
    g.add_node("pause", pause)
    g.add_node("generate", generate)
    g.add_node("submit", submit)
    g.add_node("extract", extract)
    for name in STAGES:
        g.add_node(name, stage_node(name))
    g.add_node("feedback", feedback)
    g.add_node("finish", finish)

    g.add_edge(START, "prepare")
    g.add_edge("prepare", "control")
    g.add_conditional_edges(
        "control",
        lambda s: {"generate": "generate", "submit": "submit", "pause": "pause"}.get(s.next_step or "", "finish"),
        ["generate", "submit", "pause", "finish"],
    )
    g.add_edge("pause", "control")
    g.add_conditional_edges("generate", lambda s: "finish" if s.stop_reason else "extract", ["extract", "finish"])
    g.add_conditional_edges("submit", lambda s: "extract" if s.current is not None else "control", ["extract", "control"])
    chain = ["extract", *STAGES, "feedback"]
    for a, b in zip(chain, chain[1:]):
        g.add_edge(a, b)
    g.add_edge("feedback", "control")
    g.add_edge("finish", END)
    return g
