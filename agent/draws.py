"""Model replies: journaled before anything else happens to them, and, for a round of a search, drawn in
parallel (one call per slot, or one ``n=`` call per prompt) until the round no longer needs them.

A reply already in ``replies.jsonl`` for the same call index and prompt is used as it is: a kill after
it arrived never asks (or pays) the model twice.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kernelfix.agent import policy
from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.events import Controls, ModelDelta, ModelRetry, Notice, SessionAborted
from kernelfix.agent.models import ChatModel, DrawCancelled, ModelReply
from kernelfix.agent.session_dir import SessionDir
from kernelfix.agent.state import ChatMessage, Slot, Turn


def prompt_sha(messages: Sequence[ChatMessage]) -> str:
    return hashlib.sha256(
        json.dumps([m.model_dump(mode="json") for m in messages], sort_keys=True).encode()
    ).hexdigest()


def take_reply(
    store: SessionDir,
    model: ChatModel,
    *,
    turn: int,
    call_index: int,
    messages: Sequence[ChatMessage],
    emit: Callable[[object], None],
    check: Callable[[], None] = lambda: None,
) -> ModelReply:
    """The reply for this call: the journaled one, or the model's, journaled the moment it arrives.
    ``check`` runs on every streamed piece and may raise (DrawCancelled, SessionAborted) to stop the stream."""
    sha = prompt_sha(messages)
    journaled = store.journaled_reply(call_index, sha)
    if journaled is not None:  # received before a kill, never checkpointed: not asked (or paid for) again
        emit(Notice(text=f"turn {turn}: the model's reply was received before the interruption; using it"))
        return ModelReply.model_validate(journaled)

    def on_delta(channel, text):
        check()
        emit(ModelDelta(turn=turn, channel=channel, text=text))

    reply = model.complete(
        messages,
        call_index=call_index,
        on_delta=on_delta,
        on_retry=lambda n, err, wait: emit(ModelRetry(turn=turn, attempt=n, error=err, wait_s=wait)),
    )
    store.journal_reply(call_index, sha, reply)
    return reply


@dataclass
class _Group:
    """Slots sharing one prompt, drawn by one ``n=`` call that the first of them to ask makes."""

    done: threading.Event = field(default_factory=threading.Event)
    replies: dict[int, ModelReply] = field(default_factory=dict)  # turn -> reply
    error: BaseException | None = None


class RoundControl:
    """What a round's slots share across their threads: the replies drawn so far (for the budgets), the best
    candidate so far, and the early stop (goal met, budget spent, user stop) after which no slot draws."""

    def __init__(
        self,
        store: SessionDir,
        model: ChatModel,
        config: AgentConfig,
        controls: Controls,
        emit,
        *,
        timed: bool,
        slots: list[Slot],
    ):
        self.store, self.model, self.config, self.controls, self.emit, self.timed = (
            store,
            model,
            config,
            controls,
            emit,
            timed,
        )
        self.slots = slots
        basis = slots[0].basis if slots else None
        self._started = basis.started_at if basis else time.time()
        self._tokens = basis.tokens if basis else 0
        self._cost = basis.cost_usd if basis else 0.0
        self._wall = basis.wall_s if basis else 0.0
        self.best_turn = basis.best_turn if basis else None
        self._best_speedup = basis.best_speedup if basis else None
        self._best_correct = self.best_turn is not None
        self._lock = threading.Lock()
        self._stop_reason: str | None = None
        self._groups: dict[int, _Group] = {}

    # ------------------------------------------------------------------ stopping

    def stop(self, reason: str) -> None:
        with self._lock:
            self._stop_reason = self._stop_reason or reason

    def skip_reason(self) -> str | None:
        """Why a slot that has not drawn yet should not: the round's goal was met, a budget is spent, the user stopped."""
        self.check_abort()
        if self.controls.stop_requested or self.controls.accept_requested:
            return "not drawn: the user stopped the session"
        with self._lock:
            if self._stop_reason:
                return f"not drawn: {self._stop_reason}"
            c = self.config
            if c.max_tokens is not None and self._tokens >= c.max_tokens:
                return f"not drawn: token budget spent ({self._tokens} of {c.max_tokens})"
            if c.max_cost_usd is not None and self._cost >= c.max_cost_usd:
                return f"not drawn: cost budget spent (${self._cost:.4f} of ${c.max_cost_usd:g})"
        if self.config.max_wall_s is not None and self._wall + time.time() - self._started >= self.config.max_wall_s:
            return f"not drawn: time budget spent ({self.config.max_wall_s:g} s)"
        return None

    def check_abort(self) -> None:
        if self.controls.aborted:
            raise SessionAborted("left by the user")

    def _check_stream(self) -> None:
        self.check_abort()
        if self._stop_reason is not None:
            raise DrawCancelled(self._stop_reason)

    # ------------------------------------------------------------------ replies

    def draw(self, slot: Slot) -> ModelReply:
        """The slot's reply; raises DrawCancelled when the round stopped needing it mid-stream."""
        use_n = (
            self.config.sampling == "n" and self.model.supports_n and sum(s.group == slot.group for s in self.slots) > 1
        )
        sha = prompt_sha(slot.messages)
        # A journaled reply never joins a group call: take_reply below hands it over as it is.
        reply = (
            self._draw_shared(slot, sha) if use_n and self.store.journaled_reply(slot.call_index, sha) is None else None
        )
        if reply is None:
            reply = take_reply(
                self.store,
                self.model,
                turn=slot.turn,
                call_index=slot.call_index,
                messages=slot.messages,
                emit=self.emit,
                check=self._check_stream,
            )
        self._spent(reply)
        return reply

    def _spent(self, reply: ModelReply) -> None:
        with self._lock:
            self._tokens += (reply.usage.prompt_tokens or 0) + (reply.usage.completion_tokens or 0)
            self._cost += reply.usage.cost_usd or 0.0

    def _draw_shared(self, slot: Slot, sha: str) -> ModelReply | None:
        """The slot's reply from its group's ``n=`` call (made here by the group's first slot to ask); None
        when the call left it out (the provider returned fewer choices): draw it alone."""
        with self._lock:
            group = self._groups.get(slot.group)
            leader = group is None
            if leader:
                group = self._groups[slot.group] = _Group()
        if not leader:
            group.done.wait()
            if group.error is not None:
                raise group.error
            return group.replies.get(slot.turn)
        try:
            members = [
                s for s in self.slots if s.group == slot.group and self.store.journaled_reply(s.call_index, sha) is None
            ]
            sinks = {i: s.turn for i, s in enumerate(members)}

            def on_delta(choice, channel, text):
                self._check_stream()
                if choice in sinks:
                    self.emit(ModelDelta(turn=sinks[choice], channel=channel, text=text))

            if len(members) > 1:
                replies = self.model.complete_n(
                    slot.messages,
                    call_indices=[s.call_index for s in members],
                    on_delta=on_delta,
                    on_retry=lambda n, err, wait: self.emit(
                        ModelRetry(turn=slot.turn, attempt=n, error=err, wait_s=wait)
                    ),
                )
                if len(replies) < len(members):
                    self.emit(
                        Notice(
                            text=f"round {slot.round}: {len(replies)} of {len(members)} replies from one n= call; drawing the rest one by one"
                        )
                    )
                for s, r in zip(members, replies):
                    self.store.journal_reply(s.call_index, sha, r)
                    group.replies[s.turn] = r
        except BaseException as e:
            group.error = e
            raise
        finally:
            group.done.set()
        return group.replies.get(slot.turn)

    # ------------------------------------------------------------------ verdicts

    def judged(self, turn: Turn) -> int | None:
        """Note a judged candidate: the best so far (for the live view), and the early stop when it meets the goal."""
        with self._lock:
            v = turn.verdict
            if turn.correct and (
                not self._best_correct
                or (
                    v.speedup_eager is not None and (self._best_speedup is None or v.speedup_eager > self._best_speedup)
                )
            ):
                self.best_turn, self._best_speedup, self._best_correct = turn.index, v.speedup_eager, True
            best = self.best_turn
        if policy.goal_met(turn, self.config, timed=self.timed):
            self.stop(f"turn {turn.index} met the goal")
        elif reason := policy.sol_reached(turn, self.config):
            self.stop(reason)
        return best
