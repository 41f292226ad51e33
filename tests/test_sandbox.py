"""The child-process sandbox: limits, group kill, output caps, the message pipe, scrubbed env."""

import os
import sys
import time

from kernelfix.sandbox import Limits, run_child, scrubbed_env


def py(code: str, tmp_path, **limits):
    return run_child([sys.executable, "-c", code], cwd=tmp_path, env=scrubbed_env(), limits=Limits(**limits))


def test_messages_arrive_on_the_pipe_not_stdout(tmp_path):
    code = "import os, json\nprint('noise')\nfd = int(os.environ['KERNELFIX_MSG_FD'])\nos.write(fd, b'{\"type\": \"result\", \"x\": 1}\\n')"
    out = py(code, tmp_path)
    assert out.returncode == 0 and out.stdout_tail.strip() == "noise"
    assert out.last("result")["x"] == 1 and out.last("result")["_t"] >= 0


def test_timeout_kills_the_whole_group(tmp_path):
    marker = tmp_path / "grandchild_alive"
    grandchild = tmp_path / "grandchild.py"
    grandchild.write_text(f"import time\ntime.sleep(3)\nopen({str(marker)!r}, 'w').write('x')\n")
    code = f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, {str(grandchild)!r}])\ntime.sleep(60)\n"
    t0 = time.monotonic()
    out = py(code, tmp_path, wall_s=1.5)
    assert out.timed_out and time.monotonic() - t0 < 10
    time.sleep(4)
    assert not marker.exists(), "a grandchild outlived the timeout"


def test_huge_output_is_drained_and_capped(tmp_path):
    out = py("import sys\nfor _ in range(2000):\n    sys.stdout.write('x' * 100000)\n", tmp_path, output_tail_bytes=1000)
    assert out.returncode == 0 and out.stdout_bytes == 200_000_000
    assert len(out.stdout_tail) == 1000


def test_memory_limit_kills(tmp_path):
    code = "b = []\nwhile True:\n    b.append(bytearray(50 << 20))\n"
    out = py(code, tmp_path, wall_s=60, memory_bytes=400 << 20)
    assert out.memory_exceeded and out.peak_rss_bytes > 400 << 20


def test_signals_are_reported(tmp_path):
    out = py("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", tmp_path)
    assert out.signal == "SIGSEGV" and out.returncode < 0


def test_cpu_limit(tmp_path):
    out = py("while True:\n    pass\n", tmp_path, wall_s=30, cpu_s=1)
    assert out.signal in ("SIGXCPU", "SIGKILL") and not out.timed_out


def test_garbage_on_the_pipe_is_recorded_not_fatal(tmp_path):
    code = "import os\nfd = int(os.environ['KERNELFIX_MSG_FD'])\nos.write(fd, b'not json\\n[1, 2]\\n')"
    out = py(code, tmp_path)
    assert [m["type"] for m in out.messages] == ["garbage", "garbage"]


def test_env_is_scrubbed_of_secrets():
    env = scrubbed_env({"KERNELFIX_X": "1"}, base={"PATH": "/bin", "OPENAI_API_KEY": "sk-1", "HOME": "/root", "CUDA_VISIBLE_DEVICES": "0", "GITHUB_TOKEN": "t", "TRITON_API_TOKEN": "t"})
    assert env["PATH"] == "/bin" and env["CUDA_VISIBLE_DEVICES"] == "0" and env["KERNELFIX_X"] == "1"
    assert "OPENAI_API_KEY" not in env and "GITHUB_TOKEN" not in env and "TRITON_API_TOKEN" not in env and "HOME" not in env


def test_launch_failure_is_reported(tmp_path):
    out = run_child(["/nonexistent/binary"], cwd=tmp_path, env=scrubbed_env(), limits=Limits())
    assert out.returncode != 0
    assert os.path.exists(tmp_path)
