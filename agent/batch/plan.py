"""What a batch runs: task files, directories of them, or manifests, turned into jobs with stable names.

    TASKS...   a task file (.py), a directory (its *.py task files, not recursive), or a
               manifest (.jsonl), one JSON object per line:
               {"task": "a.py", "candidate": "a_bad.py", "target": 1.5, "model": "...", "replay": "a.jsonl",
                "width": 4, "keep": 2}
               (paths relative to the manifest's folder; all keys but task optional)

Each job's session lives in ``OUT/sessions/<name>``; the name is the task file's
stem and a hash of what the session depends on (the task's and candidate's
contents, the target, a per-task model, a per-task width), so a rerun finds the same
session and a changed task gets a new one.

Models: a task's ``model`` (or ``replay`` file) in the manifest wins over the
batch's ``--model``. ``--model replay:DIR`` with a directory answers each task
from ``DIR/<task stem>.jsonl``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.models import REPLAY_PREFIX
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.task import Task, TaskError

MANIFEST_SUFFIX = ".jsonl"


class PlanError(Exception):
    """The batch's input is unusable: every problem found, one per line (exit 2)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ManifestLine(_Model):
    task: str
    candidate: str | None = None
    target: float | None = Field(None, ge=0, description="target speedup over eager for this task")
    model: str | None = None
    replay: str | None = Field(None, description="a replay file for this task: the same as model replay:FILE")
    width: int | None = Field(None, ge=1, le=64, description="candidates per round for this task (docs/search.md)")
    keep: int | None = Field(None, ge=1, description="branches each later round continues, for this task")


class BatchSettings(_Model):
    """What every job of a batch shares; the agent settings carry the batch's --model as the default."""

    out: str
    agent: AgentConfig
    judge: JudgeConfig


class Job(_Model):
    name: str  # stable: OUT/sessions/<name>
    task: str  # absolute path
    candidate: str | None = None  # absolute path of a failing kernel, judged as turn 0
    target: float | None = None
    model: str  # resolved: this task's model string
    width: int | None = None  # the manifest's, over the batch's --width
    keep: int | None = None
    settings: BatchSettings

    @property
    def session_dir(self) -> Path:
        return Path(self.settings.out) / "sessions" / self.name

    @property
    def agent(self) -> AgentConfig:
        update = {"model": self.model}
        if self.target is not None:
            update["target_speedup"] = self.target
        if self.width is not None:
            update["width"] = self.width
        if self.keep is not None:
            update["keep"] = self.keep
        return self.settings.agent.model_copy(update=update)


def _sha1(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


def _entries(arg: str, problems: list[str]) -> list[ManifestLine]:
    p = Path(arg)
    if p.is_dir():
        files = sorted(f for f in p.glob("*.py") if not f.name.startswith("_"))
        if not files:
            problems.append(f"{p}: no task files (*.py) in this directory")
        return [ManifestLine(task=str(f)) for f in files]
    if p.suffix == MANIFEST_SUFFIX:
        return _manifest(p, problems)
    if not p.exists():
        problems.append(f"{p}: no such file or directory")
        return []
    return [ManifestLine(task=str(p))]


def _manifest(path: Path, problems: list[str]) -> list[ManifestLine]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        problems.append(f"{path}: cannot read the manifest: {e}")
        return []
    base = path.parent
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = ManifestLine.model_validate(json.loads(raw))
        except ValidationError as e:  # in the user's words: the key, the value, what is allowed
            from kernelfix.base.settings_errors import problems as said

            problems += [
                f"{path} line {n}: {x}"
                for x in said(e, ManifestLine, lambda loc: f'"{loc[0]}"' if loc else "the line", assign=": ")
            ]
            continue
        except ValueError as e:
            problems.append(
                f'{path} line {n}: not a JSON object {{"task": ..., "candidate"?, "target"?, "model"?, "replay"?, "width"?, "keep"?}}: {e}'
            )
            continue
        if line.model and line.replay:
            problems.append(f"{path} line {n}: give model or replay, not both")
            continue

        def rel(x: str | None) -> str | None:
            return None if x is None else str(base / x)

        model = line.model
        if line.replay:
            model = REPLAY_PREFIX + str(base / line.replay)
        elif model and model.startswith(REPLAY_PREFIX):
            model = REPLAY_PREFIX + str(base / model[len(REPLAY_PREFIX) :])
        out.append(
            line.model_copy(
                update={"task": rel(line.task), "candidate": rel(line.candidate), "model": model, "replay": None}
            )
        )
    return out


def resolve_model(model: str, task_stem: str) -> str:
    """``replay:DIR`` names the task's own replay file, ``DIR/<task stem>.jsonl``; other models are as given."""
    if model.startswith(REPLAY_PREFIX):
        path = Path(model[len(REPLAY_PREFIX) :])
        if path.is_dir():
            return f"{REPLAY_PREFIX}{(path / f'{task_stem}.jsonl').resolve()}"
        return f"{REPLAY_PREFIX}{path.resolve()}"
    return model


def _model_problems(jobs) -> list[str]:
    """Each distinct model built once, as a session would: unreadable replay files, unroutable model strings."""
    from kernelfix.agent.models import ModelError, make_model

    problems = []
    for model in sorted({j.model for j in jobs}):
        job = next(j for j in jobs if j.model == model)
        try:
            make_model(model, job.agent)
        except (ValueError, ModelError) as e:
            problems.append(str(e))
    return problems


def plan(args: list[str], settings: BatchSettings) -> list[Job]:
    """Jobs for TASKS..., in the order given; raises PlanError listing every unusable entry."""
    problems: list[str] = []
    lines = [e for a in args for e in _entries(a, problems)]
    jobs: dict[str, Job] = {}
    for line in lines:
        try:
            task = Task.load(line.task)
        except TaskError as e:
            problems.append(str(e))
            continue
        candidate_text = b""
        if line.candidate is not None:
            try:
                candidate_text = Path(line.candidate).read_bytes()
            except OSError as e:
                problems.append(f"cannot read candidate {line.candidate}: {e}")
                continue
        model = line.model or settings.agent.model
        if not model:
            problems.append(f"{task.path}: no model: pass --model, or give model/replay in the manifest")
            continue
        model = resolve_model(model, task.name)
        if model.startswith(REPLAY_PREFIX) and not Path(model[len(REPLAY_PREFIX) :]).is_file():
            problems.append(f"{task.path}: no replay file {model[len(REPLAY_PREFIX) :]}")
            continue
        key = "\0".join([task.sha1, _sha1(candidate_text), repr(line.target), line.model or ""])
        if line.width is not None or line.keep is not None:  # only then: the names of earlier batches stay valid
            key += f"\0width={line.width}\0keep={line.keep}"
        name = f"{task.name}-{_sha1(key.encode())[:8]}"
        if name in jobs:  # the same work listed twice
            continue
        jobs[name] = Job(
            name=name,
            task=str(task.path),
            candidate=str(Path(line.candidate).resolve()) if line.candidate else None,
            target=line.target,
            model=model,
            width=line.width,
            keep=line.keep,
            settings=settings,
        )
    problems += _model_problems(jobs.values())
    if problems:
        raise PlanError("\n".join(problems))
    if not jobs:
        raise PlanError("no tasks to run")
    return list(jobs.values())
