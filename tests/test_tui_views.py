"""What the UI's panes say, from typed data: the event fold, stage words, the speedup chart,
the profile pane over a real Nsight Compute capture, the session list."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from kernelfix.agent.events import (
    ModelDelta,
    ModelReplied,
    SessionEnded,
    SessionStarted,
    StageUpdate,
    TurnJudged,
    TurnStarted,
)
from kernelfix.agent.session_dir import read_trajectory
from kernelfix.agent.state import Usage
from kernelfix.tools.evaluation import StageEvent
from kernelfix.tools.profile import bottleneck, ncu_csv
from kernelfix.tools.verdict import Timings, TimingStats
from kernelfix.tui.check_views import correctness_view
from kernelfix.tui.perf_views import performance_view, profile_view, speedup_chart
from kernelfix.tui.session_list import find_sessions
from kernelfix.tui.turn_text import turn_label
from kernelfix.tui.view_model import SessionView, stage_text

SESSION = Path(__file__).parent / "fixtures" / "tui" / "sessions" / "relu-demo"
NCU = Path(__file__).parent / "fixtures" / "ncu"


def text(renderable, width: int = 50) -> str:
    c = Console(width=width, record=True, color_system=None)
    c.print(renderable)
    return c.export_text()


def recorded_turns():
    return read_trajectory(SESSION).turns


def timed(turn, candidate_ms: float, eager_ms: float, compiled_ms: float):
    """The turn as a GPU judge would have left it: timed, with the speedups that follow from the times."""

    def stats(ms):
        return TimingStats(median_ms=ms, mean_ms=ms, std_ms=0.0, min_ms=ms, p10_ms=ms, p90_ms=ms, runs=100)

    v = turn.verdict.model_copy(
        update={
            "timings": Timings(
                candidate=stats(candidate_ms), eager=stats(eager_ms), compiled=stats(compiled_ms), gpu="H100"
            ),
            "speedup_eager": eager_ms / candidate_ms,
            "speedup_compile": compiled_ms / candidate_ms,
        }
    )
    return turn.model_copy(update={"verdict": v})


def test_stage_words():
    assert stage_text(StageEvent(stage="compile", status="started")) == "compiling..."
    assert (
        stage_text(StageEvent(stage="correctness", status="progress", detail="forward", done=2, total=5))
        == "checking 3/5..."
    )
    assert stage_text(StageEvent(stage="benchmark", status="started")) == "timing..."
    assert stage_text(StageEvent(stage="profile", status="skipped")) == "profile skipped"


def test_events_fold_into_the_view():
    turns = recorded_turns()
    v = SessionView()
    v.apply(
        SessionStarted(
            session_dir="/s",
            task="relu",
            model="replay:/abs/path/relu.jsonl",
            device="cpu",
            resumed=False,
            turns_done=0,
        )
    )
    assert (v.model, v.running) == ("replay:relu.jsonl", True)
    v.apply(TurnStarted(turn=1, source="model"))
    v.apply(ModelDelta(turn=1, channel="reasoning", text="think"))
    v.apply(ModelDelta(turn=1, channel="content", text="abc"))
    assert (v.live.reasoning, v.live.content, v.live.activity) == ("think", "abc", "the model is replying (3 chars)...")
    v.apply(ModelReplied(turn=1, usage=Usage(prompt_tokens=100, completion_tokens=20, cost_usd=0.01)))
    v.apply(StageUpdate(turn=1, event=StageEvent(stage="correctness", status="progress", done=0, total=5)))
    assert v.live.activity == "checking 1/5..." and v.tokens() == (100, 20)
    v.apply(TurnJudged(turn=turns[0], best_turn=None))
    assert v.live is None and [t.index for t in v.turns] == [1]
    v.apply(SessionEnded(outcome=read_trajectory(SESSION).outcome, session_dir="/s"))
    assert not v.running and v.activity.startswith("finished: goal met")


def test_turn_labels_carry_marks_and_words():
    turns = recorded_turns()
    labels = [turn_label(t, best=t.index == 3).plain for t in turns]
    assert labels == [
        "✗  1 model -\n   compile:import",
        "✗  2 model -\n   correctness:numerical",
        "✓  3 model untimed ★best\n   ok",
    ]


def test_speedup_chart_across_turns():
    turns = recorded_turns()
    turns[2] = timed(turns[2], candidate_ms=0.5, eager_ms=1.0, compiled_ms=0.8)
    turns.append(timed(turns[2].model_copy(update={"index": 4}), candidate_ms=2.0, eager_ms=1.0, compiled_ms=0.8))
    chart = speedup_chart(turns, best_turn=3, width=20).plain.splitlines()
    assert chart[0] == "  1 ✗ compile_error:import" and chart[1] == "  2 ✗ correctness_error:numerical"
    assert chart[2] == "  3 ✓ " + "█" * 20 + " 2.00x ★best"  # the fastest fills the width
    assert (
        chart[3] == "  4 ✓ " + "█" * 5 + " " * 5 + "|" + " " * 9 + " 0.50x"
    )  # '|' just past where a 1.00x bar (10 of 20) ends
    perf = text(performance_view(turns[2], turns, best_turn=3))
    assert "0.5 ms" in perf and "2.00x" in perf and "1.60x" in perf  # vs eager and vs torch.compile


def test_untimed_and_failed_turns_say_why():
    turns = recorded_turns()
    assert "not timed on cpu" in text(performance_view(turns[2], turns, 3))
    assert "the kernel failed (compile_error:import)" in text(performance_view(turns[0], turns, 3), width=80)
    assert "no correctness check ran" in text(correctness_view(turns[0].verdict))
    assert "worst: trial" in text(correctness_view(turns[1].verdict), width=80)


def test_profile_pane_over_a_real_ncu_capture():
    kernels = ncu_csv.parse((NCU / "ncu_relu_details.csv").read_text()).kernels
    report = bottleneck.from_ncu(kernels, timings=None, task_flops=None)
    turn = recorded_turns()[2]
    out = text(profile_view(turn.verdict.model_copy(update={"profile": report})), width=80)
    assert "ncu: memory-bound" in out and "relu_kernel" in out
    assert "not profiled: profiling needs a CUDA GPU" in text(
        profile_view(turn.verdict), width=80
    )  # the judge says why


def test_session_list_reads_settings_and_trajectory():
    [s] = find_sessions(SESSION.parent)
    assert (s.task, s.turns, s.status, s.success, s.best, s.resumable) == (
        "relu",
        3,
        "finished",
        True,
        "turn 3, untimed",
        False,
    )


def test_sessions_command_lists_off_a_terminal(capsys):
    import json

    from kernelfix.cli import EXIT_OK, EXIT_USAGE, main

    assert main(["sessions", str(SESSION.parent), "--json"]) == EXIT_OK
    [row] = json.loads(capsys.readouterr().out)
    assert (row["task"], row["turns"], row["best"]) == ("relu", 3, "turn 3, untimed")
    assert main(["sessions", str(SESSION.parent)]) == EXIT_OK  # pytest's stdin is no terminal: a table
    out = capsys.readouterr().out
    assert "relu" in out and "✓ found" in out and "turn 3, untimed" in out
    assert main(["sessions", str(SESSION / "no-such")]) == EXIT_USAGE


SEARCH = Path(__file__).parent / "fixtures" / "tui" / "search" / "relu-search"


def test_a_search_shows_as_a_tree_with_the_best_path_marked():
    from kernelfix.agent.events import RoundJudged, RoundStarted
    from kernelfix.agent.state import Slot
    from kernelfix.tui.turn_text import tree_label

    traj = read_trajectory(SEARCH)
    v = SessionView.from_trajectory(traj, SEARCH)
    assert v.branched and v.best_turn == 3 and v.best_path() == {3}
    # round one drew 1, 2, 3; round two continued 3 (on b3, and 6 forking as b4) and 2 (5, on b2)
    assert v.tree_rows() == [(1, 0), (2, 0), (5, 0), (3, 0), (6, 1), (4, 0)]
    assert text(tree_label(v.turn(5), depth=0, best=False, on_path=False)).splitlines()[0].split() == [
        "✓",
        "5",
        "b2<2",
        "untimed",
    ]
    assert "★best" in text(tree_label(v.turn(3), depth=0, best=True, on_path=True))
    fork = text(tree_label(v.turn(6), depth=1, best=False, on_path=False)).splitlines()
    assert fork[0].startswith("  ✗  6 b4<3") and fork[1].strip() == "format:no_code"
    assert (
        v.previous_turn(4).index == 3 and v.previous_turn(5).index == 2
    )  # a diff is against the parent, not the turn before

    # live: a round's candidates run side by side, each in its place in the tree until the round records them
    live = SessionView(width=3)
    live.apply(
        RoundStarted(
            round=1,
            slots=[Slot(round=1, turn=i, parent=None, branch=f"b{i}", call_index=i - 1, group=0) for i in (1, 2)],
        )
    )
    for i in (1, 2):
        live.apply(TurnStarted(turn=i, source="model", parent=None, branch=f"b{i}", round=1))
    live.apply(StageUpdate(turn=2, event=StageEvent(stage="compile", status="started")))
    assert (
        sorted(live.lives) == [1, 2]
        and live.tree_rows() == [(1, 0), (2, 0)]
        and live.lives[2].activity == "compiling..."
    )
    judged = traj.turns[0].model_copy(update={"index": 1, "commit": None})
    live.apply(TurnJudged(turn=judged, best_turn=None))
    assert list(live.lives) == [2] and [t.index for t in live.turns] == [1]
    live.apply(RoundJudged(record=traj.rounds[0], turns=traj.turns[:3], best_turn=3))
    assert not live.lives and [t.index for t in live.turns] == [1, 2, 3] and live.best_turn == 3
