"""`kernelfix eval` as a user runs it: exit codes, JSON, clear errors."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import ok_eval

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "tests/corpus/tasks/relu.py"
CANDS = ROOT / "tests/corpus/candidates"


def kernelfix(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kernelfix", *args], capture_output=True, text=True, cwd=cwd, timeout=600
    )


def test_help_explains_commands_and_exit_codes():
    out = kernelfix("--help")
    assert out.returncode == 0 and "eval" in out.stdout and "Exit codes" in out.stdout
    out = kernelfix("eval", "--help")
    assert out.returncode == 0 and "ModelNew" in out.stdout and "--json" in out.stdout


def test_ok_verdict_as_json_exits_zero(tmp_path_factory):
    # `kernelfix eval relu.py triton_relu_ok.py --device cpu --json`, run once for this test and test_cli_imports.py's
    # (which reads the modules the same process loaded): one judge's start, not two
    out = ok_eval(tmp_path_factory)
    assert out.returncode == 0, out.stderr
    v = json.loads(out.stdout)
    for field in (
        "category",
        "compiled",
        "correct",
        "legal",
        "speedup_eager",
        "speedup_compile",
        "timings",
        "feedback",
    ):
        assert field in v
    assert v["category"] == "ok" and v["compiled"] and v["correct"] and v["legal"]
    assert v["speedup_eager"] is None  # nothing is timed on cpu
    trials = v["correctness"]["trials"]
    assert len([t for t in trials if t["variant"] is None]) == 5  # the default --trials, on the task's own inputs
    assert [t["variant"] for t in trials if t["variant"]] == ["scaled", "shifted", "heavy_tailed"]


def test_failing_verdict_exits_one_and_keeps_logs():
    out = kernelfix("eval", str(TASK), str(CANDS / "triton_wrong_values.py"), "--device", "cpu")
    assert out.returncode == 1
    assert "correctness_error:numerical" in out.stdout and "max abs error" in out.stdout
    kept = re.search(r"files\s+(\S+) \(logs and build files\)", out.stdout)  # kept: the verdict is not ok
    assert kept and Path(kept.group(1)).is_dir()


def test_reply_file_is_accepted():
    out = kernelfix("eval", str(TASK), str(CANDS / "reply_no_code.md"), "--device", "cpu", "--json")
    assert out.returncode == 1 and json.loads(out.stdout)["category"] == "format_error:no_code"


@pytest.mark.parametrize(
    "task,needle",
    [
        ("tests/corpus/tasks/broken_import.py", "this_module_does_not_exist"),
        ("tests/corpus/tasks/missing_inputs.py", "get_inputs"),
        ("tests/corpus/tasks/nope.py", "not found"),
    ],
)
def test_bad_task_is_a_usage_error_naming_the_problem(task, needle):
    out = kernelfix("eval", task, str(CANDS / "triton_relu_ok.py"), "--device", "cpu")
    assert out.returncode == 2
    assert needle in out.stderr and "Traceback" not in out.stderr


def test_missing_candidate_and_bad_flags_are_usage_errors():
    assert kernelfix("eval", str(TASK), "missing.py", "--device", "cpu").returncode == 2
    assert kernelfix("eval", str(TASK)).returncode == 2
    assert kernelfix("eval", str(TASK), str(CANDS / "triton_relu_ok.py"), "--device", "tpu").returncode == 2


def test_invalid_config_is_a_usage_error(tmp_path):
    (tmp_path / "kernelfix.toml").write_text("[judge]\natoll = 0.1\n")
    out = kernelfix("eval", str(TASK), str(CANDS / "triton_relu_ok.py"), "--device", "cpu", cwd=tmp_path)
    assert out.returncode == 2 and "atoll" in out.stderr
