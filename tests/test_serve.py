"""`kernelfix serve`: the token on every request, loopback by default, bad input as a clear 4xx that
never takes the server down, a hostile candidate held by the sandbox, a full queue as 503 with nothing
lost, warm judges reused per task and routed across GPUs, and the trainers' rewards through it.

A real uvicorn on 127.0.0.1 in a thread, real judges on the CPU (one task's judge for the module). The
queue and routing tests hold requests mid-judgement with judges that wait on the test (the HTTP, the
admission and the routing are the server's own), so what they check does not depend on timing.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import CORPUS, REPO_ROOT

pytest.importorskip(
    "fastapi", reason="the serve extra (fastapi, uvicorn) is not installed (the GPU machine has neither)"
)

from kernelfix.cli import build_parser  # noqa: E402
from kernelfix.cli.serve import bind_warning, listen  # noqa: E402
from kernelfix.library.judge_pool import JudgePool, gpu_slots  # noqa: E402
from kernelfix.serve.app import GPU_HEADER, create_app  # noqa: E402
from kernelfix.tools.config import JudgeConfig  # noqa: E402
from kernelfix.tools.verdict import Verdict  # noqa: E402

uvicorn = pytest.importorskip("uvicorn")

TASK = (CORPUS / "tasks" / "relu.py").read_text()
BROKEN_TASK = (CORPUS / "tasks" / "broken_import.py").read_text()
CANDS = CORPUS / "candidates"
OK_PATH = CANDS / "triton_relu_ok.py"
OK = OK_PATH.read_text()
TOKEN = "test-token-" + "x" * 24


class Served:
    """An app on 127.0.0.1, any free port, in a thread (uvicorn as `kernelfix serve` runs it)."""

    def __init__(self, app):
        sock = listen("127.0.0.1", 0)
        self.url = "http://127.0.0.1:%d" % sock.getsockname()[1]
        self.address = sock.getsockname()[0]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        for _ in range(600):
            if self.server.started:
                break
            time.sleep(0.05)
        assert self.server.started, "the server did not start"
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=300)

    def stop(self) -> None:
        self.http.close()
        self.server.should_exit = True
        self.thread.join(120)


@pytest.fixture(scope="module")
def served():
    pool = JudgePool(JudgeConfig(device="cpu", run_timeout_s=120), per_gpu=2, queue=8)
    s = Served(create_app(pool, token=TOKEN, max_body_bytes=1 << 20, max_batch=8))
    s.pool = pool
    yield s
    s.stop()  # the app's shutdown closes the pool


def body(candidate: str, task: str = TASK, **extra) -> dict:
    return {"task": task, "candidate": candidate, **extra}


# --------------------------------------------------------------------------- the token, the address


def test_every_request_needs_the_token(served):
    bare = httpx.Client(base_url=served.url, timeout=60)
    for method, path in (
        ("GET", "/v1/health"),
        ("POST", "/v1/evaluate"),
        ("POST", "/v1/batch"),
        ("GET", "/nowhere"),
        ("GET", "/docs"),
    ):
        for headers in (
            {},
            {"Authorization": "Bearer wrong-token-wrong-token"},
            {"Authorization": f"Basic {TOKEN}"},
            {"Authorization": TOKEN},
        ):
            r = bare.request(method, path, headers=headers, json=body(OK))
            assert r.status_code == 401 and r.json()["error"] == "unauthorized", (method, path, headers)
            assert r.headers["www-authenticate"].startswith("Bearer")
    assert served.http.get("/v1/health").status_code == 200
    assert served.http.get("/openapi.json").status_code == 404  # no schema or docs pages, even with the token
    bare.close()


def test_it_listens_on_loopback_unless_told_and_then_warns(served):
    args = build_parser().parse_args(["serve"])
    assert args.host == "127.0.0.1" and served.address == "127.0.0.1"
    for host in ("127.0.0.1", "::1", "localhost"):
        assert bind_warning(host, tls=False) is None
    loud = bind_warning("0.0.0.0", tls=False)
    assert "WARNING" in loud and "plain HTTP" in loud
    assert "plain HTTP" not in bind_warning("192.168.1.5", tls=True)


# --------------------------------------------------------------------------- verdicts


def test_a_verdict_per_request_and_one_warm_judge_per_task(served):
    from kernelfix.serve.client import JudgeClient, ServeError

    r = served.http.post("/v1/evaluate", json=body(OK, task_name="relu"))
    assert r.status_code == 200, r.text
    v = Verdict.model_validate(r.json())
    assert v.ok and v.task == "relu" and v.logs_dir is None  # the server's files are not the client's
    with JudgeClient(
        served.url, token=TOKEN
    ) as client:  # paths read on the client's side, sent as text, named by the file
        again = client.evaluate(CORPUS / "tasks" / "relu.py", str(CANDS / "triton_wrong_values.py"), kind="code")
        assert again.category.value == "correctness_error:numerical" and again.task == "relu"
        # One request: no verdict is the call's error. A batch: each item its Outcome, a verdict or its own error.
        with pytest.raises(ServeError, match="422 task_error: task 'broken_import': ModuleNotFoundError"):
            client.evaluate(CORPUS / "tasks" / "broken_import.py", OK_PATH)
        good, bad = client.evaluate_many(
            [(CORPUS / "tasks" / "relu.py", OK_PATH), (CORPUS / "tasks" / "broken_import.py", OK_PATH)]
        )
        assert good.verdict.ok and good.error is None and bad.verdict is None and bad.error.code == "task_error"
    slot = served.http.get("/v1/health").json()["slots"][0]
    assert slot["judges"].count("relu") == 1  # the second request found the first's judge warm


def test_a_batch_answers_each_item_in_order(served):
    items = [
        body(OK, task_name="relu"),
        body((CANDS / "syntax_error.py").read_text(), task_name="relu"),
        body(OK, task=BROKEN_TASK),
    ]
    r = served.http.post("/v1/batch", json={"items": items})
    assert r.status_code == 200, r.text
    ok, syntax, broken = r.json()["results"]
    assert ok["verdict"]["category"] == "ok" and syntax["verdict"]["category"] == "compile_error:syntax"
    assert (
        broken["error"]["code"] == "task_error"
        and broken["error"]["status"] == 422
        and "this_module_does_not_exist" in broken["error"]["message"]
    )
    assert broken["error"]["message"].startswith("task (sent as text): ")  # no file the client never had
    too_many = served.http.post("/v1/batch", json={"items": [body("x")] * 9})
    assert too_many.status_code == 422 and too_many.json()["error"] == "batch_too_large"


def test_bad_input_is_a_clear_4xx_and_the_server_stays_up(served):
    post = served.http.post
    r = post("/v1/evaluate", content=b'{"task": "x", "candidate": ', headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"] == "malformed_json"
    r = post("/v1/evaluate", json={"task": TASK})
    assert r.status_code == 422 and r.json()["error"] == "invalid_request" and "candidate" in r.json()["message"]
    r = post("/v1/evaluate", json=body(OK, shell="rm -rf /"))
    assert r.status_code == 422 and "shell" in r.json()["message"]
    r = post("/v1/evaluate", json=body(OK, task_name="../../etc"))
    assert r.status_code == 422
    r = post("/v1/evaluate", content=b"x" * (10 << 20), headers={"Content-Type": "application/json"})  # 10 MB
    assert r.status_code == 413 and r.json()["error"] == "too_large"
    r = post(
        "/v1/evaluate", content=(b"y" * (256 << 10) for _ in range(8)), headers={"Content-Type": "application/json"}
    )  # chunked, 2 MB
    assert r.status_code == 413
    r = post("/v1/evaluate", json=body(OK, task=BROKEN_TASK))
    assert (
        r.status_code == 422
        and r.json()["error"] == "task_error"
        and "this_module_does_not_exist" in r.json()["message"]
    )
    assert "kernelfix-pool" not in r.json()["message"]  # no path of the server's
    r = post("/v1/evaluate", json=body(OK, task="import torch\nx = 1\n"))
    assert r.status_code == 422 and "lacks Model" in r.json()["message"]
    assert served.http.get("/v1/health").json()["status"] == "ok"


def test_a_path_sent_as_a_task_or_candidate_is_text_never_read(served):
    r = served.http.post("/v1/evaluate", json=body("/etc/hostname"))
    assert (
        r.status_code == 200
        and r.json()["category"] == "compile_error:syntax"
        and "which looks like a file path" in r.json()["message"]
    )
    r = served.http.post("/v1/evaluate", json=body(OK, task="/etc/hostname"))
    assert r.status_code == 422 and "not valid Python" in r.json()["message"]


def test_a_hostile_candidate_is_held_by_the_sandbox(served):
    hostile = Path(__file__).parent / "hostile" / "candidates"
    for name, category in (
        ("forge_channel.py", "cheating:tampering"),
        ("kill_parent.py", "cheating:tampering"),
    ):  # caught running, caught reading
        r = served.http.post("/v1/evaluate", json=body((hostile / name).read_text(), task_name="relu"))
        assert r.status_code == 200 and r.json()["category"] == category, (name, r.text[:300])
    r = served.http.post("/v1/evaluate", json=body(OK, task_name="relu"))
    assert r.status_code == 200 and r.json()["category"] == "ok"  # and the next candidate is judged as ever


# --------------------------------------------------------------------------- the trainers' rewards, through the server


def test_the_trl_and_verl_rewards_judge_through_the_server(served):
    from kernelfix.rewards.trl import KernelReward
    from kernelfix.rewards.verl import compute_score

    reply = f"```python\n{OK}```"
    reward = KernelReward(url=served.url, token=TOKEN)
    logged = {}
    got = reward(
        prompts=["p", "p"],
        completions=[[{"role": "assistant", "content": reply}], "no code here"],
        task=[TASK, TASK],
        log_extra=lambda column, values: logged.setdefault(column, values),
    )
    assert got == [1.0, 0.0] and logged["kernelfix_category"] == ["ok", "format_error:no_code"]
    reward.close()
    score = compute_score("kernelbench", reply, TASK, {"task_name": "relu"}, url=served.url, token=TOKEN)
    assert score == {
        "score": 1.0,
        "ok": 1.0,
        "effective_speedup": 1.0,
        "category": "ok",
    }  # the one verl sees for an ok kernel


# --------------------------------------------------------------------------- the queue and the GPUs, requests held by the test


class HeldJudge:
    """A judge whose verdicts wait for the test's go: the requests stay admitted and running meanwhile."""

    def __init__(self, gpu: str | None, gate: threading.Event, made: list):
        self.gpu, self.gate, self.closed = gpu, gate, False
        made.append(self)

    def evaluate_text(self, candidate, **kw) -> Verdict:
        assert self.gate.wait(120)
        return Verdict(category="ok", task="held", device="cpu")

    def close(self) -> None:
        self.closed = True


def held_server(gpus, *, per_gpu=1, queue=1, judges_per_gpu=4):
    gate, made = threading.Event(), []
    pool = JudgePool(
        JudgeConfig(device="cpu"),
        gpus=gpus,
        per_gpu=per_gpu,
        queue=queue,
        judges_per_gpu=judges_per_gpu,
        make_judge=lambda req, gpu, root: HeldJudge(gpu, gate, made),
    )
    s = Served(create_app(pool, token=TOKEN))
    s.pool, s.gate, s.made = pool, gate, made
    return s


def post_in_thread(s: Served, payload: dict, out: dict, key: str) -> threading.Thread:
    t = threading.Thread(target=lambda: out.__setitem__(key, s.http.post("/v1/evaluate", json=payload)))
    t.start()
    return t


def wait_for(cond) -> None:
    for _ in range(2400):
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("the server never reached the state the test waits for")


def test_a_full_queue_is_503_with_retry_after_and_no_request_is_lost():
    s = held_server([None], per_gpu=1, queue=1)
    try:
        out: dict = {}
        a = post_in_thread(s, body("a"), out, "a")
        wait_for(lambda: s.pool.stats().slots[0].running == 1)
        b = post_in_thread(s, body("b"), out, "b")
        wait_for(lambda: s.pool.stats().pending == 2)  # b waits in the queue
        c = s.http.post("/v1/evaluate", json=body("c"))
        assert c.status_code == 503 and c.json()["error"] == "busy" and int(c.headers["Retry-After"]) >= 1
        assert s.http.post("/v1/batch", json={"items": [body("d")]}).status_code == 503
        assert (
            s.http.post("/v1/batch", json={"items": [body("e")] * 3}).json()["error"] == "batch_too_large"
        )  # never fits
        health = s.http.get("/v1/health").json()  # answered while the judge is full
        assert health["pending"] == 2 and health["rejected"] == 2
        s.gate.set()
        a.join(120), b.join(120)
        assert out["a"].status_code == out["b"].status_code == 200  # both admitted requests got their verdicts
        assert s.http.post("/v1/evaluate", json=body("f")).status_code == 200  # and the queue is free again
    finally:
        s.gate.set()
        s.stop()


def test_two_gpus_a_warm_judge_first_then_the_least_loaded_and_lru_eviction():
    s = held_server(["0", "1"], per_gpu=1, queue=2, judges_per_gpu=1)
    try:
        out: dict = {}
        a = post_in_thread(s, body("a"), out, "a")
        wait_for(lambda: len(s.made) == 1)  # a's judge made, a held in it
        b = post_in_thread(s, body("b"), out, "b")  # same task, GPU 0 busy: GPU 1 warms a judge for it
        wait_for(lambda: s.pool.stats().pending == 2)
        s.gate.set()
        a.join(120), b.join(120)
        assert {out["a"].headers[GPU_HEADER], out["b"].headers[GPU_HEADER]} == {"0", "1"}
        assert [j.gpu for j in s.made] == [out["a"].headers[GPU_HEADER], out["b"].headers[GPU_HEADER]]
        c = s.http.post("/v1/evaluate", json=body("c"))  # warm on both and both idle: the first
        assert c.headers[GPU_HEADER] == "0" and len(s.made) == 2
        d = s.http.post("/v1/evaluate", json=body("d", task=TASK + "\n# another task\n"))
        assert d.headers[GPU_HEADER] == "0" and len(s.made) == 3  # a new task: a new judge, on the first idle GPU
        assert s.made[0].closed and not s.made[1].closed  # one judge per GPU here: GPU 0's older one went
    finally:
        s.gate.set()
        s.stop()


class RecordingJudge:
    """A judge that answers ok at once and records each call's options (what the request asked the judge for)."""

    def __init__(self, calls: list):
        self.gpu, self.calls = None, calls

    def evaluate_text(self, candidate, **kw) -> Verdict:
        self.calls.append(kw)
        return Verdict(category="ok", task="recorded", device="cpu")

    def close(self) -> None:
        pass


def test_the_sanitizer_is_a_per_request_choice_and_the_rewards_judge_without_it():
    # No reward reads compute-sanitizer's cause (it never changes the category or the speedup), and it costs 10-20 s
    # of GPU per wrong kernel: the rewards ask for none; a request that says nothing gets the server's config.
    from kernelfix.rewards.trl import KernelReward
    from kernelfix.rewards.verl import compute_score
    from kernelfix.serve.client import JudgeClient, _body, request

    calls: list = []
    pool = JudgePool(
        JudgeConfig(device="cpu"),
        gpus=[None],
        per_gpu=1,
        queue=4,
        make_judge=lambda req, gpu, root: RecordingJudge(calls),
    )
    s = Served(create_app(pool, token=TOKEN))
    try:
        assert s.http.post("/v1/evaluate", json=body("a", sanitize=False)).status_code == 200
        assert s.http.post("/v1/evaluate", json=body("b")).status_code == 200
        assert s.http.post("/v1/evaluate", json=body("c", sanitize="maybe")).status_code == 422  # a bool or null
        assert [c["sanitize"] for c in calls] == [False, None]
        client = JudgeClient(s.url, token=TOKEN)
        client.evaluate(TASK, "x = 1", kind="code", sanitize=True)
        client.evaluate(TASK, "x = 1", kind="code")
        assert "sanitize" not in _body(
            request(TASK, "x = 1", kind="code")
        )  # unset: left out, as a server of an earlier version takes it
        client.close()
        reward = KernelReward(url=s.url, token=TOKEN)
        assert reward(prompts=["p"], completions=["x"], task=[TASK]) == [1.0]
        reward.close()
        assert compute_score("kb", "x", TASK, None, url=s.url, token=TOKEN)["score"] == 1.0
        assert compute_score("kb", "x", TASK, None, url=s.url, token=TOKEN, sanitize=True)["score"] == 1.0
        assert [c["sanitize"] for c in calls] == [False, None, True, None, False, False, True]
        assert all(c["profile"] is None for c in calls)
    finally:
        s.stop()


def test_gpu_slots_and_a_judge_pinned_to_its_gpu(tmp_path):
    assert (
        gpu_slots(None, "cpu") == [None] and gpu_slots("0,1", "cpu") == ["0", "1"] and gpu_slots(["2"], "cuda") == ["2"]
    )
    with pytest.raises(ValueError):
        gpu_slots("0,0", "cuda")
    pool = JudgePool(JudgeConfig(device="cpu"), gpus=["0", "1"])
    from kernelfix.library.judge_pool import JudgeRequest

    judge = pool._default_judge(JudgeRequest(task=TASK, candidate=""), "1", tmp_path)
    try:
        assert judge.gpu == "1" and judge.engine.gpu == "1"  # its workers get CUDA_VISIBLE_DEVICES=1 on a GPU machine
    finally:
        judge.close()
        pool.close()


# --------------------------------------------------------------------------- the command


def test_the_command_makes_its_token_serves_and_stops_on_sigterm(tmp_path):
    token_file = tmp_path / "cfg" / "token"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelfix", "serve", "--port", "0", "--device", "cpu", "--token-file", str(token_file)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        url = None
        for line in proc.stderr:
            if line.startswith("kernelfix serve: http://"):
                url = line.split()[2]
                break
        assert url and url.startswith("http://127.0.0.1:"), "no address printed"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600 and "made in" in line
        wait_for(lambda: _answers(url))
        assert httpx.get(f"{url}/v1/health").status_code == 401
        token = token_file.read_text().strip()
        assert httpx.get(f"{url}/v1/health", headers={"Authorization": f"Bearer {token}"}).json()["status"] == "ok"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == -signal.SIGTERM  # uvicorn ends by the signal it got, once it has shut down
        assert (
            "Application shutdown complete" in proc.stderr.read()
        )  # graceful: the requests under way answered, the pool closed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    short = tmp_path / "short"
    short.write_text("abc\n")
    from kernelfix.cli import EXIT_USAGE, main

    assert main(["serve", "--token-file", str(short), "--device", "cpu"]) == EXIT_USAGE


def _answers(url: str) -> bool:
    try:
        httpx.get(f"{url}/v1/health", timeout=5)
        return True
    except httpx.TransportError:
        return False


def test_the_default_token_is_hidden_from_candidates(tmp_path, monkeypatch):
    from kernelfix.sandbox import credential_paths
    from kernelfix.serve.auth import default_token_file, load_or_make

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("KERNELFIX_TOKEN_FILE", raising=False)
    token, path, made, warning = load_or_make()
    assert (
        path == default_token_file() == tmp_path / ".config" / "kernelfix" / "serve-token" and made and warning is None
    )
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700 and len(token) >= 40
    assert str(path.parent) in credential_paths(home=tmp_path)  # the judge hides it from every candidate, like ~/.ssh
    assert load_or_make() == (token, path, False, None)  # the next start reads the same token
