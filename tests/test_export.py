"""`kernelfix export` on trajectories built from the Trajectory model (no judge): record format,
and each filter dropping exactly what it should."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from agent_support import TASK

from kernelfix.agent import messages as prompts
from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.export import tokens
from kernelfix.agent.export.sft_records import dedup_key, normalize, word_jaccard
from kernelfix.agent.state import ChatMessage, Outcome, Settings, TaskInfo, Trajectory, Turn, totals
from kernelfix.cli import EXIT_FAIL, EXIT_OK, EXIT_USAGE, main
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.verdict import Category, Verdict

SOURCE = TASK.read_text()


def kernel(tag: str) -> str:
    return f"```python\nimport torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return kernel_{tag}(x)\n```\n"


def trajectory(
    session_id: str,
    turns: list[tuple[str, float | None, str]],  # (category, speedup over eager, reasoning) per model turn
    *,
    task_source: str = SOURCE,
    device: str = "cuda",
    answer: str | None = None,
    tag: str | None = None,
) -> Trajectory:
    """A session as the runner writes it: each turn's messages built by the real prompt builder."""
    system = prompts.system_prompt(JudgeConfig(), device)
    task_msg = prompts.task_prompt("relu", task_source, shape_block=None, goal="correct")
    done: list[Turn] = []
    for i, (cat, speed, reasoning) in enumerate(turns, 1):
        ok = cat == "ok"
        v = Verdict(
            category=Category(cat),
            task="relu",
            device=device,
            correct=ok,
            legal=ok,
            speedup_eager=speed,
            speedup_compile=speed and speed / 2,
        )
        tag = tag or session_id
        content = (
            answer if (answer is not None and i == len(turns)) else f"Turn {i} of {tag}.\n\n{kernel(f'{tag}_{i}')}"
        )
        t = Turn(
            index=i,
            source="model",
            messages=prompts.build_messages(system, task_msg, done),
            reply=ChatMessage(role="assistant", content=content, reasoning_content=reasoning),
            code="...",
            verdict=v,
            feedback=f"feedback on turn {i}: {cat}",
            started_at=time.time(),
        )
        done.append(t)
    best = max((t for t in done if t.correct), key=lambda t: t.verdict.speedup_eager or 0, default=None)
    return Trajectory(
        kernelfix_version="0",
        session_id=session_id,
        task=TaskInfo(name="relu", path=str(TASK), sha1=str(hash(task_source)), source=task_source),
        model="replay:x",
        settings=Settings(agent=AgentConfig(), judge=JudgeConfig()),
        device=device,
        created_at=0.0,
        updated_at=0.0,
        turns=done,
        totals=totals(done),
        outcome=Outcome(finished=True, success=best is not None, best_turn=best.index if best else None),
    )


def save(root: Path, traj: Trajectory) -> None:
    d = root / traj.session_id
    d.mkdir(parents=True)
    (d / "trajectory.json").write_text(traj.model_dump_json())


R = "Think it through step by step. "
PERFECT = [
    ("compile_error:nvcc", None, R * 9),
    ("ok", 1.0, R * 9),
    ("ok", 1.5, R * 3),
]  # correct, gain 1.5x, short reasoning


@pytest.fixture
def sessions(tmp_path) -> Path:
    root = tmp_path / "sessions"
    save(root, trajectory("keep", PERFECT))
    save(root, trajectory("wrong", [("ok", 1.0, R), ("correctness_error:numerical", None, R)]))  # final turn wrong
    save(root, trajectory("slow", [("ok", 1.0, R), ("ok", 1.1, R)]))  # gain 1.1 < 1.2
    save(root, trajectory("untimed", [("ok", None, R)], device="cpu"))  # no timing, no gain to show
    save(root, trajectory("long", [("ok", 1.0, R), ("ok", 2.0, R * 40)]))  # same task as keep, longer final reasoning
    # the task again, once with Windows newlines, once indented with tabs: two task ids, one text once normalized
    save(
        root, trajectory("dup1", [("ok", 1.0, R), ("ok", 1.3, R)], task_source=SOURCE.replace("\n", "\r\n"), tag="dup")
    )
    save(
        root, trajectory("dup2", [("ok", 1.0, R), ("ok", 1.3, R)], task_source=SOURCE.replace("    ", "\t"), tag="dup")
    )
    return root


def test_records_are_openai_chat_with_loss_flags_and_metadata(sessions, tmp_path):
    out = tmp_path / "data" / "sft.jsonl"
    assert main(["export", str(sessions / "keep"), "--out", str(out)]) == EXIT_OK
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    msgs, meta = rec["messages"], rec["metadata"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert [m.get("weight") for m in msgs if m["role"] == "assistant"] == [0, 0, 1]  # loss on the final answer only
    assert all("weight" not in m for m in msgs if m["role"] != "assistant")
    assert msgs[-1]["reasoning_content"] == R * 3  # the final answer keeps its reasoning
    assert (
        all("reasoning_content" not in m for m in msgs[:-1]) and sum(R in m["content"] for m in msgs) == 0
    )  # earlier reasoning gone
    assert "feedback on turn 1: compile_error:nvcc" in msgs[3]["content"]
    assert meta["task"] == "relu" and meta["session_id"] == "keep"
    assert [t["category"] for t in meta["turns"]] == ["compile_error:nvcc", "ok", "ok"]
    assert (
        meta["final_speedup_eager"] == 1.5
        and meta["final_speedup_compile"] == 0.75
        and meta["first_correct_speedup_eager"] == 1.0
    )
    assert meta["reasoning_tokens"] == tokens.count(R * 3) > 0 and meta["reasoning_tokens_all_turns"] == tokens.count(
        R * 9
    ) * 2 + tokens.count(R * 3)
    assert meta["tokenizer"] == "cl100k_base"  # the encoding litellm ships, offline
    assert (tmp_path / "data" / "ANALYSIS.json").is_file() and (tmp_path / "data" / "ANALYSIS.md").is_file()

    assert main(["export", str(sessions / "keep"), "--out", str(out), "--loss", "all-assistant"]) == EXIT_OK
    msgs = json.loads(out.read_text())["messages"]
    assert [m.get("weight") for m in msgs if m["role"] == "assistant"] == [1, 1, 1]


def test_each_filter_drops_exactly_what_it_should(sessions, tmp_path):
    out = tmp_path / "sft.jsonl"
    assert main(["export", str(sessions), "--out", str(out), "--json"]) == EXIT_OK
    a = json.loads((tmp_path / "ANALYSIS.json").read_text())
    by = {f["name"]: f for f in a["filters"]}
    assert [f["name"] for f in a["filters"]] == ["correct", "speedup_gain", "shortest", "dedup", "leakage"]
    assert by["correct"]["dropped_sessions"] == ["wrong"]
    assert sorted(by["speedup_gain"]["dropped_sessions"]) == ["slow", "untimed"]
    assert by["speedup_gain"]["reasons"] == {"gain below 1.2x": 1, "not timed": 1}
    assert by["shortest"]["dropped_sessions"] == ["long"]  # keep and long share a task; keep reasons less
    assert by["dedup"]["dropped_sessions"] == ["dup2"]  # dup1 and dup2 differ only in whitespace
    assert by["leakage"]["dropped"] == 0 and by["leakage"]["flagged"] == 0
    kept = [json.loads(line)["metadata"]["session_id"] for line in out.read_text().splitlines()]
    assert sorted(kept) == ["dup1", "keep"]
    assert (a["records_in"], a["records_out"], a["sessions_found"]) == (7, 2, 7)
    assert sum(a["histograms"]["completion_tokens"].values()) == 2
    assert a["final_categories_in"] == {"ok": 6, "correctness_error:numerical": 1}
    md = (tmp_path / "ANALYSIS.md").read_text()
    assert "| correct | final turn correct and legal | 7 | 6 | 1 |" in md

    # every filter off: everything is kept
    args = ["--keep-incorrect", "--min-speedup-gain", "0", "--per-task", "0", "--no-dedup"]
    assert main(["export", str(sessions), "--out", str(out), *args]) == EXIT_OK
    assert len(out.read_text().splitlines()) == 7
    # nothing survives: exit 1, and the analysis says why
    assert main(["export", str(sessions / "wrong"), "--out", str(out)]) == EXIT_FAIL
    assert json.loads((tmp_path / "ANALYSIS.json").read_text())["records_out"] == 0


def test_repair_sessions_are_kept_whatever_their_gain_and_analysis_says_why(sessions, tmp_path):
    """A session that began failing and ended correct teaches the repair: the gain filter is for optimization sessions."""
    other = SOURCE + "\n# another task\n"
    # broken -> wrong -> correct, judged where nothing is timed: the README's demo session
    save(
        sessions,
        trajectory(
            "repair_cpu",
            [("compile_error:nvcc", None, R), ("correctness_error:numerical", None, R), ("ok", None, R)],
            device="cpu",
            task_source=other,
        ),
    )
    # repaired, then slower: no gain, still a repair
    save(
        sessions,
        trajectory(
            "repair_slow",
            [("runtime_error:illegal_memory_access", None, R), ("ok", 1.3, R), ("ok", 1.0, R)],
            task_source=other + "#2\n",
        ),
    )
    out = tmp_path / "sft.jsonl"
    assert main(["export", str(sessions), "--out", str(out)]) == EXIT_OK
    kept = {
        json.loads(line)["metadata"]["session_id"]: json.loads(line)["metadata"]
        for line in out.read_text().splitlines()
    }
    assert sorted(kept) == ["dup1", "keep", "repair_cpu", "repair_slow"]
    assert kept["repair_cpu"]["kind"] == kept["keep"]["kind"] == "repair" and kept["dup1"]["kind"] == "optimization"
    a = json.loads((tmp_path / "ANALYSIS.json").read_text())
    gain = next(f for f in a["filters"] if f["name"] == "speedup_gain")
    assert sorted(gain["dropped_sessions"]) == ["slow", "untimed"]  # optimization sessions only
    rules = {f["session"]: (f["kind"], f["kept"], f["rule"]) for f in a["sessions"]}
    assert len(rules) == 9
    assert rules["repair_cpu"] == (
        "repair",
        True,
        "speedup_gain: repair session (turn 1 compile_error:nvcc, correct at turn 3): kept whatever its gain",
    )
    assert rules["dup1"] == ("optimization", True, "speedup_gain: gain 1.30x >= 1.2x")
    assert rules["untimed"] == ("optimization", False, "speedup_gain: not timed")
    assert rules["slow"] == ("optimization", False, "speedup_gain: gain below 1.2x")
    assert rules["wrong"] == ("optimization", False, "correct: final turn correctness_error:numerical")
    assert rules["long"] == (
        "optimization",
        False,
        f"shortest: final reasoning {tokens.count(R * 40)} tokens, 2 of 2 sessions of its task (keeps 1)",
    )
    assert rules["dup2"][1:] == (False, "dedup: duplicate")
    steps = next(f for f in a["sessions"] if f["session"] == "keep")["steps"]
    assert [(st["filter"], st["kept"]) for st in steps] == [
        ("correct", True),
        ("speedup_gain", True),
        ("shortest", True),
        ("dedup", True),
        ("leakage", True),
    ]
    md = (tmp_path / "ANALYSIS.md").read_text()
    assert (
        "| repair_cpu | relu | repair | yes | speedup_gain: repair session (turn 1 compile_error:nvcc, correct at turn 3): kept whatever its gain |"
        in md
    )
    assert "| untimed | relu | optimization | no | speedup_gain: not timed |" in md

    # an unusable session has its row too
    (sessions / "broken").mkdir()
    (sessions / "broken" / "trajectory.json").write_text("{not json")
    assert main(["export", str(sessions), "--out", str(out), "--min-speedup-gain", "0"]) == EXIT_OK
    a = json.loads((tmp_path / "ANALYSIS.json").read_text())
    assert (
        a["sessions"][-1]["rule"].startswith("unusable: unreadable trajectory.json") and not a["sessions"][-1]["kept"]
    )
    assert (
        next(f for f in a["sessions"] if f["session"] == "untimed")["rule"] == "passed every filter (speedup_gain off)"
    )


def test_leakage_is_flagged_and_dropped_on_request(tmp_path):
    root = tmp_path / "s"
    # the final answer restates the whole conversation: its words are the prompt's words
    t = trajectory("leak", PERFECT)
    prompt_words = "\n".join(m.content for m in t.turns[-1].messages)
    save(root, trajectory("leak", PERFECT, answer=prompt_words))
    save(root, trajectory("fine", PERFECT, task_source=SOURCE + "\n# another task\n"))
    out = tmp_path / "sft.jsonl"
    assert main(["export", str(root), "--out", str(out)]) == EXIT_OK
    recs = {json.loads(x)["metadata"]["session_id"]: json.loads(x)["metadata"] for x in out.read_text().splitlines()}
    assert recs["leak"]["leakage"] and recs["leak"]["jaccard"] >= 0.8
    assert not recs["fine"]["leakage"] and recs["fine"]["jaccard"] < 0.8
    assert json.loads((tmp_path / "ANALYSIS.json").read_text())["leakage_flagged"] == 1
    assert main(["export", str(root), "--out", str(out), "--drop-leakage"]) == EXIT_OK
    assert [json.loads(x)["metadata"]["session_id"] for x in out.read_text().splitlines()] == ["fine"]


def test_normalization_and_keys():
    assert normalize("  a\r\nb\rc \t  d\n\n\n\n e  ") == "a\nb\nc d\n\n e"
    assert dedup_key("p  q\r\n", "c") == dedup_key("p q", "c  ") != dedup_key("p q", "d")
    assert word_jaccard("The cat sat", "the CAT sat down") == 0.75 and word_jaccard("", "") == 0.0


def test_bad_input_and_unusable_sessions(tmp_path, capsys):
    assert main(["export", str(tmp_path / "nope"), "--out", str(tmp_path / "x.jsonl")]) == EXIT_USAGE
    assert "no such session" in capsys.readouterr().err
    root = tmp_path / "s"
    save(root, trajectory("keep", PERFECT))
    (root / "broken").mkdir()
    (root / "broken" / "trajectory.json").write_text("{not json")
    assert main(["export", str(root), "--out", str(tmp_path / "x.jsonl"), "--json"]) == EXIT_OK
    a = json.loads(capsys.readouterr().out)
    assert a["records_out"] == 1 and a["unusable"][0]["why"].startswith("unreadable trajectory.json")


def test_parquet(sessions, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "sft.parquet"
    assert main(["export", str(sessions), "--out", str(out), "--min-speedup-gain", "0", "--per-task", "0"]) == EXIT_OK
    table = pq.read_table(out)
    rows = table.to_pylist()
    assert len(rows) == table.num_rows == 5  # wrong dropped, untimed and slow kept (gain off), dup2 deduped
    assert table.schema.field("metadata").type.field("final_speedup_eager").type == "double"
    final = rows[0]["messages"][-1]
    assert final["role"] == "assistant" and final["weight"] == 1


def test_a_turn_the_machine_failed_to_judge_is_never_a_model_mistake(tmp_path):
    """Sessions from before machine faults were retried hold infra turns: the SFT record ends before
    the first one, and RL gets no reward for it nor for a prompt that carries its feedback."""
    from kernelfix.agent.export import rl
    from kernelfix.agent.export.sft_records import record

    traj = trajectory(
        "faulted", [("compile_error:nvcc", None, R), ("ok", 1.2, R), ("infra:gpu_busy", None, R), ("ok", 1.5, R)]
    )
    rec = record(traj, session_dir="x")
    assert rec.metadata.final_turn == 2 and rec.metadata.final_category == "ok"
    assert all("infra" not in (m.content or "") for m in rec.messages)
    assert [r.metadata.turn for r in rl.records(traj, session_dir="x")] == [1, 2]
    first = trajectory("first", [("infra:worker", None, R), ("ok", 1.5, R)])
    assert record(first, session_dir="x") is None
    # infra:no_gpu is no fault: the candidate was built for real, and that build is the feedback
    built = trajectory("built", [("infra:no_gpu", None, R), ("ok", 1.5, R)], device="cpu")
    assert record(built, session_dir="x").metadata.final_turn == 2
