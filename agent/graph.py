"""The loop as a LangGraph StateGraph.

    START -> prepare -> control -+-> generate -> extract -> compile -> correctness -> legality -> benchmark -> profile -> feedback -> control
                                 +-> submit ---^                      (one node per judge stage, from STAGES)
                                 +-> plan_round =Send=> candidate x width -> select -> control   (width > 1: agent.round_nodes)
                                 +-> pause -> control
                                 +-> finish -> END

With width 1 a model turn takes the chain of nodes, each checkpointed; a search (width > 1) draws and
judges a round's candidates in parallel tasks, one per candidate, each saved as it finishes. Candidates
from the user (--candidate, the UI's edit) take the chain in both.

``control`` is the router: it reads the state and the UI's controls and
writes its decision (and any stop reason) into the state, so a resumed session
makes the same decision. Every node's output is checkpointed before the next
node runs; side effects (the git commit, trajectory.json) are idempotent, so a
node re-run after a kill changes nothing twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from langgraph.graph import END, START, StateGraph

from kernelfix.agent import judging, policy, search
from kernelfix.agent import messages as prompts
from kernelfix.agent.draws import take_reply
from kernelfix.agent.events import (
    ModelReplied,
    Notice,
    SessionPaused,
    SessionUnpaused,
    StageUpdate,
    TurnJudged,
    TurnStarted,
)
from kernelfix.agent.models import ReplayExhausted
from kernelfix.agent.round_nodes import add_round_nodes
from kernelfix.agent.runtime import Runtime
from kernelfix.agent.shapes import shape_block
from kernelfix.agent.state import SessionState, Turn
from kernelfix.prompts.blocks import floor_text, gpu_block, input_sets_block
from kernelfix.tools.evaluation import STAGES

Update = dict[str, Any]


def _next_index(state: SessionState) -> int:
    return state.next_index


def build_graph(rt: Runtime) -> StateGraph:
    g = StateGraph(SessionState)
    task = rt.judge.task

    def system(state: SessionState) -> str:
        # After prepare: the GPU block comes from the reference worker, kept in the state so a resumed
        # session sends the same system prompt.
        return prompts.system_prompt(rt.judge.config, rt.judge.device, gpu_block=state.gpu_block)

    def prepare(state: SessionState) -> Update:
        if state.prepared:
            return {}
        # Two sandboxed children, each a Python and torch start: the reference starts in the judge's
        # background thread while the shape block's child runs here (seconds off the first turn).
        rt.judge.ref.start_background()
        block = problem = None
        if rt.config.shape_block:
            block, problem = shape_block(rt.store.task_path, timeout_s=rt.judge.config.run_timeout_s)
        # A task that does not run stops the session here (TaskError), before any model turn is spent on it.
        judging.reference_ready(rt.judge, rt.emit, rt.check_abort)
        sets = input_sets_block(rt.judge.ref.ready.input_sets if rt.judge.ref.ready else None)
        if sets:  # a task with get_input_sets(): the shapes the kernel must serve
            block = f"{block}\n\n{sets}" if block else sets
        if problem:
            rt.emit(Notice(text=f"no shape block in the first prompt: {problem}"))
        # The floor (bytes and FLOPs at the GPU's peaks) and eager's distance from it; on a GPU this
        # measures the baselines now, once per task (cached on disk), rather than at the first timing.
        floor = rt.judge.task_floor()
        spec = rt.judge.gpu_spec()
        return {
            "prepared": True,
            "shape_block": block,
            "floor": floor,
            "gpu_block": gpu_block(spec) if spec is not None else None,
        }

    def control(state: SessionState) -> Update:
        rt.check_abort()
        c, cfg = rt.controls, rt.config
        stop: tuple[str, str] | None = None
        step = "generate"
        if c.stop_requested:
            stop = ("user_stop", "stopped by the user")
        elif c.accept_requested:
            best = state.best
            stop = (
                "user_accept",
                "accepted by the user" + (f": best is turn {best.index}" if best else ": no correct candidate yet"),
            )
        elif met := next(
            (t for t in _just_judged(state, rt.searching(state)) if policy.goal_met(t, cfg, timed=rt.timed)), None
        ):
            stop = ("goal", policy.describe_goal(met, cfg))
        elif sol := next(
            (r for t in _just_judged(state, rt.searching(state)) if (r := policy.sol_reached(t, cfg))), None
        ):
            stop = ("speed_of_light", sol)
        elif state.pending_candidate is not None or c.has_candidate:
            step = "submit"
        elif reason := policy.max_turns_reached(state, cfg):
            stop = ("max_turns", reason)
        elif reason := policy.budget_spent(state, cfg):
            stop = ("budget", reason)
        elif c.paused:
            step = "pause"
        elif rt.searching(state):
            step = "round"
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

    def task_message(state: SessionState) -> str:
        return prompts.task_prompt(
            task.name,
            task.source,
            shape_block=state.shape_block,
            goal=prompts.goal_text(rt.config, rt.judge.device),
            floor=floor_text(state.floor) if state.floor is not None else None,
        )

    def generate(state: SessionState) -> Update:
        index = _next_index(state)
        judging.prestart(rt.store, rt.judge, index)  # its worker starts Python, torch and CUDA while the model writes
        hints = rt.controls.take_hints()
        task_msg = task_message(state)
        messages = prompts.build_messages(system(state), task_msg, state.turns, hints)
        started = time.time()
        rt.emit(TurnStarted(turn=index, source="model"))
        try:
            reply = take_reply(
                rt.store,
                rt.model,
                turn=index,
                call_index=state.model_calls,
                messages=messages,
                emit=rt.emit,
                check=rt.check_abort,
            )
        except ReplayExhausted as e:
            return {"next_step": "end", "stop_kind": "replay_end", "stop_reason": str(e)}
        except BaseException:
            for h in hints:  # the turn never happened: its hints wait for the next try
                rt.controls.hint(h)
            raise
        rt.emit(ModelReplied(turn=index, usage=reply.usage))
        turn = judging.model_turn(index, messages, reply, hints=hints, started_at=started, round=state.rounds_done + 1)
        return {"current": turn, "evaluation": None, "model_calls": state.model_calls + 1}

    def submit(state: SessionState) -> Update:
        if state.pending_candidate is not None:
            turn = Turn(
                index=0,
                source="candidate",
                code=state.pending_candidate,
                submitted_as=state.pending_candidate_name,
                started_at=time.time(),
            )
        else:
            got = rt.controls.take_submission()
            if got is None:
                return {"current": None}
            code, parent = got
            turn = Turn(
                index=_next_index(state), source="user", code=code, submitted_as="candidate.py", started_at=time.time()
            )
            if rt.searching(state):  # onto the chosen branch (default: the best kept one)
                front = search.frontier(state)
                turn.parent = (
                    parent if parent is not None and state.turn(parent) is not None else (front[0] if front else None)
                )
                turn.branch = search.continues_branch(state, turn.parent) or search.new_branch(state)
        rt.emit(TurnStarted(turn=turn.index, source=turn.source, parent=turn.parent, branch=turn.branch))
        return {"current": turn, "evaluation": None, "pending_candidate": None}

    def extract(state: SessionState) -> Update:
        turn = state.current.model_copy(deep=True)
        ev = judging.start(rt.store, rt.judge, turn, rt.emit)
        return {"current": turn, "evaluation": ev}

    def stage_node(name: str) -> Callable[[SessionState], Update]:
        method = getattr(rt.judge, name)

        def run(state: SessionState) -> Update:
            rt.check_abort()
            index = state.current.index
            ev = method(state.evaluation.model_copy(deep=True), lambda e: rt.emit(StageUpdate(turn=index, event=e)))
            return {"evaluation": ev}

        run.__name__ = name
        return run

    def feedback(state: SessionState) -> Update:
        turn = state.current.model_copy(deep=True)
        ev, faults = judging.settle(rt.store, rt.judge, turn, state.evaluation, rt.emit, rt.check_abort)
        judging.finish(rt.judge, turn, ev, faults)
        best = state.best
        is_best = policy.is_better(turn, best)
        if is_best:
            best = turn
        update: Update = {}
        if rt.searching(state):
            # A candidate or user turn in a search: a commit on its branch, and a branch the next round continues first.
            parent_commit = None  # --candidate (turn 0): on the trunk, where every branch starts
            if turn.source == "candidate":
                turn.branch = rt.store.trunk()
            else:
                parent = state.turn(turn.parent) if turn.parent is not None else None
                parent_commit = parent.commit if parent is not None else rt.store.base_commit()
            path_best = search.path_best([*state.path(turn.parent), turn])
            notes = prompts.picked_notes(turn, prompts.shown_notes(state.path(turn.parent)))
            turn.notes = [n.slug for n in notes]
            turn.feedback = prompts.feedback_message(
                turn,
                best=path_best,
                config=rt.config,
                device=rt.judge.device,
                turns_left=rt.config.max_turns - state.rounds_done,
                floor=state.floor,
                notes=notes,
            )
            turn.commit = rt.store.record_turn(turn, is_best=is_best, parent_commit=parent_commit)
            update["frontier"] = [turn.index, *(i for i in search.frontier(state) if i != turn.parent)]
        else:
            model_turns = state.model_turns + (turn.source == "model")
            turn.parent = state.turns[-1].index if state.turns else None
            notes = prompts.picked_notes(turn, prompts.shown_notes(state.turns))
            turn.notes = [n.slug for n in notes]
            turn.feedback = prompts.feedback_message(
                turn,
                best=best,
                config=rt.config,
                device=rt.judge.device,
                turns_left=rt.config.max_turns - model_turns,
                floor=state.floor,
                notes=notes,
            )
            turn.branch = rt.store.trunk()
            turn.commit = rt.store.record_turn(turn, is_best=is_best)
        update |= {
            "turns": [*state.turns, turn],
            "current": None,
            "evaluation": None,
            "best_turn": best.index if best else None,
        }
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
    add_round_nodes(g, rt, system=system, task_message=task_message)

    g.add_edge(START, "prepare")
    g.add_edge("prepare", "control")
    g.add_conditional_edges(
        "control",
        lambda s: {"generate": "generate", "submit": "submit", "pause": "pause", "round": "plan_round"}.get(
            s.next_step or "", "finish"
        ),
        ["generate", "submit", "pause", "plan_round", "finish"],
    )
    g.add_edge("pause", "control")
    g.add_conditional_edges("generate", lambda s: "finish" if s.stop_reason else "extract", ["extract", "finish"])
    g.add_conditional_edges(
        "submit", lambda s: "extract" if s.current is not None else "control", ["extract", "control"]
    )
    chain = ["extract", *STAGES, "feedback"]
    for a, b in zip(chain, chain[1:]):
        g.add_edge(a, b)
    g.add_edge("feedback", "control")
    g.add_edge("finish", END)
    return g


def _just_judged(state: SessionState, searching: bool) -> list[Turn]:
    """The turns judged since the router last decided: the chain's last turn, or a search's last round (and
    a user's turn after it)."""
    if not state.turns:
        return []
    if not searching or not state.rounds:
        return [state.turns[-1]]
    last = state.rounds[-1].round
    return [t for t in state.turns if t.round == last] + ([state.turns[-1]] if state.turns[-1].round != last else [])
