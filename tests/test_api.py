"""kernelfix.Judge, the judge as a library: a candidate as a path, as code, as a model's reply;
async; from several threads at once; the reference kept warm between calls; the task as text.

One judge for the session (conftest's relu_cpu_judge: the ReLU task on the CPU, Triton in its interpreter), real workers.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from conftest import CORPUS

import kernelfix
from kernelfix.library.api import Judge
from kernelfix.library.sources import candidate_source
from kernelfix.tools.task import TaskError

TASK = CORPUS / "tasks" / "relu.py"
CANDS = CORPUS / "candidates"
OK = CANDS / "triton_relu_ok.py"


@pytest.fixture
def judge(relu_cpu_judge):
    return relu_cpu_judge  # kernelfix.Judge(TASK, device="cpu", standby=1), for the session (conftest.py)


def test_the_public_name_is_the_api_and_importing_kernelfix_stays_light():
    import subprocess
    import sys

    assert kernelfix.Judge is Judge and kernelfix.TaskError is TaskError
    out = subprocess.run(
        [sys.executable, "-c", "import sys, kernelfix; kernelfix.Judge; print('torch' in sys.modules)"],
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == "False", out.stderr  # the class is there without torch in the caller


def test_a_path_code_and_a_reply_get_the_same_verdict_and_the_reference_stays_warm(judge):
    code = OK.read_text()
    judge.warm()  # the reference, and a candidate worker started ahead (standby=1)
    (ready,) = judge._ready
    assert judge.engine.has_standby(ready)
    first = judge.evaluate(OK)  # a Path
    judge._await_standby()  # the next one starts after the verdict went back
    assert (
        Path(first.logs_dir).parent == ready and len(judge._ready) == 1 and judge._ready[0] != ready
    )  # used, and another readied
    worker = judge.engine.ref._worker
    assert first.ok and first.task == "relu" and first.device == "cpu" and first.candidate_sha1
    # Text: a model's reply, profiled: profiling is this evaluation's choice (on the CPU its report says why there is none).
    by_reply = judge.evaluate(f"Here is the kernel.\n\n```python\n{code}```\n", kind="reply", profile=True)
    assert by_reply.ok and by_reply.candidate_sha1 == first.candidate_sha1
    assert first.profile is None  # the judge's own config: off
    assert by_reply.profile is not None and "needs a CUDA GPU" in (by_reply.profile.note or "")
    assert judge.engine.ref._worker is worker and worker.alive  # one reference worker served every call


def test_what_a_text_is_and_a_mistyped_path(judge):
    assert candidate_source(str(OK)) == (OK.read_text(), "triton_relu_ok.py")  # a str naming a file is read
    assert candidate_source("x = 1\n") == ("x = 1\n", "candidate.py")
    assert candidate_source("text\n```python\nx = 1\n```\n")[1] == "reply.md"
    # A str naming an existing file is read whatever the kind says (the kind then says what the file holds).
    assert candidate_source(str(OK), kind="code") == (OK.read_text(), "candidate.py")
    assert candidate_source(str(OK), kind="reply") == (OK.read_text(), "reply.md")
    with pytest.raises(FileNotFoundError, match="candidate file not found"):
        judge.evaluate("no_such_candidate.py")
    assert judge.evaluate("a reply with no code at all", kind="reply").category.value == "format_error:no_code"
    assert judge.evaluate(str(OK), kind="code").ok  # a str naming a file is read, kind or not
    # Text that is never read (a server's, a reward's): judged as the text it is, and the verdict says it looks like a path.
    v = judge.evaluate_text("examples/candidates/relu_triton.py", kind="code")
    assert (
        v.category.value == "format_error:no_model_new"
        and "'examples/candidates/relu_triton.py', which looks like a file path" in v.message
    )
    with pytest.raises(TaskError) as e:  # a task given as text is said of that text, not of a file the user never had
        Judge("import torch\nx = 1\n", device="cpu")
    assert str(e.value).startswith("task (sent as text) lacks Model") and ".py" not in str(e.value)


def test_aevaluate_leaves_the_event_loop_free(judge):
    loop_ran = threading.Event()

    async def main():
        async def mark():
            loop_ran.set()

        def on_event(event):  # in the judging thread: the loop must run meanwhile
            if not loop_ran.is_set():
                asyncio.run_coroutine_threadsafe(mark(), loop)
                assert loop_ran.wait(60)

        loop = asyncio.get_running_loop()
        code = judge.aevaluate((CANDS / "tampering.py").read_text(), kind="code", on_event=on_event)
        return await asyncio.gather(code, judge.aevaluate(CANDS / "syntax_error.py"))

    static, syntax = asyncio.run(main())
    assert (
        loop_ran.is_set()
        and static.category.value == "cheating:tampering"
        and syntax.category.value == "compile_error:syntax"
    )


def test_threads_share_one_judge_and_each_gets_its_own_verdict(judge):
    names = ["triton_relu_ok.py", "triton_wrong_values.py", "no_model_new.py", "tampering.py"]
    verdicts: dict[str, object] = {}

    def one(name: str) -> None:
        verdicts[name] = judge.evaluate(CANDS / name)

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = {n: v.category.value for n, v in verdicts.items()}
    assert got == {
        "triton_relu_ok.py": "ok",
        "triton_wrong_values.py": "correctness_error:numerical",
        "no_model_new.py": "format_error:no_model_new",
        "tampering.py": "cheating:tampering",
    }


def test_a_task_as_text_named_or_not_and_files_dropped(tmp_path):
    text = TASK.read_text()
    with Judge(text, name="my_relu", device="cpu", keep_files=False) as j:
        v = j.evaluate(CANDS / "syntax_error.py")
        assert v.category.value == "compile_error:syntax" and v.task == "my_relu" and v.logs_dir is None
        j.engine._runs.exits.wait()  # the worker ends after its verdict went back
        assert not list((j.engine.root / "evals").iterdir())  # then the evaluation's files go
        root = j.root
    assert not root.exists()  # its temporary directory too, once closed
    with pytest.raises(RuntimeError, match="closed"):
        j.evaluate(OK)
    with Judge(text, device="cpu", workdir=tmp_path / "w") as unnamed:
        assert unnamed.task.name.startswith("task_") and unnamed.task.path.parent == tmp_path / "w" / "task"
    with pytest.raises(ValueError, match="task name"):
        Judge(text, name="../up", device="cpu")
    with pytest.raises(TaskError, match="lacks Model"):
        Judge("import torch\nx = 1\n", device="cpu")
    with pytest.raises(TaskError, match="not found"):
        Judge(tmp_path / "nothing.py")


def test_a_task_that_does_not_import_raises_task_error_from_evaluate():
    with Judge(CORPUS / "tasks" / "broken_import.py", device="cpu") as j:
        with pytest.raises(TaskError, match="this_module_does_not_exist"):
            j.evaluate(OK)


def test_bad_settings_are_refused_before_anything_runs():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        Judge(TASK, device="tpu")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Judge(TASK, config={"trials": 0})
    with Judge(TASK, backward=True, device="cpu") as j:
        assert j.config.backward is True and j.config.device == "cpu"


def test_an_instant_verdict_never_waits_for_the_reference(judge):
    """A format or static failure needs nothing of the reference: its verdict comes while the reference is busy
    (its lock held, as during its start or another evaluation's request; a served format error must not wait)."""
    got = []
    with judge.engine.ref._lock:
        t = threading.Thread(target=lambda: got.append(judge.evaluate(CANDS / "tampering.py")))
        t.start()
        t.join(60)
        assert not t.is_alive(), "the verdict waited for the reference's lock"
    assert got[0].category.value == "cheating:tampering"


def test_a_judge_closed_before_its_reference_started_starts_none():
    """close() while the reference's background start still waits for its lock: no worker starts after it
    (one did, and outlived the judge: a server closes judges it evicts, a trainer's reward closes its own)."""
    with Judge(TASK, device="cpu") as j:
        ref = j.engine.ref
        with ref._lock:  # the start thread waits here, as behind a busy request
            ref.start_background()
            j.close()
        ref._start_thread.join(60)
        assert ref._worker is None and not (j.engine.root / "reference" / "reference.spec.json").exists()
        assert "closed" in str(ref._start_error)
