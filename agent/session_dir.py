"""A session directory: settings, a git history of judged turns, the trajectory, the checkpoints.

SESSION_DIR/
  session.json          settings the session started with (resume reads them)
  task.py               the session's own copy of the task
  turns/NNN/            candidate.py, verdict.json, reply.md   (one git commit per judged turn; with
                        width > 1 each branch of the search is a git branch, bN)
  best.py               the best correct candidate, once there is one
  trajectory.json       the whole session (kernelfix.agent.state.Trajectory), rewritten atomically
  checkpoints.sqlite    LangGraph checkpoints: `kernelfix resume` continues from the last node
  replies.jsonl         every model reply as it arrived, so a kill before its checkpoint never pays for it twice
  work/                 judge working directories (logs, builds); not in git
"""

from __future__ import annotations

import enum
import fcntl
import json
import logging
import os
import shutil
import sqlite3
import threading
import time
import types
import typing
import uuid
from pathlib import Path

import git
from pydantic import BaseModel, ConfigDict, ValidationError

from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.state import SessionState, Trajectory, Turn
from kernelfix.base import atomic
from kernelfix.base.version import __version__
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.task import Task
from kernelfix.tools.verdict import Verdict

SETTINGS = "session.json"
TRAJECTORY = "trajectory.json"
REPLIES = "replies.jsonl"
CHECKPOINTS = "checkpoints.sqlite"
TURN_TRAILER = "Kernelfix-Turn"
BASE_TRAILER = "Kernelfix-Base"  # the commit a search's first round branches from when there is no turn 0
_GITIGNORE = "work/\ncheckpoints.sqlite*\ntrajectory.json\nreplies.jsonl\n.lock\n*.tmp\n*.kftmp\n"
_BUILDING_SUFFIX = ".kfnew"  # a session directory being created
_ACTOR = git.Actor("kernelfix", "kernelfix@localhost")
_GIT_IDENTITY = {
    f"GIT_{who}_{what}": value
    for who in ("AUTHOR", "COMMITTER")
    for what, value in (("NAME", _ACTOR.name), ("EMAIL", _ACTOR.email))
}
_BRANCH_INDEX = "kernelfix-index-"  # a branch commit's private index under .git (removed after, or as a leftover)
log = logging.getLogger(__name__)


class SessionError(Exception):
    """The session directory cannot be used (bad input: exit 2)."""


class SessionSettings(BaseModel):
    """What a session started with; ``session.json``."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    kernelfix_version: str
    created_at: float
    task_path: str  # the user's file; the session runs from its own copy
    task_sha1: str
    candidate_path: str | None = None  # --candidate, where it was
    candidate_source: str | None = None  # its text, judged as turn 0 (kept here: the user's file may change)
    candidate_name: str = "candidate.py"
    model: str
    agent: AgentConfig
    judge: JudgeConfig


def _checkpoint_types(model: type[BaseModel]) -> set[tuple[str, str]]:
    """Every pydantic model and enum reachable from ``model``'s fields: what the checkpoint may rebuild."""
    seen: set[type] = set()

    def walk(tp: typing.Any) -> None:
        origin = typing.get_origin(tp)
        if origin is not None or isinstance(tp, types.UnionType):
            for arg in typing.get_args(tp):
                walk(arg)
            return
        if not isinstance(tp, type) or tp in seen:
            return
        if issubclass(tp, BaseModel):
            seen.add(tp)
            for field in tp.model_fields.values():
                walk(field.annotation)
        elif issubclass(tp, enum.Enum):
            seen.add(tp)

    walk(model)
    return {(t.__module__, t.__qualname__) for t in seen}


class SessionDir:
    def __init__(self, path: str | Path, settings: SessionSettings):
        self.path = Path(path).resolve()
        self.settings = settings
        self._lock_file = None
        self._journal_lock = threading.Lock()  # a round's slots journal their replies from several threads

    # ------------------------------------------------------------------ create / open

    @classmethod
    def create(
        cls,
        path: str | Path,
        *,
        task: Task,
        model: str,
        agent: AgentConfig,
        judge: JudgeConfig,
        candidate_source: str | None = None,
        candidate_name: str = "candidate.py",
        candidate_path: str | None = None,
    ) -> "SessionDir":
        p = Path(path)
        if p.exists() and (not p.is_dir() or any(p.iterdir())):
            hint = f"; to continue it: kernelfix resume {p}" if (p / SETTINGS).exists() else ""
            raise SessionError(f"session directory {p} exists and is not empty{hint}")
        settings = SessionSettings(
            session_id=uuid.uuid4().hex[:12],
            kernelfix_version=__version__,
            created_at=time.time(),
            task_path=str(task.path),
            task_sha1=task.sha1,
            candidate_path=candidate_path,
            candidate_source=candidate_source,
            candidate_name=candidate_name,
            model=model,
            agent=agent,
            judge=judge,
        )
        # Built beside its place and renamed into it: a kill leaves no session or a whole one, never
        # a directory that is neither resumable nor empty enough for a new `optimize`.
        building = p.with_name(f".{p.name}.{settings.session_id}{_BUILDING_SUFFIX}")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            for stale in p.parent.glob(f".{p.name}.*{_BUILDING_SUFFIX}"):  # from a create that was killed
                shutil.rmtree(stale, ignore_errors=True)
            building.mkdir()
            s = cls(building, settings)
            atomic.write_text(building / "task.py", task.source)
            atomic.write_text(building / ".gitignore", _GITIGNORE)
            s.save_settings()
            git.Repo.init(building)
            os.rename(building, p)  # replaces p when it is an empty directory
        except BaseException as e:
            shutil.rmtree(building, ignore_errors=True)
            if isinstance(e, OSError):
                raise SessionError(f"cannot create session directory {p}: {e}") from None
            raise
        s.path = p.resolve()
        return s

    @classmethod
    def open(cls, path: str | Path) -> "SessionDir":
        p = Path(path)
        f = p / SETTINGS
        if not f.is_file():
            raise SessionError(f"{p} is not a kernelfix session (no {SETTINGS})")
        try:
            settings = SessionSettings.model_validate_json(f.read_text(encoding="utf-8"))
        except (OSError, ValueError, ValidationError) as e:
            raise SessionError(f"cannot read {f}: {str(e).splitlines()[0]}") from None
        if not (p / "task.py").is_file() or not (p / ".git").exists():
            raise SessionError(f"session {p} is incomplete (task.py or its git repository is missing)")
        return cls(p, settings)

    def save_settings(self) -> None:
        atomic.write_json(self.path / SETTINGS, self.settings)

    def change_agent_settings(self, agent: AgentConfig) -> None:
        """New limits for a resume, saved and committed on their own, so the history says what changed."""
        old = self.settings.agent.model_dump()
        changes = ", ".join(f"{k} {old[k]} -> {v}" for k, v in agent.model_dump().items() if old[k] != v)
        if not changes:
            return
        self.settings = self.settings.model_copy(update={"agent": agent})
        self.save_settings()
        repo = self.repo
        if repo.head.is_valid():  # before the first turn, that turn's commit takes the settings along
            repo.index.add([SETTINGS])
            repo.index.commit(f"settings: {changes}\n", author=_ACTOR, committer=_ACTOR)

    # ------------------------------------------------------------------ paths

    @property
    def task_path(self) -> Path:
        return self.path / "task.py"

    def task(self) -> Task:
        """The session's copy of the task, named as the user's file (per-task config and messages use it)."""
        user_path = Path(self.settings.task_path)
        return Task.load(self.task_path).model_copy(update={"name": user_path.stem, "path": user_path})

    @property
    def work_dir(self) -> Path:
        return self.path / "work"

    def eval_dir(self, turn: int) -> Path:
        return self.work_dir / f"turn-{turn:03d}"

    def turn_dir(self, turn: int) -> Path:
        return self.path / "turns" / f"{turn:03d}"

    # ------------------------------------------------------------------ exclusivity

    def lock(self) -> None:
        """One process per session: a second `resume` of a running session is refused."""
        if self._lock_file is not None:
            return
        f = open(self.path / ".lock", "a+")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            raise SessionError(f"session {self.path} is in use by another kernelfix process") from None
        self._lock_file = f
        self._clear_leftovers()

    def _clear_leftovers(self) -> None:
        """What a kernelfix process killed mid-write left behind; safe to remove only under the lock.

        Git's lock files (``index.lock``, ``HEAD.lock``, a branch's ``.lock``) from a commit cut
        short would make every later commit fail with "Lock at ... could not be obtained"; the files
        they guard are intact (git writes the lock file and renames it over). Temp files of
        :mod:`kernelfix.base.atomic` writes are never the current version of anything.
        """
        git_dir = self.path / ".git"
        for lock in [*git_dir.glob("*.lock"), *git_dir.glob("refs/**/*.lock"), *git_dir.glob(f"{_BRANCH_INDEX}*")]:
            log.info("removing %s, left by a kernelfix process that was killed mid-commit", lock)
            lock.unlink(missing_ok=True)
        work = self.path / "work"  # the judge's own files (a worker's spec written as the kill landed)
        for d in [
            self.path,
            *self.path.glob("turns/*"),
            *(p for p in work.rglob("*") if p.is_dir() and not p.is_symlink()),
        ]:
            atomic.remove_stale_temps(d, older_than_s=0)

    def unlock(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    # ------------------------------------------------------------------ checkpoints

    def checkpointer(self):
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(self.path / CHECKPOINTS, check_same_thread=False)
        serde = JsonPlusSerializer(allowed_msgpack_modules=sorted(_checkpoint_types(SessionState)))
        return SqliteSaver(conn, serde=serde)

    # ------------------------------------------------------------------ git

    @property
    def repo(self) -> git.Repo:
        return git.Repo(self.path)

    def turn_commits(self) -> dict[int, str]:
        """Judged turn -> commit sha, from the history."""
        repo = self.repo
        if not repo.head.is_valid():
            return {}
        found: dict[int, str] = {}
        for c in repo.iter_commits(branches=True):  # every branch of a search, not only HEAD's
            for line in c.message.splitlines():
                if line.startswith(f"{TURN_TRAILER}: "):
                    found.setdefault(int(line.split(": ", 1)[1]), c.hexsha)
        return found

    def record_turn(self, turn: Turn, *, is_best: bool, parent_commit: str | None = None) -> str:
        """Write the turn's files (and best.py) and commit them; once per turn, however often called.

        Without ``parent_commit`` the commit goes on HEAD (the chain); with it, on ``turn.branch``, a child of
        ``parent_commit`` (a search), leaving HEAD, the index and the other branches as they are.
        """
        done = self.turn_commits().get(turn.index)
        if done is not None:  # a resumed session re-ran this node after the commit
            self._recorded_verdict(turn)
            return done
        files = self._write_turn_files(turn, is_best)
        if parent_commit is not None:
            return self._commit_on_branch(
                files, _commit_message(turn, is_best), parent=parent_commit, branch=turn.branch
            )
        repo = self.repo
        repo.index.add(files)
        commit = repo.index.commit(_commit_message(turn, is_best), author=_ACTOR, committer=_ACTOR)
        return commit.hexsha

    def _recorded_verdict(self, turn: Turn) -> None:
        """The committed verdict for a turn judged again after its commit: the record wins, so the trajectory and
        the turn's files agree (a verdict's timings, its breakdown among them, differ from one judging to the next)."""
        try:
            turn.verdict = Verdict.model_validate_json((self.turn_dir(turn.index) / "verdict.json").read_text())
        except (OSError, ValidationError):  # a record that cannot be read: the new verdict stands
            pass

    def _write_turn_files(self, turn: Turn, is_best: bool) -> list[str]:
        d = self.turn_dir(turn.index)
        d.mkdir(parents=True, exist_ok=True)
        files = [d / "verdict.json"]
        atomic.write_json(d / "verdict.json", turn.verdict)
        if turn.code is not None:
            atomic.write_text(d / "candidate.py", turn.code)
            files.append(d / "candidate.py")
        if turn.reply is not None:
            atomic.write_text(d / "reply.md", turn.reply.content)
            files.append(d / "reply.md")
        if is_best and turn.code is not None:
            atomic.write_text(self.path / "best.py", turn.code)
            files.append(self.path / "best.py")
        files += [self.path / n for n in (SETTINGS, "task.py", ".gitignore")]
        return [str(f.relative_to(self.path)) for f in files]

    # ------------------------------------------------------------------ branches (a search, width > 1)

    def base_commit(self) -> str:
        """The commit a search branches from: HEAD, made first (task and settings) when nothing is committed yet."""
        repo = self.repo
        if repo.head.is_valid():
            return repo.head.commit.hexsha
        repo.index.add([SETTINGS, "task.py", ".gitignore"])
        message = f"session: task and settings\n\n{BASE_TRAILER}: {self.settings.session_id}\n"
        return repo.index.commit(message, author=_ACTOR, committer=_ACTOR).hexsha

    def trunk(self) -> str:
        """HEAD's branch name (the chain's branch; a search's turn 0 and base commit are on it)."""
        return self.repo.head.ref.name

    def _commit_on_branch(self, files: list[str], message: str, *, parent: str, branch: str | None) -> str:
        """A commit of ``parent``'s tree plus ``files`` at the tip of ``branch``, made with git's plumbing
        and a private index, so a kill at any point leaves HEAD, the index and every ref whole."""
        if not branch:
            raise ValueError("a commit on a branch needs the turn's branch")
        repo = self.repo
        index = self.path / ".git" / f"{_BRANCH_INDEX}{branch}"
        env = {"GIT_INDEX_FILE": str(index), **_GIT_IDENTITY}
        try:
            tip = repo.git.rev_parse("--verify", "--quiet", f"refs/heads/{branch}", with_exceptions=False)
            if tip and tip != parent and repo.is_ancestor(parent, tip):
                parent = tip  # the branch moved past its last turn (a settings commit of a resume): keep that on it
            repo.git.read_tree(parent, env=env)
            repo.git.add("--", *files, env=env)
            tree = repo.git.write_tree(env=env)
            sha = repo.git.commit_tree(tree, "-p", parent, "-m", message.rstrip("\n"), env=env)
            repo.git.update_ref(f"refs/heads/{branch}", sha, env=env)  # lock file + rename: atomic
        finally:
            index.unlink(missing_ok=True)
        return sha

    def point_head(self, branch: str) -> None:
        """HEAD names ``branch`` (the best path) and the index matches it; the files on disk stay as they are."""
        repo = self.repo
        if repo.head.ref.name != branch:
            repo.git.symbolic_ref("HEAD", f"refs/heads/{branch}")
        repo.git.read_tree("HEAD")  # the branch may have moved on since HEAD last named it

    # ------------------------------------------------------------------ trajectory

    def write_trajectory(self, traj: Trajectory) -> None:
        atomic.write_json(self.path / TRAJECTORY, traj)

    def journal_reply(self, call_index: int, prompt_sha: str, reply: BaseModel) -> None:
        """Record a model reply the moment it arrives (before the graph checkpoints it)."""
        line = json.dumps(
            {"call_index": call_index, "prompt_sha256": prompt_sha, "reply": reply.model_dump(mode="json")}
        )
        with self._journal_lock:  # append_line cuts a line it finds unfinished: another thread's, mid-write
            atomic.append_line(self.path / REPLIES, line)

    def journaled_reply(self, call_index: int, prompt_sha: str) -> dict | None:
        """The reply already received for this call and prompt, if the process died before its checkpoint."""
        f = self.path / REPLIES
        if not f.is_file():
            return None
        found = None
        for rec in map(json.loads, atomic.read_lines(f)):  # complete lines only: a kill mid-append tears the last
            if rec["call_index"] == call_index and rec["prompt_sha256"] == prompt_sha:
                found = rec["reply"]
        return found

    def read_trajectory(self) -> Trajectory | None:
        return read_trajectory(self.path)


def _commit_message(turn: Turn, is_best: bool) -> str:
    v = turn.verdict
    head = f"turn {turn.index}: {v.category.value}"
    if v.speedup_eager is not None:
        head += f", {v.speedup_eager:.2f}x over eager"
        if v.speedup_compile is not None:
            head += f", {v.speedup_compile:.2f}x over torch.compile"
    elif turn.correct:
        head += f" (not timed on {v.device})"
    if is_best:
        head += " [best]"
    body = (v.message or "").strip().splitlines()
    lines = [head, ""]
    if body:
        lines += [body[0][:200], ""]
    lines += [f"Kernelfix-Source: {turn.source}", f"{TURN_TRAILER}: {turn.index}"]
    return "\n".join(lines) + "\n"


def read_trajectory(session_dir: str | Path, *, unreadable_as_none: bool = False) -> Trajectory | None:
    """A session directory's trajectory.json, or None before its first write. A file that cannot be read or
    parsed (kernelfix writes it atomically: something else wrote this one) raises, unless
    ``unreadable_as_none``: a batch, its report and a tune read it as none, and go on past one broken session."""
    f = Path(session_dir) / TRAJECTORY
    if not f.is_file():
        return None
    try:
        return Trajectory.model_validate_json(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        if unreadable_as_none:
            return None
        raise
