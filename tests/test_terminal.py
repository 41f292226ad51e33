"""The terminal as a person reads it: the real commands, on the CPU, as a new user meets them.

A GPU asked for where torch sees none is refused at once; settings errors name the flag or key, the value,
what is allowed, and the nearest known key; the verdict is written for a person (-v for everything, -q for
the category); every command takes -v/-q; lines wrap between words on a terminal and not at all into a
pipe; tune's keep lines name the statistic that decided; the repository ignores what the README's
commands write, and the README opens as an introduction.
"""

from __future__ import annotations

import argparse
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest
from agent_support import TASK, write_replay
from conftest import CORPUS, REPO_ROOT

from kernelfix.cli import build_parser, main
from kernelfix.tools.gpu.lease import cuda_available

CANDS = CORPUS / "candidates"
ENV = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
ENV.pop("COLUMNS", None)


def run(
    *args: str, cwd: Path = REPO_ROOT, env: dict | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kernelfix", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env or ENV,
        timeout=timeout,
    )


def one_error(argv: list[str], capsys) -> str:
    """The command (in this process: the same code `kernelfix` runs) ends in a usage error: exit 2, nothing on
    stdout, one line on stderr, no traceback, no pydantic."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and lines[0].startswith("kernelfix: error: "), err
    assert "Traceback" not in err and "pydantic" not in err and "validation error" not in err
    return lines[0]


# --------------------------------------------------------------------------- 1. --device cuda without a GPU


@pytest.mark.skipif(cuda_available(), reason="torch sees a GPU here")
@pytest.mark.parametrize(
    "argv",
    [
        ["eval", str(TASK), str(CANDS / "triton_relu_ok.py")],
        ["optimize", str(TASK), "--model", "replay:x.jsonl"],
        ["batch", str(TASK), "--model", "replay:x.jsonl"],
        ["baseline", str(TASK)],
        ["serve", "--port", "0"],
        ["tune", "examples/models/tiny_transformer.py", "--rank-only"],
        ["swap", "sessions/none"],
    ],
    ids=lambda a: a[0],
)
def test_a_gpu_torch_cannot_see_is_refused_before_anything_runs(argv, capsys):
    line = one_error([*argv, "--device", "cuda"], capsys)
    assert (
        line.startswith("kernelfix: error: --device cuda: torch ")
        and "sees no GPU" in line
        and "use --device cpu" in line
    )


@pytest.mark.skipif(cuda_available(), reason="torch sees a GPU here")
def test_the_real_command_says_it_in_one_line_at_once():
    out = run("eval", str(TASK), str(CANDS / "triton_relu_ok.py"), "--device", "cuda", timeout=60)
    assert (
        out.returncode == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1 and "sees no GPU" in out.stderr
    )


def test_what_torch_sees_is_said_for_each_cause(monkeypatch):
    from kernelfix.tools.gpu import lease

    monkeypatch.setattr(lease, "_torch_built_for_cuda", lambda: False)
    assert lease.cuda_problem().endswith("is a CPU-only build and sees no GPU") and not lease.cuda_available()
    monkeypatch.setattr(lease, "_torch_built_for_cuda", lambda: True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert lease.cuda_problem() == "CUDA_VISIBLE_DEVICES='' hides every GPU from torch"


# --------------------------------------------------------------------------- 2. settings in the user's words


def test_bad_flags_and_config_keys_are_said_in_the_users_words(tmp_path, monkeypatch, capsys):
    ok = [str(TASK), str(CANDS / "triton_relu_ok.py")]
    assert one_error(["eval", *ok, "--trials", "0"], capsys) == "kernelfix: error: --trials 0: must be at least 1"
    assert one_error(
        ["optimize", str(TASK), "--model", "replay:x.jsonl", "--max-turns", "0", "--device", "cpu"], capsys
    ).endswith("--max-turns 0: must be at least 1")
    assert one_error(["tune", "x.py", "--top", "0", "--rank-only"], capsys).endswith("--top 0: must be at least 1")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kernelfix.toml").write_text("[judge]\ntrails = 3\n")
    line = one_error(["eval", *ok, "--device", "cpu"], capsys)
    assert line.endswith("kernelfix.toml: [judge] trails: no such setting; did you mean trials?")
    (tmp_path / "kernelfix.toml").write_text('[judge]\nprecision = "loud"\n[judge.build]\ncahce = true\n[jduge]\n')
    assert main(["eval", *ok, "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "pydantic" not in err and "validation error" not in err
    assert "[judge] precision = 'loud': must be one of 'warn', 'fail' or 'off'" in err
    assert (
        "[judge.build] cahce: no such setting; did you mean cache?" in err
        and "[jduge]: no such setting; did you mean judge?" in err
    )
    (tmp_path / "kernelfix.toml").unlink()
    (tmp_path / "m.jsonl").write_text('{"taks": "a.py"}\n')
    assert main(["batch", "m.jsonl", "--model", "replay:x", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert '"taks": no such setting; did you mean task?' in err and "pydantic" not in err


# --------------------------------------------------------------------------- 4, 5. the verdict for a person, -v and -q


@pytest.fixture(scope="module")
def evals(tmp_path_factory):
    """Three real evaluations side by side: an ok kernel as a person sees it, a wrong one with -v, a format error with -q."""
    cwd = tmp_path_factory.mktemp("evals")
    argv = {
        "ok": ["eval", str(TASK), str(CANDS / "triton_relu_ok.py"), "--device", "cpu"],
        "wrong -v": ["eval", str(TASK), str(CANDS / "triton_wrong_values.py"), "--device", "cpu", "-v"],
        "no ModelNew -q": ["eval", str(TASK), str(CANDS / "no_model_new.py"), "--device", "cpu", "-q"],
    }
    procs = {
        k: subprocess.Popen(
            [sys.executable, "-m", "kernelfix", *a],
            cwd=cwd,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k, a in argv.items()
    }
    outs = {}
    for k, p in procs.items():
        out, err = p.communicate(timeout=600)
        outs[k] = subprocess.CompletedProcess(argv[k], p.returncode, out, err)
    return outs


def test_an_ok_verdict_reads_for_a_person_and_names_no_folder_that_is_gone(evals):
    out = evals["ok"]
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert re.search(r"╭─ ok ─", text) and "OK ok" not in text
    assert re.search(r"result\s+correct on 8/8 trials and legal; not timed", text)
    assert "files" not in text and "logs" not in text and "kernelfix-eval-" not in text  # removed when the command ends
    assert "cand_handoff" not in text and "inside stages" not in text  # the judge's timers: -v
    assert "Reply with" not in text and "feedback (what the model reads next)" not in text  # the model's text: -v
    assert "-v: every check" in text


def test_a_failing_verdict_with_v_has_every_check_the_timers_and_the_models_feedback(evals):
    out = evals["wrong -v"]
    assert out.returncode == 1, out.stderr
    text = out.stdout
    assert "correctness_error:numerical" in text and "inside stages" in text and "correctness.forward" in text
    assert (
        "feedback (what the model reads next)" in text
        and "rel error norm" in text
        and "Wrong output on trial 0" in text
    )
    kept = re.search(r"files\s+(\S+) \(logs and build files\)", text)
    assert kept and Path(kept.group(1)).is_dir()  # kept: the verdict is not ok


def test_q_prints_the_category_alone(evals):
    out = evals["no ModelNew -q"]
    assert out.returncode == 1 and out.stdout == "format_error:no_model_new\n" and out.stderr == ""


def test_every_command_takes_v_and_q_and_says_what_they_change():
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert {
        "eval",
        "optimize",
        "resume",
        "sessions",
        "batch",
        "export",
        "capture",
        "swap",
        "baseline",
        "serve",
        "tune",
    } <= set(sub.choices)
    for name, parser in sub.choices.items():
        flags = {s: a for a in parser._actions for s in a.option_strings}
        assert {"-v", "--verbose", "-q", "--quiet"} <= set(flags), name
        assert flags["-v"].help.startswith("more detail: ") and flags["-q"].help.startswith("less: "), name
    assert (
        sub.choices["serve"].parse_args(["-q"]).verbosity == -1
        and sub.choices["serve"].parse_args(["-v"]).verbosity == 1
    )


# --------------------------------------------------------------------------- 5, 6. turn lines and tables: whole words, unwrapped pipes


@pytest.fixture(scope="module")
def long_message_session(tmp_path_factory):
    """A headless session of one turn whose verdict's message is longer than a turn line shows."""
    root = tmp_path_factory.mktemp("sessions")
    words = (
        "this line of plain words is no python at all and it goes on well past the hundred characters a turn line shows"
    )
    replay = write_replay(root / "r.jsonl", [f"Here.\n\n```python\nimport torch\n{words}\n```\n"] * 2)
    return root, replay, words


def _headless(root: Path, replay: Path, name: str, *flags: str, capsys) -> str:
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
            "1",
            "--session-dir",
            str(root / name),
            *flags,
        ]
    )
    assert rc == 1
    return capsys.readouterr().out


def test_turn_lines_cut_between_words_and_v_and_q(long_message_session, capsys):
    root, replay, words = long_message_session
    out = _headless(root, replay, "relu-with-a-long-name-demo2", capsys=capsys)
    (line,) = [x for x in out.splitlines() if x.startswith("turn  1")]
    shown = re.search(r"invalid syntax: (.*?)\.\.\.  \[judge", line).group(1)
    assert words.startswith(shown) and words[len(shown)] == " "  # cut at a space, never inside a word
    assert "session summary" in out
    verbose = _headless(root, replay, "v", "-v", capsys=capsys)
    assert f"    line 2: invalid syntax: {words}" in verbose  # -v: the message whole, under its turn line
    quiet = _headless(root, replay, "q", "-q", capsys=capsys)
    assert "turn  1" not in quiet and "kernelfix relu" not in quiet and "session summary" in quiet


def _on_a_terminal(argv: list[str], columns: int) -> str:
    """The command's stdout on a pseudo-terminal ``columns`` wide, escape codes removed."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelfix", *argv],
        cwd=REPO_ROOT,
        env={**ENV, "COLUMNS": str(columns), "TERM": "xterm"},
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.PIPE,
    )
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        assert ready, "no output"
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(60)
    os.close(master)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode()).replace("\r", "")


def test_sessions_list_piped_is_one_line_per_session_and_on_a_terminal_never_cut_mid_word(long_message_session, capsys):
    root, replay, _ = long_message_session
    if not (root / "relu-with-a-long-name-demo2").exists():  # run on its own: the session the test above made
        _headless(root, replay, "relu-with-a-long-name-demo2", capsys=capsys)
    path = str(root / "relu-with-a-long-name-demo2")
    piped = run("sessions", str(root), "--list", "-v")
    assert piped.returncode == 0, piped.stderr
    (row,) = [x for x in piped.stdout.splitlines() if path in x]  # the whole path, on its row: nothing wrapped at 80
    assert "max turns reached" in row and len(row) > 120
    assert run("sessions", str(root), "-q").stdout.splitlines()[0].startswith(str(root))
    for columns in (60, 100):
        screen = _on_a_terminal(["sessions", str(root), "--list", "-v"], columns)
        assert path in screen, screen  # a path is never folded: a line runs over only to keep one whole
        assert all(len(x) <= columns or x.split()[-1].startswith(str(root)) for x in screen.splitlines()), screen
        words = {w for x in screen.splitlines() for w in x.split()}
        assert {"reached:", "finished", "replay:r.jsonl"} <= words, screen  # each word whole


# --------------------------------------------------------------------------- 9. tune's keep lines agree with their numbers


def test_tunes_lines_name_the_statistic_that_decided_and_agree_with_it():
    from kernelfix.tune.decide import compare, explain
    from kernelfix.tune.text import comparison_line
    from kernelfix.tune.tune_config import TuneConfig

    cfg = TuneConfig()
    # The issue's case: the rounds' median time went down, but the swapped model lost most paired rounds
    # (six rounds a hair slower, four far faster while the machine was busy).
    before = [90.0, 95.0, 100.0, 105.0, 110.0, 115.0, 300.0, 300.0, 300.0, 300.0]
    after = [b * 1.001 for b in before[:6]] + [50.0] * 4
    eager = compare("eager", before, after, 3, cfg)
    compiled = compare("compiled", before, [0.9 * b for b in before], 3, cfg)
    assert (
        eager.after.median_ms < eager.before.median_ms and eager.speedup < 1
    )  # the medians and the decisive ratio disagree
    kept, why = explain(eager, compiled, cfg)
    assert not kept and why.startswith("slower eager in most paired rounds (round-by-round speedup's median below 1x)")
    assert f"median {eager.speedup:.4g}x" in why and "1x eager" not in why
    line = comparison_line(eager, cfg)
    assert (
        "112.500 ms -> 92.593 ms median of 10 rounds" in line
        and f"round-by-round speedup: median {eager.speedup:.4g}x" in line
    )
    assert f"{eager.speedup:.4g}" == "0.999"


# --------------------------------------------------------------------------- 10. the repository and the README


def test_outputs_are_ignored_and_the_readme_opens_as_an_introduction():
    ignored = subprocess.run(
        ["git", "check-ignore", "kernelfix-tune/report.json", "kernelfix-batch/x", "sessions/x", "sft/data.jsonl"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert ignored.stdout.split() == ["kernelfix-tune/report.json", "kernelfix-batch/x", "sessions/x", "sft/data.jsonl"]
    readme = (REPO_ROOT / "README.md").read_text().splitlines()
    assert len(readme) <= 200
    first_screen = "\n".join(readme[:45])
    assert "## Quick start" in first_screen and "--index-url https://download.pytorch.org/whl/cpu" in first_screen
    assert not re.search(r"20\d\d-\d\d-\d\d", first_screen) and "bytecode" not in first_screen
    for link in re.findall(r"\]\((docs/[^)#]+)", "\n".join(readme)):
        assert (REPO_ROOT / link).is_file(), link
