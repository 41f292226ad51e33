"""`kernelfix optimize` / `kernelfix resume`: the offline demo, a kill mid-turn and a resume, bad input."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from agent_support import NO_CODE, REPO, TASK, check_session_dir, write_replay

from kernelfix.cli import EXIT_FAIL, EXIT_OK, EXIT_USAGE, main

DEMO = ["examples/tasks/relu.py", "--model", "replay:examples/replays/relu.jsonl", "--headless", "--device", "cpu"]


def kernelfix(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return subprocess.Popen(
        [sys.executable, "-m", "kernelfix", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


@pytest.mark.slow
def test_demo_killed_mid_turn_resumes_without_losing_a_turn(tmp_path):
    session = tmp_path / "demo"
    proc = kernelfix("optimize", *DEMO, "--session-dir", str(session))
    running = session / "work" / "turn-002" / "logs"  # made as turn 2's candidate worker starts
    deadline = time.monotonic() + 240
    while not running.exists():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "turn 2 was never judged"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    before = check_session_dir(session)
    assert [t.index for t in before.turns] == [1] and not before.outcome.finished

    resumed = kernelfix("resume", str(session), "--headless")
    out = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == EXIT_OK, out
    assert "resumed with 1 judged turns" in out
    assert "unregistered type" not in out and "Blocked deserialization" not in out  # the checkpoint rebuilt typed state
    traj = check_session_dir(session)
    assert [(t.index, t.verdict.category.value) for t in traj.turns] == [
        (1, "compile_error:import"),
        (2, "correctness_error:numerical"),
        (3, "ok"),
    ]
    assert traj.turns[0] == before.turns[0]  # the judged turn survived untouched
    assert traj.outcome.finished and traj.outcome.stop_kind == "goal" and traj.outcome.best_turn == 3
    assert len(list(session.joinpath("turns").iterdir())) == 3
    assert "shape" in traj.turns[0].messages[1].content.lower()  # the first prompt carried the shape block


def test_headless_output_and_exit_code_when_nothing_is_found(tmp_path, capsys):
    replay = write_replay(tmp_path / "r.jsonl", [NO_CODE, NO_CODE])
    rc = main(
        [
            "optimize",
            str(TASK),
            "--model",
            f"replay:{replay}",
            "--headless",
            "--device",
            "cpu",
            "--no-shape-block",
            "--max-turns",
            "2",
            "--session-dir",
            str(tmp_path / "s"),
        ]
    )
    out = capsys.readouterr().out
    assert rc == EXIT_FAIL
    assert out.count("format_error:no_code") == 2
    assert "max turns reached: 2 of 2 model turns" in out and "no correct, legal kernel" in out
    # raising the limit on resume continues; the replay then runs out
    rc = main(["resume", str(tmp_path / "s"), "--headless", "--max-turns", "4"])
    out = capsys.readouterr().out
    assert rc == EXIT_FAIL and "ran out after 2 replies" in out
    assert len(check_session_dir(tmp_path / "s").turns) == 2


@pytest.mark.parametrize(
    "argv,message",
    [
        (["optimize", "no/such/task.py", "--model", "replay:x.jsonl"], "task file not found"),
        (["optimize", str(TASK), "--model", "replay:/no/such.jsonl"], "cannot read replay file"),
        (["optimize", str(TASK)], "no model"),
        pytest.param(
            ["optimize", str(TASK), "--model", "nosuchprovider/m"],
            "cannot route model",
            # litellm routes it (an import of seconds): on the worker that imports litellm for test_agent_models
            marks=pytest.mark.xdist_group("litellm"),
        ),
        (
            ["optimize", str(TASK), "--model", "openai/gpt-4o-mini", "--api-key-env", "KERNELFIX_TEST_UNSET_KEY"],
            "KERNELFIX_TEST_UNSET_KEY",
        ),
        (["optimize", str(TASK), "--model", "replay:x.jsonl", "--max-turns", "0"], "--max-turns 0: must be at least 1"),
        (
            ["optimize", str(TASK), "--model", "replay:x.jsonl", "--candidate", "/no/such/candidate.py"],
            "cannot read candidate",
        ),
        (["resume", "."], "not a kernelfix session"),
    ],
)
def test_bad_input_exits_2_with_a_message(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELFIX_TEST_UNSET_KEY", raising=False)
    (tmp_path / "x.jsonl").write_text('{"content": "hi"}\n')
    monkeypatch.chdir(tmp_path)
    assert main(argv) == EXIT_USAGE
    assert message in capsys.readouterr().err
    assert not (tmp_path / "sessions").exists()  # nothing was created for a bad command


def test_an_existing_session_dir_is_never_overwritten(tmp_path, capsys):
    d = tmp_path / "s"
    d.mkdir()
    (d / "precious.txt").write_text("mine")
    replay = write_replay(tmp_path / "r.jsonl", [NO_CODE])
    assert main(["optimize", str(TASK), "--model", f"replay:{replay}", "--session-dir", str(d)]) == EXIT_USAGE
    assert "exists and is not empty" in capsys.readouterr().err
    assert sorted(p.name for p in d.iterdir()) == ["precious.txt"]


def test_a_task_that_does_not_run_stops_before_any_model_turn(tmp_path, capsys):
    from kernelfix.agent.state import Trajectory

    broken = TASK.parent / "broken_import.py"
    replay = write_replay(tmp_path / "r.jsonl", [NO_CODE])
    rc = main(
        [
            "optimize",
            str(broken),
            "--model",
            f"replay:{replay}",
            "--headless",
            "--device",
            "cpu",
            "--session-dir",
            str(tmp_path / "s"),
        ]
    )
    assert rc == EXIT_USAGE
    assert "No module named 'this_module_does_not_exist'" in capsys.readouterr().err
    traj = Trajectory.model_validate_json((tmp_path / "s" / "trajectory.json").read_text())
    assert traj.turns == [] and not traj.outcome.finished and not traj.outcome.resumable


def test_a_full_disk_mid_session_is_a_clear_message_and_the_session_resumes(tmp_path, capsys, monkeypatch):
    import errno

    from kernelfix.agent.session_dir import SessionDir
    from kernelfix.base import atomic

    replay = write_replay(tmp_path / "r.jsonl", [NO_CODE, NO_CODE])
    real = SessionDir.write_trajectory

    def full_disk(self, traj):
        if traj.turns:  # the first judged turn's record: the disk fills up here
            raise atomic.StorageError(self.path / "trajectory.json", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        real(self, traj)

    monkeypatch.setattr(SessionDir, "write_trajectory", full_disk)
    args = ["--model", f"replay:{replay}", "--headless", "--device", "cpu", "--no-shape-block", "--max-turns", "2"]
    rc = main(["optimize", str(TASK), *args, "--session-dir", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert rc == EXIT_FAIL
    assert "could not write its records" in err and "kernelfix resume" in err and "Traceback" not in err

    monkeypatch.setattr(SessionDir, "write_trajectory", real)  # space freed
    rc = main(["resume", str(tmp_path / "s"), "--headless"])
    assert rc == EXIT_FAIL  # the replies hold no code: the session ends unsuccessful, but it ends
    traj = check_session_dir(tmp_path / "s")
    assert [t.index for t in traj.turns] == [1, 2] and traj.outcome.finished
