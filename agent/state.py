"""Typed state of a session: the graph's state, each judged turn, and the trajectory file.

``Trajectory`` is the schema of ``SESSION_DIR/trajectory.json``; the batch runner
and the SFT exporter import it. ``Turn.verdict`` serializes exactly as
``kernelfix eval --json`` prints a verdict.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelfix.agent.agent_config import AgentConfig
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.evaluation import Evaluation
from kernelfix.tools.gpu.floor import TaskFloor
from kernelfix.tools.verdict import Category, Verdict

TRAJECTORY_SCHEMA = 1

StopKind = Literal["goal", "speed_of_light", "max_turns", "budget", "user_stop", "user_accept", "replay_end"]
# Stops a resume continues from: a raised limit, or the user's own stop or accept (the session stays open).
REOPENABLE: tuple[StopKind, ...] = ("max_turns", "budget", "user_stop", "user_accept")
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
    submitted_as: str | None = (
        None  # candidate/user turns: the file name that says how to read the text (.py or a reply)
    )
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
    parent: int | None = None  # the turn this one continues (its context ends there); None: started from the task
    branch: str | None = None  # the git branch its commit is on
    round: int | None = None  # model turns: the round that drew it (with width 1, its ordinal)
    notes: list[str] = Field(
        default_factory=list
    )  # knowledge notes its feedback carried (kernelfix.tools.feedback.knowledge slugs)

    @property
    def correct(self) -> bool:
        """Correct and legal: the judge's ``ok``."""
        return self.verdict is not None and self.verdict.category == Category.OK


class RoundBasis(_Model):
    """Where the session stood when a round was planned: what its slots check budgets and the goal against."""

    started_at: float
    tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    best_turn: int | None = None
    best_speedup: float | None = None


class Slot(_Model):
    """One candidate of a round with width > 1, planned (turn index, place in the tree, model call, prompt)
    before any is drawn; the graph sends each to its own task."""

    round: int
    turn: int
    parent: int | None  # the kept turn it continues; None: a fresh start from the task
    branch: str
    call_index: int  # its model call: a replay file's line, the reply journal's key
    group: int  # slots of one group share a prompt (one call with n= draws them together)
    hints: list[str] = Field(default_factory=list)
    messages: list[ChatMessage] = Field(default_factory=list)
    basis: RoundBasis | None = None


SlotStatus = Literal["judged", "skipped", "cancelled"]  # skipped: never drawn; cancelled: stopped mid-reply


class SlotResult(_Model):
    slot: Slot
    status: SlotStatus
    reason: str | None = None  # why a slot was not judged
    exhausted: bool = False  # a replay file ran out at this slot
    turn: Turn | None = None  # the judged candidate (not yet committed)


class SlotRecord(_Model):
    turn: int
    parent: int | None
    branch: str
    status: SlotStatus
    reason: str | None = None


class RoundRecord(_Model):
    """One round of a search with width > 1: what it drew and judged, what it kept, how long it took."""

    round: int
    started_at: float
    wall_s: float  # from its first draw to its last verdict
    judge_s: float  # the sum of its verdicts' stage times: more than wall_s when judgements overlap
    slots: list[SlotRecord]
    kept: list[int]  # the turns the next round continues from


RESET = "reset"  # a node returns it for round_results to empty the list


def _gather(old: list[SlotResult] | None, new: list[SlotResult] | str) -> list[SlotResult]:
    """The round's results as its slots finish (in parallel); the node that records them resets the list."""
    return [] if new == RESET else [*(old or []), *new]


class SessionState(_Model):
    """What the graph carries from node to node, checkpointed after every node."""

    prepared: bool = False
    shape_block: str | None = None
    floor: TaskFloor | None = (
        None  # the task's floor on this GPU (tools/gpu/floor.py), for the first prompt and later turns
    )
    gpu_block: str | None = None  # the GPU's numbers for the system prompt, as the reference worker read them
    pending_candidate: str | None = None  # --candidate source, judged as turn 0
    pending_candidate_name: str = "candidate.py"  # its file name: .py is code, anything else a reply
    turns: list[Turn] = Field(default_factory=list)  # judged turns, in order
    current: Turn | None = None  # the turn on its way through the judge
    evaluation: Evaluation | None = None
    best_turn: int | None = None
    model_calls: int = 0  # replies taken from the model so far (a replay file's line index)
    next_step: Literal["generate", "submit", "pause", "round", "end"] | None = None
    stop_reason: str | None = None
    stop_kind: StopKind | None = None
    # width > 1 (agent.search): the kept turns, the round in flight, the rounds done
    frontier: list[int] = Field(default_factory=list)
    round_slots: list[Slot] = Field(default_factory=list)
    round_started_at: float | None = None
    round_results: Annotated[list[SlotResult], _gather] = Field(default_factory=list)
    rounds: list[RoundRecord] = Field(default_factory=list)

    def turn(self, index: int) -> Turn | None:
        return next((t for t in self.turns if t.index == index), None)

    @property
    def best(self) -> Turn | None:
        return None if self.best_turn is None else self.turn(self.best_turn)

    @property
    def model_turns(self) -> int:
        return sum(t.source == "model" for t in self.turns)

    @property
    def next_index(self) -> int:
        """The next turn's index: after every turn and every slot a round planned (a slot never drawn keeps its number)."""
        used = (
            [t.index for t in self.turns]
            + [s.turn for r in self.rounds for s in r.slots]
            + [s.turn for s in self.round_slots]
        )
        return max(used) + 1 if used else 1

    @property
    def rounds_done(self) -> int:
        """Model rounds so far (what --max-turns counts): with width 1, model turns."""
        n = 0
        for t in self.turns:
            if t.source == "model":
                n = n + 1 if t.round is None else max(n, t.round)  # round None: written before rounds existed
        return max([n, *(r.round for r in self.rounds)])

    def path(self, index: int | None) -> list[Turn]:
        """The turns from the root down to ``index``: the context a child of ``index`` continues."""
        return path_to(self.turns, index)


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


def path_to(turns: list[Turn], index: int | None) -> list[Turn]:
    by_index = {t.index: t for t in turns}
    out: list[Turn] = []
    while index is not None and index in by_index:
        t = by_index[index]
        out.append(t)
        index = t.parent
    return out[::-1]


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
    rounds: list[RoundRecord] = Field(default_factory=list)  # width > 1: each round's slots, kept turns and times


def totals(turns: list[Turn], rounds: list[RoundRecord] = ()) -> Totals:
    """Summed over every turn of every branch; wall time counts a round's candidates once (they overlap)."""
    t = Totals()
    in_rounds = {r.round for r in rounds}
    t.wall_s = sum(r.wall_s for r in rounds)
    for turn in turns:
        u = turn.usage
        t.prompt_tokens += u.prompt_tokens or 0
        t.completion_tokens += u.completion_tokens or 0
        if u.cost_usd is not None:
            t.cost_usd += u.cost_usd
        elif turn.source == "model" and u.attempts:
            t.cost_known = False
        if turn.round not in in_rounds or turn.source != "model":
            t.wall_s += turn.wall_s or 0.0
        t.judge_s += turn.judge_s or 0.0
    return t
