"""A session survives kill -9 at any point: real `kernelfix optimize` processes, killed and resumed.

The first test kills at chosen points: found by watching the session directory, by the model
server (which kills mid-reply itself), or, for gaps too short to hit from outside, by the process
killing itself right after a chosen function returns (tests/crash_child.py); the second
kills at random times (seed in the failure message; KERNELFIX_CRASH_SEED=N reruns one). After
every kill the directory must be readable as it is; after the last resume the session must be
complete, with every judged turn once, every model reply asked for once unless a kill cut it
short, and the user's files untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import git
import pytest
from agent_support import REPO, TASK, check_session_dir
from llm_stub import Action, StubLLM

from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.session_dir import TURN_TRAILER, SessionDir
from kernelfix.agent.state import Trajectory
from kernelfix.cli import EXIT_FAIL, EXIT_OK
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.task import Task

DEMO_REPLAY = REPO / "examples" / "replays" / "relu.jsonl"
DEMO_REPLIES = [json.loads(line)["content"] for line in DEMO_REPLAY.read_text().splitlines() if line.strip()]
# broken (tl undefined), wrong (leaky), correct: the demo's three model turns
DEMO_CATEGORIES = ["compile_error:import", "correctness_error:numerical", "ok"]
STUB_KEY_ENV = "KERNELFIX_STUB_KEY"
CRASH_CHILD = Path(__file__).parent / "crash_child.py"

pytestmark = pytest.mark.crash


class Run:
    """One kernelfix process; its output lines are collected as they come, to pick kill points by."""

    def __init__(self, *args: str, die_at: str | None = None):
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1", STUB_KEY_ENV: "stub"}
        self.args = args
        cmd = [sys.executable, str(CRASH_CHILD), die_at] if die_at else [sys.executable, "-m", "kernelfix"]
        self.proc = subprocess.Popen(
            [*cmd, *args], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_until(self, ready, what: str, timeout: float = 240) -> None:
        """Poll ``ready()`` until true; fail, with the output, if the process ends or time runs out first."""
        deadline = time.monotonic() + timeout
        while not ready():
            if self.proc.poll() is not None:
                self._reader.join(5)
                if ready():
                    return
                pytest.fail(
                    f"kernelfix {' '.join(self.args[:1])} ended (exit {self.proc.returncode}) before {what}:\n{self.output}"
                )
            assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s:\n{self.output}"
            time.sleep(0.02)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.ended()

    def ended(self, timeout: float = 300) -> int:
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(10)
        return rc


def optimize(
    session: Path, *model_args: str, candidate: Path | None = None, task: Path = TASK, die_at: str | None = None
) -> Run:
    extra = ["--candidate", str(candidate)] if candidate else []
    args = [
        "optimize",
        str(task),
        *model_args,
        *extra,
        "--headless",
        "--device",
        "cpu",
        "--no-shape-block",
        "--session-dir",
        str(session),
    ]
    return Run(*args, die_at=die_at)


def resume(session: Path, die_at: str | None = None) -> Run:
    return Run("resume", str(session), "--headless", die_at=die_at)


def fingerprint(paths: list[Path]) -> dict[str, tuple[str, int]]:
    return {str(p): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) for p in paths}


@dataclass
class Survivors:
    """The judged turns seen after the kills: each must be in the final session, unchanged."""

    commits: dict[int, str] = field(default_factory=dict)  # turn -> its commit
    verdicts: dict[int, dict] = field(default_factory=dict)  # turn -> verdict.json as committed

    def add(self, repo: git.Repo, turns: dict[int, str]) -> None:
        for index, sha in turns.items():
            assert self.commits.setdefault(index, sha) == sha, f"turn {index} was committed again after a kill"
            blob = repo.commit(sha).tree / "turns" / f"{index:03d}" / "verdict.json"
            self.verdicts[index] = json.loads(blob.data_stream.read())


def turn_commits(session: Path) -> dict[int, str]:
    """Turn -> commit from the history; a turn with two commits fails here."""
    repo = git.Repo(session)
    if not repo.head.is_valid():
        return {}
    found: dict[int, str] = {}
    for c in repo.iter_commits():
        for line in c.message.splitlines():
            if line.startswith(f"{TURN_TRAILER}: "):
                index = int(line.split(": ", 1)[1])
                assert index not in found, f"turn {index} has two commits: {found[index]} and {c.hexsha}"
                found[index] = c.hexsha
    return found


def json_files_parse(session: Path) -> None:
    for f in session.rglob("*.json"):
        if ".git" in f.relative_to(session).parts:
            continue
        try:
            json.loads(f.read_text())
        except ValueError as e:
            pytest.fail(f"{f} does not parse after a kill: {e}")


def trajectory_turns(session: Path) -> list[int]:
    return [t.index for t in Trajectory.model_validate_json((session / "trajectory.json").read_text()).turns]


def after_kill(session: Path, survivors: Survivors, context: str) -> None:
    """What a killed session must look like, whatever the moment: readable, consistent, resumable."""
    if not session.exists():  # killed before the directory was renamed into place: nothing to resume
        return
    json_files_parse(session)
    commits = turn_commits(session)
    traj_file = session / "trajectory.json"
    if traj_file.exists():
        traj = Trajectory.model_validate_json(traj_file.read_text())
        listed = {t.index: t.commit for t in traj.turns}
        assert all(commits.get(i) == sha for i, sha in listed.items()), (
            f"{context}: trajectory {listed} vs history {commits}"
        )
        assert not traj.outcome.finished or traj.outcome.stop_kind is not None
    survivors.add(git.Repo(session), commits)


def final_checks(
    session: Path, survivors: Survivors, categories: list[str], first_turn: int, context: str
) -> Trajectory:
    traj = check_session_dir(session)  # trajectory, history and turn files agree; the tree is clean
    turn_commits(session)  # no turn committed twice
    assert [t.verdict.category.value for t in traj.turns] == categories, context
    assert [t.index for t in traj.turns] == list(range(first_turn, first_turn + len(categories))), context
    assert traj.outcome.finished and traj.outcome.success and traj.outcome.stop_kind == "goal", (context, traj.outcome)
    by_index = {t.index: t for t in traj.turns}
    for index, sha in survivors.commits.items():
        t = by_index[index]
        assert t.commit == sha, f"{context}: turn {index} was re-committed"
        assert t.verdict.model_dump(mode="json") == survivors.verdicts[index], (
            f"{context}: turn {index}'s verdict changed"
        )
    json_files_parse(session)
    leftovers = [
        p
        for p in session.rglob("*")
        if p.name.endswith((".kftmp", ".kfnew")) or (p.suffix == ".lock" and ".git" in p.parts)
    ]
    assert not leftovers, f"{context}: {leftovers}"
    with sqlite3.connect(session / "checkpoints.sqlite") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    return traj


@pytest.fixture
def user_files(tmp_path):
    """The user's task and failing candidate, outside the session, to check that nothing touches them."""
    task = shutil.copy(TASK, tmp_path / "relu_task.py")
    candidate = shutil.copy(REPO / "tests" / "corpus" / "candidates" / "syntax_error.py", tmp_path / "my_kernel.py")
    return Path(task), Path(candidate)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_killed_at_each_point_resumes_without_losing_or_repeating_a_turn(tmp_path, user_files):
    task, candidate = user_files
    before = fingerprint([task, candidate])
    session = tmp_path / "s"
    survivors = Survivors()
    with StubLLM(DEMO_REPLIES) as llm:
        model = ["--model", "openai/stub", "--api-base", llm.url, "--api-key-env", STUB_KEY_ENV]

        # 1. Mid-model-reply: the candidate (turn 0) is judged and checkpointed, the first reply half streamed.
        llm.plan[0] = Action.KILL_MID_STREAM
        run = optimize(session, *model, candidate=candidate, task=task)
        llm.victim = run.proc.pid
        run.wait_until(llm.killed.is_set, "the server killed it mid-reply")
        run.ended()
        after_kill(session, survivors, "mid-reply")
        assert sorted(survivors.commits) == [0]

        # 2. Mid-way through turn 1's git commit: git's lock on the branch is left behind.
        run = resume(session, die_at="in_commit:1")
        assert run.ended() == -signal.SIGKILL, run.output
        assert list((session / ".git").rglob("*.lock")), "the kill did not land inside the commit"
        after_kill(session, survivors, "mid-commit")
        assert sorted(survivors.commits) == [0]

        # 3. Turn 1 committed; the feedback node has not returned (trajectory.json lags the history).
        run = resume(session, die_at="after_commit:1")
        assert run.ended() == -signal.SIGKILL, run.output
        after_kill(session, survivors, "after turn 1's commit")
        assert sorted(survivors.commits) == [0, 1] and trajectory_turns(session) == [0]

        # 4. The feedback node re-ran (its commit reused); its writes are saved, the next checkpoint is not.
        run = resume(session, die_at="after_writes:feedback")
        assert run.ended() == -signal.SIGKILL, run.output
        after_kill(session, survivors, "after feedback's writes")
        assert trajectory_turns(session) == [0, 1]

        # 5. Mid-judge: turn 2's correctness stage has started (turn 1 checkpointed, reply 1 taken).
        run = resume(session)
        run.wait_until((session / "work" / "turn-002" / "logs").exists, "turn 2 started its candidate worker")
        run.kill()
        after_kill(session, survivors, "mid-judge")
        assert sorted(survivors.commits) == [0, 1]

        # 6. The last resume finishes the session.
        run = resume(session)
        rc = run.ended()
        assert rc == EXIT_OK, run.output
        assert "resumed with 2 judged turns" in run.output, run.output

        # Each reply went to the session once; the only repeats are of requests a kill cut short.
        assert llm.completed() == [0, 1, 2], llm.deliveries
        assert [d.index for d in llm.deliveries if not d.complete] == [0], llm.deliveries

    traj = final_checks(session, survivors, ["compile_error:syntax", *DEMO_CATEGORIES], 0, "chosen kill points")
    assert [t.reply.content for t in traj.turns[1:]] == DEMO_REPLIES
    assert fingerprint([task, candidate]) == before


def test_killed_while_creating_leaves_no_half_session(tmp_path):
    """A directory neither resumable nor empty would stop both `resume` and a new `optimize` on that path."""
    session = tmp_path / "s"
    run = optimize(session, "--model", f"replay:{DEMO_REPLAY}", die_at="in_create")
    assert run.ended() == -signal.SIGKILL, run.output
    assert not session.exists()
    assert [p.name.endswith(".kfnew") for p in tmp_path.iterdir()] == [True]  # the built one, never renamed in
    store = SessionDir.create(
        session, task=Task.load(TASK), model="replay:x", agent=AgentConfig(), judge=JudgeConfig(device="cpu")
    )
    assert SessionDir.open(session).settings.session_id == store.settings.session_id
    assert [p.name for p in tmp_path.iterdir()] == ["s"]  # the leftover was cleared


@pytest.mark.slow
def test_killed_at_random_times_resumes_without_losing_a_turn(tmp_path):
    """Three kills at random times, then a resume to the end; about 30 to 50 s on two cores."""
    seed = int(os.environ.get("KERNELFIX_CRASH_SEED") or random.SystemRandom().randrange(2**32))
    delays = [round(random.Random(seed).uniform(0.5, 10.0), 2) for _ in range(3)]
    try:
        _kill_and_resume(tmp_path, delays)
    except BaseException as e:
        raise AssertionError(f"seed {seed}: kills at {delays} s (rerun with KERNELFIX_CRASH_SEED={seed}): {e}") from e


def _kill_and_resume(tmp_path: Path, delays: list[float]) -> None:
    task = Path(shutil.copy(TASK, tmp_path / "relu_task.py"))
    before = fingerprint([task])
    session = tmp_path / "s"
    survivors = Survivors()
    run = optimize(session, "--model", f"replay:{DEMO_REPLAY}", task=task)
    for n, delay in enumerate(delays):
        try:
            run.proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            run.kill()
        else:
            run.ended()
        after_kill(session, survivors, f"kill {n + 1}")
        run = resume(session) if session.exists() else optimize(session, "--model", f"replay:{DEMO_REPLAY}", task=task)
    rc = run.ended()
    assert rc == EXIT_OK, run.output
    final_checks(session, survivors, DEMO_CATEGORIES, 1, "after the last resume")
    assert fingerprint([task]) == before


def test_a_reply_received_before_a_kill_is_not_asked_for_again(tmp_path):
    """Killed after the model's reply arrived but before its checkpoint: resume uses the journaled reply."""
    replay = tmp_path / "replies.jsonl"
    shutil.copy(DEMO_REPLAY, replay)
    session = tmp_path / "s"
    run = optimize(session, "--model", f"replay:{replay}", "--max-turns", "1", die_at="after_reply:0")
    assert run.ended() == -signal.SIGKILL, run.output
    # Were the model asked again, it would now answer with no code at all.
    replay.write_text(json.dumps({"content": "I cannot help with that."}) + "\n")
    again = resume(session)
    assert again.ended() == EXIT_FAIL, again.output  # one broken turn, then max turns: no kernel, but it ends
    assert "received before the interruption" in again.output
    traj = check_session_dir(session)
    assert [(t.index, t.verdict.category.value) for t in traj.turns] == [(1, DEMO_CATEGORIES[0])]
    assert traj.turns[0].reply.content == DEMO_REPLIES[0]


@pytest.mark.slow
def test_a_search_killed_mid_round_resumes_every_branch(tmp_path):
    """Width 2, keep 2: killed once both round-one replies are journaled, once mid-judge, once between two
    commits of round two; each resume re-runs only what did not finish, asks no journaled reply again,
    commits no turn twice, and round two continues both branches."""
    from agent_support import NO_CODE, check_search_dir, reply

    ok, broken = reply("triton_relu_ok.py"), reply("syntax_error.py")
    replay = tmp_path / "replies.jsonl"
    replay.write_text("".join(json.dumps({"content": c}) + "\n" for c in [ok, broken, NO_CODE, NO_CODE]))
    config = tmp_path / "kernelfix.toml"
    config.write_text("[agent]\nuntimed_goal = false\n")  # on CPU a correct kernel would end the search after round one
    session = tmp_path / "s"
    search = ["--width", "2", "--keep", "2", "--max-turns", "2", "--config", str(config)]

    run = optimize(session, "--model", f"replay:{replay}", *search, die_at="after_replies:2")  # both, in either order
    assert run.ended() == -signal.SIGKILL, run.output
    # Were the model asked again for round one, it would now answer with no code at all.
    replay.write_text("".join(json.dumps({"content": c}) + "\n" for c in ["gone", "gone", NO_CODE, NO_CODE]))

    run = resume(session)  # turn 2 (a syntax error) is judged at once; turn 1 is killed once its candidate worker runs
    run.wait_until((session / "work" / "turn-001" / "logs").exists, "turn 1 started its candidate worker")
    run.kill()
    run = resume(session, die_at="after_commit:3")
    assert run.ended() == -signal.SIGKILL, run.output
    first_commit_of_3 = SessionDir.open(session).turn_commits()[3]
    run = resume(session)
    assert run.ended() == EXIT_OK, run.output
    assert "round 2: 2 of 2 candidates judged" in run.output, run.output

    traj = check_search_dir(session)
    trailers = [
        line
        for c in git.Repo(session).iter_commits(branches=True)
        for line in c.message.splitlines()
        if line.startswith(TURN_TRAILER)
    ]
    assert sorted(trailers) == [f"{TURN_TRAILER}: {i}" for i in (1, 2, 3, 4)]  # every turn committed once
    assert traj.turns[2].commit == first_commit_of_3
    assert [t.reply.content for t in traj.turns[:2]] == [ok, broken]  # the journaled replies, not the new file's
    assert [t.verdict.category.value for t in traj.turns] == [
        "ok",
        "compile_error:syntax",
        "format_error:no_code",
        "format_error:no_code",
    ]
    assert traj.rounds[0].kept == [1, 2] and sorted(t.parent for t in traj.turns[2:]) == [1, 2]  # both branches went on
    assert traj.outcome.finished and traj.outcome.stop_kind == "max_turns" and traj.outcome.best_turn == 1
