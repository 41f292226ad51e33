"""What the graph's nodes work with besides the state (:class:`Runtime`): the session's store, its judge and model,
the UI's controls. The chain's nodes (agent.graph) and a search's (agent.round_nodes) both take it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.draws import RoundControl
from kernelfix.agent.events import Controls, SessionAborted
from kernelfix.agent.models import ChatModel
from kernelfix.agent.session_dir import SessionDir
from kernelfix.agent.state import SessionState, Slot
from kernelfix.tools.judge import Judge


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

    def __post_init__(self) -> None:
        self.planned: list[Slot] = []  # the round in flight's slots (a resume sets them from the checkpoint)
        self._rounds: dict[int, RoundControl] = {}
        self._rounds_lock = threading.Lock()

    def searching(self, state: SessionState) -> bool:
        """A search (rounds of candidates) rather than the chain: width > 1, or a session that already searched."""
        return self.config.width > 1 or bool(state.rounds)

    def round_control(self, slot: Slot, slots: list[Slot]) -> RoundControl:
        """The round's shared control, made by its first slot to ask (slots of one round run in parallel)."""
        with self._rounds_lock:
            if slot.round not in self._rounds:
                self._rounds[slot.round] = RoundControl(
                    self.store, self.model, self.config, self.controls, self.emit, timed=self.timed, slots=slots
                )
            return self._rounds[slot.round]

    def check_abort(self) -> None:
        if self.controls.aborted:
            raise SessionAborted("left by the user")
