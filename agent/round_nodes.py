"""A search's round as graph nodes (width > 1; docs/search.md):

    plan_round  the round's slots (agent.search.plan): turn indices, parents, branches, model calls, prompts
    candidate   one task per slot, run in parallel (LangGraph Send): draw the reply, judge it, stage by stage;
                each task's result is saved the moment it finishes, so a kill re-runs only unfinished slots
    select      commit each judged candidate on its branch, keep the best ``keep``, record the round

A slot that has not drawn when the round's goal is met (or a budget is spent, or the user stops) is
skipped; one streaming is cancelled. A drawn reply is always judged: it was paid for.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from langgraph.graph import StateGraph
from langgraph.types import Send

from kernelfix.agent import judging, policy, search
from kernelfix.agent import messages as prompts
from kernelfix.agent.events import ModelReplied, RoundJudged, RoundStarted, StageUpdate, TurnJudged, TurnStarted
from kernelfix.agent.models import DrawCancelled, ReplayExhausted
from kernelfix.agent.state import (
    RESET,
    RoundBasis,
    RoundRecord,
    SessionState,
    Slot,
    SlotRecord,
    SlotResult,
    path_to,
    totals,
)
from kernelfix.tools.evaluation import STAGES

if TYPE_CHECKING:
    from kernelfix.agent.runtime import Runtime

Update = dict[str, Any]


def add_round_nodes(g: StateGraph, rt: "Runtime", *, system, task_message) -> None:
    def plan_round(state: SessionState) -> Update:
        round_no = state.rounds_done + 1
        slots = search.plan(
            state, width=rt.config.width, round_no=round_no, first_turn=state.next_index, first_call=state.model_calls
        )
        parent_branch = {s.turn: (state.turn(s.parent).branch if s.parent is not None else None) for s in slots}
        hints = rt.controls.take_branch_hints({b for b in parent_branch.values() if b})
        t = totals(state.turns, state.rounds)
        best = state.best
        basis = RoundBasis(
            started_at=time.time(),
            tokens=t.prompt_tokens + t.completion_tokens,
            cost_usd=t.cost_usd,
            wall_s=t.wall_s,
            best_turn=best.index if best else None,
            best_speedup=best.verdict.speedup_eager if best else None,
        )
        task_msg = task_message(state)
        for s in slots:
            s.hints = [*hints.get(None, []), *hints.get(parent_branch[s.turn], [])]
            s.messages = prompts.build_messages(system(state), task_msg, state.path(s.parent), s.hints)
            s.basis = basis
        rt.planned = slots
        rt.emit(RoundStarted(round=round_no, slots=slots))
        return {
            "round_slots": slots,
            "round_started_at": basis.started_at,
            "model_calls": state.model_calls + len(slots),
        }

    def fan_out(state: SessionState) -> list[Send]:
        return [Send("candidate", s) for s in state.round_slots]

    def candidate(slot: Slot) -> Update:
        ctl = rt.round_control(slot, rt.planned)
        light = slot.model_copy(update={"messages": [], "basis": None})  # the turn keeps the prompt

        def result(status, **kw) -> Update:
            return {"round_results": [SlotResult(slot=light, status=status, **kw)]}

        if reason := ctl.skip_reason():
            return result("skipped", reason=reason)
        started = time.time()
        judging.prestart(
            rt.store, rt.judge, slot.turn
        )  # as the chain does: Python, torch and CUDA start while the model writes
        rt.emit(TurnStarted(turn=slot.turn, source="model", parent=slot.parent, branch=slot.branch, round=slot.round))
        try:
            reply = ctl.draw(slot)
        except DrawCancelled as e:
            judging.drop_prestart(rt.store, rt.judge, slot.turn)
            return result("cancelled", reason=f"cancelled mid-reply: {e}")
        except ReplayExhausted as e:
            judging.drop_prestart(rt.store, rt.judge, slot.turn)
            return result("skipped", reason=str(e), exhausted=True)
        except BaseException:
            judging.drop_prestart(rt.store, rt.judge, slot.turn)
            raise
        rt.emit(ModelReplied(turn=slot.turn, usage=reply.usage))
        turn = judging.model_turn(
            slot.turn,
            slot.messages,
            reply,
            hints=slot.hints,
            started_at=started,
            parent=slot.parent,
            branch=slot.branch,
            round=slot.round,
        )
        ev = judging.start(rt.store, rt.judge, turn, rt.emit)
        try:
            for name in STAGES:
                rt.check_abort()
                ev = getattr(rt.judge, name)(ev, lambda e: rt.emit(StageUpdate(turn=slot.turn, event=e)))
            ev, faults = judging.settle(rt.store, rt.judge, turn, ev, rt.emit, rt.check_abort)
        except BaseException:
            judging.abandon(rt.judge, ev)
            raise
        judging.finish(rt.judge, turn, ev, faults)
        rt.emit(TurnJudged(turn=turn, best_turn=ctl.judged(turn)))
        return result("judged", turn=turn)

    def select(state: SessionState) -> Update:
        results = sorted(state.round_results, key=lambda r: r.slot.turn)
        round_no = results[0].slot.round if results else state.rounds_done + 1
        turns, best, committed = list(state.turns), state.best, []
        for r in results:
            if r.turn is None:
                continue
            t = r.turn.model_copy(deep=True)
            is_best = policy.is_better(t, best)
            best = t if is_best else best
            parent = next((x for x in turns if x.index == t.parent), None)
            path = path_to(turns, t.parent)
            notes = prompts.picked_notes(t, prompts.shown_notes(path))
            t.notes = [n.slug for n in notes]
            t.feedback = prompts.feedback_message(
                t,
                best=search.path_best([*path, t]),
                config=rt.config,
                device=rt.judge.device,
                turns_left=rt.config.max_turns - round_no,
                floor=state.floor,
                notes=notes,
            )
            t.commit = rt.store.record_turn(
                t, is_best=is_best, parent_commit=parent.commit if parent else rt.store.base_commit()
            )
            turns.append(t)
            committed.append(t)
        kept = search.keep(committed, search.frontier(state), kept=rt.config.kept)
        lead = best or next((x for x in turns if x.index in kept[:1]), None)
        if lead is not None and lead.branch:
            rt.store.point_head(lead.branch)  # `git log` in the session shows the best path
        started = state.round_started_at or time.time()
        ended = max((t.finished_at or 0.0 for t in committed), default=0.0) or time.time()
        record = RoundRecord(
            round=round_no,
            started_at=started,
            wall_s=round(max(0.0, ended - started), 3),
            judge_s=round(sum(t.judge_s or 0.0 for t in committed), 3),
            slots=[
                SlotRecord(
                    turn=r.slot.turn, parent=r.slot.parent, branch=r.slot.branch, status=r.status, reason=r.reason
                )
                for r in results
            ],
            kept=kept,
        )
        update: Update = {
            "turns": turns,
            "best_turn": best.index if best else None,
            "frontier": kept,
            "rounds": [*state.rounds, record],
            "round_slots": [],
            "round_results": RESET,
            "round_started_at": None,
        }
        exhausted = next((r for r in results if r.exhausted), None)
        met = any(policy.goal_met(t, rt.config, timed=rt.timed) for t in committed)
        if exhausted is not None and not met:  # as the chain does when its replay file runs out
            update |= {"next_step": "end", "stop_kind": "replay_end", "stop_reason": exhausted.reason}
        rt.on_trajectory(state.model_copy(update={**update, "round_results": []}), False)
        rt.emit(RoundJudged(record=record, turns=committed, best_turn=update["best_turn"]))
        return update

    g.add_node("plan_round", plan_round)
    g.add_node("candidate", candidate)
    g.add_node("select", select)
    g.add_conditional_edges("plan_round", fan_out, ["candidate"])
    g.add_edge("candidate", "select")
    g.add_conditional_edges(
        "select", lambda s: "finish" if s.stop_kind == "replay_end" else "control", ["control", "finish"]
    )
