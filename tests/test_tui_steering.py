"""The terminal UI steering a real session: pause, edit + judge, hint, accept, stop, and opening /
resuming from the sessions screen. Replay model, judge on CPU (Triton interpreted), App.run_test."""

from __future__ import annotations

import argparse

import pytest
from agent_support import NO_CODE, check_session_dir, reply, write_replay
from textual.widgets import Input, TextArea
from textual.widgets.text_area import Selection
from tui_support import SIZE, live_app, screen_text, shown, sync, until

from kernelfix.tui.app import KernelfixApp
from kernelfix.tui.screens.session_screen import SessionScreen
from kernelfix.tui.screens.sessions_screen import SessionsScreen


@pytest.fixture
def judge(judges):
    return judges("relu", "cpu")


def view_of(app):
    return app.screen.view


@sync
async def test_pause_holds_after_the_current_turn_until_resumed(tmp_path, judge):
    app, model, session = live_app(tmp_path, judge, [NO_CODE, NO_CODE], max_turns=2)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, model.waiting.is_set, "turn 1 asks the model")
        await pilot.press("p")  # while turn 1 is in progress
        await shown(pilot, app, "[pausing after this turn]")
        model.release()
        await shown(pilot, app, "⏸ paused after turn 1", "⏸ paused · relu")
        assert [t.index for t in view_of(app).turns] == [1]
        assert not model.waiting.is_set()  # held in the pause, before the next model call

        await pilot.press("p")
        await until(pilot, model.waiting.is_set, "turn 2 asks the model after the resume")
        model.release()
        await until(pilot, lambda: app.outcome is not None, "the session ends")
        await shown(pilot, app, "✗  1 model -", "✗  2 model -", "format:no_code", "■ ended", "max turns reached")
    assert app.outcome.stop_kind == "max_turns"
    check_session_dir(tmp_path / "session")


@sync
async def test_edited_candidate_is_judged_as_its_own_turn(tmp_path, judge):
    app, model, session = live_app(tmp_path, judge, [reply("triton_wrong_values.py")], max_turns=2)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, model.waiting.is_set, "turn 1 asks the model")
        await pilot.press("p")
        model.release()
        await until(pilot, lambda: view_of(app).paused, "paused after the leaky kernel's turn")
        assert view_of(app).turns[0].verdict.category.value == "correctness_error:numerical"

        screen = app.screen
        await pilot.press("e")
        editor = app.screen.query_one(TextArea)
        assert editor.text == screen.view.turns[0].code  # the selected turn's candidate, to edit in place
        # Fix the leaky slope the way a user would: select "0.1 * x" and type over it.
        row = next(i for i, line in enumerate(editor.text.splitlines()) if "0.1 * x" in line)
        col = editor.text.splitlines()[row].index("0.1 * x")
        editor.selection = Selection((row, col), (row, col + len("0.1 * x")))
        await pilot.press(*"0.0")
        assert "tl.where(x > 0, x, 0.0)" in editor.text
        await pilot.press("ctrl+s")
        assert app.screen is screen

        await until(pilot, lambda: app.outcome is not None, "the edited candidate is judged and the goal met")
        await shown(pilot, app, "✓  2 user  untimed ★best")
    traj = check_session_dir(tmp_path / "session")
    user = traj.turns[1]
    assert (user.index, user.source, user.verdict.category.value) == (2, "user", "ok")
    assert "tl.where(x > 0, x, 0.0)" in user.code and user.messages == []
    assert traj.outcome.best_turn == 2 and traj.outcome.stop_kind == "goal"


@sync
async def test_hint_goes_into_the_next_prompt(tmp_path, judge):
    app, model, session = live_app(tmp_path, judge, [NO_CODE, NO_CODE], max_turns=2)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, model.waiting.is_set, "turn 1 asks the model")
        await pilot.press("p")
        model.release()
        await until(pilot, lambda: view_of(app).paused, "paused after turn 1")
        await pilot.press("h")
        assert isinstance(app.screen.focused, Input)
        await pilot.press(*"use tl.maximum", "enter")
        await shown(pilot, app, "[hint queued: use tl.maximum]")
        await pilot.press("p")
        await until(pilot, model.waiting.is_set, "turn 2 asks the model")
        model.release()
        await until(pilot, lambda: app.outcome is not None, "the session ends")
    traj = check_session_dir(tmp_path / "session")
    assert traj.turns[0].hints == [] and traj.turns[1].hints == ["use tl.maximum"]
    assert "use tl.maximum" in traj.turns[1].messages[-1].content  # the prompt the model got


@sync
async def test_accept_takes_the_best_and_leaves(tmp_path, judge):
    # untimed_goal off: on CPU a correct kernel would otherwise end the session by itself
    app, model, session = live_app(
        tmp_path, judge, [reply("triton_relu_ok.py"), NO_CODE, NO_CODE], max_turns=3, untimed_goal=False
    )
    async with app.run_test(size=SIZE) as pilot:
        model.release()
        await until(
            pilot,
            lambda: len(view_of(app).turns) == 1 and model.waiting.is_set(),
            "turn 1 judged, turn 2 asks the model",
        )
        assert view_of(app).best_turn == 1
        await pilot.press("a")
        await shown(pilot, app, "[accepting the best after this turn, then leaving]")
        model.release()
        await until(pilot, lambda: app.return_value is not None, "the app leaves by itself")
    assert app.return_value.stop_kind == "user_accept" and app.return_value.best_turn == 1
    traj = check_session_dir(tmp_path / "session")
    assert [t.verdict.category.value for t in traj.turns] == ["ok", "format_error:no_code"]
    assert (tmp_path / "session" / "best.py").read_text() == traj.turns[0].code


@sync
async def test_stop_ends_the_session_and_keeps_the_ui(tmp_path, judge):
    app, model, session = live_app(tmp_path, judge, [NO_CODE, NO_CODE, NO_CODE], max_turns=3)
    async with app.run_test(size=SIZE) as pilot:
        model.release()
        await until(pilot, lambda: len(view_of(app).turns) == 1 and model.waiting.is_set(), "turn 2 asks the model")
        await pilot.press("s")
        model.release()
        await until(pilot, lambda: app.outcome is not None, "the session stops")
        await shown(pilot, app, "stopped by the user", "■ ended")
        assert app.is_running  # the UI stays for a look at the turns
        await pilot.press("q")
    assert app.return_value.stop_kind == "user_stop"
    assert len(check_session_dir(tmp_path / "session").turns) == 2


@sync
async def test_sessions_screen_opens_a_history_and_resumes_it(tmp_path, judge):
    from agent_support import TASK

    from kernelfix.agent.agent_config import AgentConfig
    from kernelfix.agent.models import ReplayModel
    from kernelfix.agent.session import Session
    from kernelfix.cli.optimize import open_for_resume

    root = tmp_path / "sessions"
    for name in ("a", "b"):  # each stops on its one model turn; the replay has a second
        replay = write_replay(tmp_path / f"{name}.jsonl", [NO_CODE, reply("triton_relu_ok.py")])
        s = Session.create(
            root / name,
            task_path=TASK,
            model=ReplayModel(replay),
            agent=AgentConfig(shape_block=False, max_turns=1),
            judge_config=judge.config,
            judge=judge,
        )
        assert s.run().stop_kind == "max_turns"
    limits = argparse.Namespace(max_turns=2)  # what `kernelfix sessions --max-turns 2` passes
    app = KernelfixApp(sessions_root=root, resume=lambda path, sink: open_for_resume(path, limits, sink))
    async with app.run_test(size=SIZE) as pilot:
        assert isinstance(app.screen, SessionsScreen)
        text = await shown(pilot, app, "✗ none, resumable")
        assert text.count("✗ none, resumable") == 2 and text.count("relu") == 2

        await pilot.press("enter")  # open the newest: its history
        history = app.screen
        assert isinstance(history, SessionScreen) and history.session is None
        await shown(pilot, app, "✗  1 model -", "format:no_code", "max turns reached")
        await pilot.press("escape")
        assert app.screen is not history and isinstance(app.screen, SessionsScreen)

        await pilot.press("r")  # resume it, with --max-turns 2
        await until(
            pilot, lambda: isinstance(app.screen, SessionScreen) and app.outcome is not None, "the resumed session ends"
        )
        resumed = app.screen.view
        assert [t.index for t in resumed.turns] == [1, 2] and resumed.best_turn == 2
        await shown(pilot, app, "✓  2 model untimed ★best")
        await pilot.press("escape")
        await until(pilot, lambda: "✓ found" in screen_text(app), "the list shows the resumed session's result")
    assert app.outcome.stop_kind == "goal"
    newest = max((root / n for n in ("a", "b")), key=lambda p: len(check_session_dir(p).turns))
    assert [t.verdict.category.value for t in check_session_dir(newest).turns] == ["format_error:no_code", "ok"]


@sync
async def test_quit_leaves_at_once_and_the_session_stays_open(tmp_path, judge):
    app, model, session = live_app(tmp_path, judge, [NO_CODE, NO_CODE], max_turns=2)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, model.waiting.is_set, "turn 1 asks the model")
        await pilot.press("q")  # mid-turn: the model has not answered
        await until(pilot, lambda: not app.is_running, "the app leaves without waiting for the turn", limit_s=5)
    assert app.session_thread.is_alive()  # still at the model's gate: nobody waited for it
    model.open()
    app.session_thread.join(timeout=60)
    assert isinstance(app.error, KeyboardInterrupt)  # the CLI's path for an interruption: exit 130, "kernelfix resume"
    traj = session.store.read_trajectory()
    assert traj.turns == [] and not traj.outcome.finished and traj.outcome.resumable
    assert traj.outcome.stop_reason.startswith("left by the user mid-turn")


@sync
async def test_a_hint_goes_to_the_selected_branch_only(tmp_path, judge):
    app, model, session = live_app(tmp_path, judge, [NO_CODE] * 4, max_turns=2, width=2)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, model.waiting.is_set, "round 1 asks the model")
        await pilot.press("p")
        model.release(2)
        await until(pilot, lambda: view_of(app).paused, "paused after round 1")
        await shown(pilot, app, "✗  1 b1", "✗  2 b2")
        await pilot.press("up")  # from turn 2 (b2) to turn 1 (b1)
        await pilot.press("h", *"unroll by 4", "enter")
        await shown(pilot, app, "[hint queued for b1: unroll by 4]")
        await pilot.press("p")
        await until(pilot, model.waiting.is_set, "round 2 asks the model")
        model.release(2)
        await until(pilot, lambda: app.outcome is not None, "the search ends")
    from agent_support import check_search_dir

    traj = check_search_dir(tmp_path / "session")
    two = {t.parent: t for t in traj.turns if t.round == 2}
    assert two[1].hints == ["unroll by 4"] and "unroll by 4" in two[1].messages[-1].content
    assert two[2].hints == [] and "unroll by 4" not in "".join(m.content for m in two[2].messages)
