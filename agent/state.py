"""Typed state of a session: the graph's state, each judged turn, and the trajectory file.

``Trajectory`` is the schema of ``SESSION_DIR/trajectory.json``; the batch runner
and the SFT exporter import it. ``Turn.verdict`` serializes exactly as
``kernelfix eval --json`` prints a verdict.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelfix.agent.config import AgentConfig
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.judge import Evaluation
from kernelfix.tools.verdict import Category, Verdict

TRAJECTORY_SCHEMA = 1

StopKind = Literal["goal", "max_turns", "budget", "user_stop", "user_accept", "replay_end"]
TurnSource = Literal["model", "candidate", "user"]  # candidate: --candidate as turn 0; user: edited in the UI


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChatMessage(_Model):
    role: Literal["system", "user", "assistant"]
    content: str
    reasoning_content: str | None = None  # what the provider returned as reasoning; never sent back


class Usage(_Model):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None  # litellm's price, where it knows the model
    latency_s: float | None = None
    attempts: int = 0  # model calls made for this turn, retries included


class Turn(_Model):
    """One candidate and its judgement."""

    index: int
    source: TurnSource
    submitted_as: str | None = None  # candidate/user turns: the file name that says how to read the text (.py or a reply)
    messages: list[ChatMessage] = Field(default_factory=list)  # sent to the model (empty unless source is model)
    reply: ChatMessage | None = None  # received from the model
    hints: list[str] = Field(default_factory=list)  # user hints added to this turn's prompt
    code: str | None = None  # the extracted candidate, None when extraction failed
    verdict: Verdict | None = None
    feedback: str | None = None  # the user message this verdict became, for the next turn
    usage: Usage = Field(default_factory=Usage)
    judge_s: float | None = None
    wall_s: float | None = None
    started_at: float  # unix time
    finished_at: float | None = None
    commit: str | None = None  # the session repository's commit for this turn

    @property
    def correct(self) -> bool:
        """Correct and legal: the judge's ``ok``."""
        return self.verdict is not None and self.verdict.category == Category.OK


class SessionState(_Model):
    """What the graph carries from node to node, checkpointed after every node."""

    prepared: bool = False
    shape_block: str | None = None
    pending_candidate: str | None = None  # --candidate source, judged as turn 0
    pending_candidate_name: str = "candidate.py"  # its file name: .py is code, anything else a reply
    turns: list[Turn] = Field(default_factory=list)  # judged turns, in order
    current: Turn | None = None  # the turn on its way through the judge
    evaluation: Evaluation | None = None
    best_turn: int | None = None
    model_calls: int = 0  # replies taken from the model so far (a replay file's line index)
    next_step: Literal["generate", "submit", "pause", "end"] | None = None
    stop_reason: str | None = None
    stop_kind: StopKind | None = None

    def turn(self, index: int) -> Turn | None:
        return next((t for t in self.turns if t.index == index), None)

    @property
    def best(self) -> Turn | None:
        return None if self.best_turn is None else self.turn(self.best_turn)

    @property
    def model_turns(self) -> int:
        return sum(t.source == "model" for t in self.turns)


class TaskInfo(_Model):
    name: str
    path: str  # where the user's file was; the session keeps its own copy as task.py
    sha1: str
    source: str


class Settings(_Model):
    """The settings a session ran under (a key is never stored: only the name of its variable)."""

    agent: AgentConfig
    judge: JudgeConfig


class Totals(_Model):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True  # False when some turn's cost was unknown to litellm
    wall_s: float = 0.0
    judge_s: float = 0.0


class Outcome(_Model):
    finished: bool  # the graph reached its end
    resumable: bool = False  # interrupted in a way `kernelfix resume` can continue (not a task that fails to run)
    stop_reason: str | None = None  # why it ended, or why it was interrupted
    stop_kind: StopKind | None = None
    success: bool = False  # a correct, legal kernel was found
    goal_met: bool = False
    best_turn: int | None = None
    best_speedup_eager: float | None = None
    best_speedup_compile: float | None = None


class Trajectory(_Model):
    """``SESSION_DIR/trajectory.json``."""

    schema_version: int = TRAJECTORY_SCHEMA
    kernelfix_version: str
    session_id: str
    task: TaskInfo
    model: str
    settings: Settings
    device: str
    created_at: float
    updated_at: float
    turns: list[Turn]
    totals: Totals
    outcome: Outcome


def totals(turns: list[Turn]) -> Totals:
    t = Totals()
    for turn in turns:
        u = turn.usage
        t.prompt_tokens += u.prompt_tokens or 0
        t.completion_tokens += u.completion_tokens or 0
        if u.cost_usd is not None:
            t.cost_usd += u.cost_usd
        elif turn.source == "model" and u.attempts:
            t.cost_known = False
        t.wall_s += turn.wall_s or 0.0
        t.judge_s += turn.judge_s or 0.0
    return t
