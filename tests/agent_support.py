"""Helpers for the agent tests: replay files, sessions on the shared CPU judge, git/trajectory checks."""

from __future__ import annotations

import json
from pathlib import Path

from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.models import ChatModel, ReplayModel
from kernelfix.agent.session import Session
from kernelfix.agent.session_dir import TURN_TRAILER, SessionDir
from kernelfix.agent.state import Trajectory
from kernelfix.tools.config import JudgeConfig

CORPUS = Path(__file__).parent / "corpus"
TASK = CORPUS / "tasks" / "relu.py"
REPO = Path(__file__).parent.parent


def candidate_code(name: str) -> str:
    """A corpus candidate without its ``# expect`` header."""
    lines = (CORPUS / "candidates" / name).read_text().splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("# expect"))


def reply(name: str, prose: str = "Here is the kernel.") -> str:
    return f"{prose}\n\n```python\n{candidate_code(name)}```\n"


NO_CODE = "I would fuse the activation into one pass over memory; shall I write it?"


def write_replay(path: Path, lines: list[str | dict]) -> Path:
    with path.open("w") as f:
        for line in lines:
            f.write(json.dumps({"content": line} if isinstance(line, str) else line) + "\n")
    return path


def make_session(tmp_path: Path, model: ChatModel, judge=None, *, name: str = "session", **agent) -> Session:
    cfg = AgentConfig(**{"shape_block": False, **agent})
    events: list = []
    s = Session.create(
        tmp_path / name,
        task_path=TASK,
        model=model,
        agent=cfg,
        judge_config=judge.config if judge is not None else JudgeConfig(device="cpu", run_timeout_s=120),
        judge=judge,
        on_event=events.append,
    )
    s.events = events  # type: ignore[attr-defined]
    return s


def replay_session(tmp_path: Path, lines: list[str | dict], judge=None, **agent) -> Session:
    return make_session(tmp_path, ReplayModel(write_replay(tmp_path / "replay.jsonl", lines)), judge, **agent)


def check_session_dir(path: Path) -> Trajectory:
    """trajectory.json, the git history and the turn files agree; returns the trajectory."""
    store = SessionDir.open(path)
    traj = Trajectory.model_validate_json((path / "trajectory.json").read_text())
    commits = store.turn_commits()
    assert sorted(commits) == [t.index for t in traj.turns], (commits, [t.index for t in traj.turns])
    repo = store.repo
    assert not repo.is_dirty(untracked_files=True), repo.git.status()
    for t in traj.turns:
        assert t.commit == commits[t.index]
        message = repo.commit(t.commit).message
        assert message.startswith(f"turn {t.index}: {t.verdict.category.value}")
        assert f"{TURN_TRAILER}: {t.index}" in message
        on_disk = json.loads((path / "turns" / f"{t.index:03d}" / "verdict.json").read_text())
        assert on_disk == t.verdict.model_dump(mode="json"), {
            k: (v, on_disk.get(k)) for k, v in t.verdict.model_dump(mode="json").items() if on_disk.get(k) != v
        }
    if traj.outcome.best_turn is not None:
        best = next(t for t in traj.turns if t.index == traj.outcome.best_turn)
        assert (path / "best.py").read_text() == best.code
    else:
        assert not (path / "best.py").exists()
    return traj


def check_search_dir(path: Path) -> Trajectory:
    """A search's session: every turn once in the history, on its own branch, a child of its parent's commit,
    its files in its commit; trajectory.json, the turn files and best.py agree; HEAD and the index clean."""
    store = SessionDir.open(path)
    traj = Trajectory.model_validate_json((path / "trajectory.json").read_text())
    commits = store.turn_commits()
    assert sorted(commits) == sorted(t.index for t in traj.turns), (commits, [t.index for t in traj.turns])
    repo = store.repo
    assert not repo.is_dirty(untracked_files=False), repo.git.status()
    by_index = {t.index: t for t in traj.turns}
    for t in traj.turns:
        assert t.commit == commits[t.index]
        c = repo.commit(t.commit)
        assert (
            c.message.startswith(f"turn {t.index}: {t.verdict.category.value}")
            and f"{TURN_TRAILER}: {t.index}" in c.message
        )
        assert t.commit in {x.hexsha for x in repo.iter_commits(t.branch)}, f"turn {t.index} is not on {t.branch}"
        if t.parent is not None:  # the nearest turn commit below it (a resume's settings commit may sit between)
            below = c.parents[0]
            while TURN_TRAILER not in below.message:
                below = below.parents[0]
            assert below.hexsha == by_index[t.parent].commit
        blob = c.tree / "turns" / f"{t.index:03d}" / "verdict.json"
        assert json.loads(blob.data_stream.read()) == t.verdict.model_dump(mode="json")
    if traj.outcome.best_turn is not None:
        assert (path / "best.py").read_text() == by_index[traj.outcome.best_turn].code
    return traj
