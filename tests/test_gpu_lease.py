"""The GPU's lease across processes: exclusive holds alone, shared holds together within a memory budget,
and an exclusive hold never starved by shared ones (docs/judge.md, "Exclusive timing, shared correctness").

Real processes on real lock files: each holder is a `python -c` that takes the lease, touches a file
when it holds it, and gives it back when told to by another file. No GPU is involved: the lease is
only lock files, and these tests are its protocol."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernelfix.tools.device_lease import DeviceLease, exclusive_overlaps

GiB = 2**30
CORPUS_TASKS = Path(__file__).parent / "corpus" / "tasks"

HOLDER = """
import sys, time, pathlib
from kernelfix.tools.device_lease import DeviceLease
lock_dir, what, mode, need, budget, held, release = sys.argv[1:8]
lease = DeviceLease(pathlib.Path(lock_dir), "0")
with lease.hold(what, shared=mode == "shared", need_bytes=int(need) if need != "-" else None,
                budget_bytes=int(budget) if budget != "-" else None):
    pathlib.Path(held).touch()
    while not pathlib.Path(release).exists():
        time.sleep(0.01)
"""


class Holder:
    """A process that holds the lease (shared or exclusive) until ``release()``."""

    def __init__(self, lock_dir: Path, name: str, *, shared: bool, need: int | None = None, budget: int | None = None):
        self.held, self.done = lock_dir / f"{name}.held", lock_dir / f"{name}.release"
        args = [str(lock_dir), name, "shared" if shared else "exclusive", str(need) if need is not None else "-",
                str(budget) if budget is not None else "-", str(self.held), str(self.done)]
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, *args])

    def holds(self, within: float = 10.0) -> bool:
        end = time.monotonic() + within
        while time.monotonic() < end:
            if self.held.exists():
                return True
            assert self.proc.poll() is None, "the holder died"
            time.sleep(0.01)
        return False

    def release(self) -> None:
        self.done.touch()
        assert self.proc.wait(timeout=30) == 0


def holds_log(lock_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (lock_dir / "gpu-0.log").read_text().splitlines()]


def waiting_at_gate(lease: DeviceLease) -> bool:
    """Whether someone holds the turnstile now (an exclusive hold waiting for the shared ones to drain)."""
    import fcntl

    fd = os.open(lease.gate, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def test_timing_waits_for_shared_holds_to_drain_and_holds_that_come_after_it_wait_for_it(tmp_path):
    """The readers-writer order: an exclusive hold waits for the shared holds it found, and a shared hold
    asked while it waits goes after it, though its room was free (writer preference: never starved)."""
    lease = DeviceLease(tmp_path, "0")
    first = Holder(tmp_path, "correctness-a", shared=True, need=GiB, budget=10 * GiB)
    assert first.holds()
    timed = threading.Event()

    def timing() -> None:
        with lease.hold("timing"):
            timed.set()
            time.sleep(0.2)

    t = threading.Thread(target=timing, daemon=True)
    t.start()
    end = time.monotonic() + 10
    while not waiting_at_gate(lease):  # it is in line, keeping the gate
        assert time.monotonic() < end
        time.sleep(0.01)
    late = Holder(tmp_path, "correctness-b", shared=True, need=GiB, budget=10 * GiB)
    assert not timed.wait(0.3), "the exclusive hold waits for the shared one it found"
    assert not late.holds(within=0.2), "a shared hold asked later goes after the exclusive one"
    first.release()
    assert timed.wait(10)
    assert late.holds()
    late.release()
    t.join(10)
    by = {h["what"]: h for h in holds_log(tmp_path)}
    assert by["timing"]["mode"] == "exclusive" and by["correctness-b"]["mode"] == "shared"
    assert by["correctness-a"]["released"] <= by["timing"]["got"] <= by["timing"]["released"] <= by["correctness-b"]["got"]
    assert not exclusive_overlaps(holds_log(tmp_path))


def test_shared_holds_run_together_within_the_budget_and_wait_for_room_beyond_it(tmp_path):
    budget = 10 * GiB
    a = Holder(tmp_path, "a", shared=True, need=4 * GiB, budget=budget)
    b = Holder(tmp_path, "b", shared=True, need=4 * GiB, budget=budget)
    assert a.holds() and b.holds(), "8 of 10 GiB: both at once"
    lease = DeviceLease(tmp_path, "0")
    assert sorted(lease.shared_bytes()) == [4 * GiB, 4 * GiB]
    c = Holder(tmp_path, "c", shared=True, need=4 * GiB, budget=budget)
    assert not c.holds(within=0.3), "12 of 10 GiB: it waits for room"
    a.release()
    assert c.holds()
    b.release()
    c.release()
    holds = {h["what"]: h for h in holds_log(tmp_path)}
    assert holds["b"]["got"] < holds["a"]["released"], "a and b overlapped"
    assert holds["c"]["got"] >= holds["a"]["released"]
    assert not exclusive_overlaps(list(holds.values())), "shared holds may overlap each other"
    assert lease.shared_bytes() == []


def test_a_hold_of_unknown_size_shares_with_nobody(tmp_path):
    """A task the meta device cannot count declares the whole GPU: it runs alone, and nothing joins it."""
    small = Holder(tmp_path, "small", shared=True, need=GiB, budget=10 * GiB)
    assert small.holds()
    unknown = Holder(tmp_path, "unknown", shared=True, need=None, budget=10 * GiB)
    assert not unknown.holds(within=0.3)
    small.release()
    assert unknown.holds()
    again = Holder(tmp_path, "again", shared=True, need=GiB, budget=10 * GiB)
    assert not again.holds(within=0.3)
    unknown.release()
    assert again.holds()
    again.release()


def test_a_dead_shared_holders_room_and_lock_come_back(tmp_path):
    """The kernel drops a killed process's lock; its declared bytes are swept by whoever counts."""
    dead = Holder(tmp_path, "dead", shared=True, need=8 * GiB, budget=10 * GiB)
    assert dead.holds()
    dead.proc.send_signal(signal.SIGKILL)
    dead.proc.wait(timeout=30)
    lease = DeviceLease(tmp_path, "0")
    assert len(os.listdir(lease.shared_dir)) == 1, "its ticket is left behind"
    with lease.hold("next", shared=True, need_bytes=8 * GiB, budget_bytes=10 * GiB):
        assert lease.shared_bytes() == [8 * GiB], "only this hold's own"
    with lease.hold("timing"):
        pass
    assert os.listdir(lease.shared_dir) == []


def test_exclusive_overlaps_names_only_an_exclusive_hold_beside_another():
    shared = [{"mode": "shared", "got": 0.0, "released": 2.0}, {"mode": "shared", "got": 1.0, "released": 3.0}]
    assert exclusive_overlaps(shared) == []
    timing = {"mode": "exclusive", "got": 2.5, "released": 4.0}
    assert exclusive_overlaps([*shared, timing]) == [(shared[1], timing)]
    assert exclusive_overlaps([{"got": 0.0, "released": 1.0}, {"got": 1.0, "released": 2.0}]) == []  # an older log: exclusive, back to back


@pytest.mark.gpu
def test_judges_on_one_gpu_share_correctness_and_time_alone(tmp_path):
    """Two judges, four evaluations at once on the GPU: every verdict right, each timing exclusive (the
    hold log has no exclusive hold beside another), the trials shared."""
    from agent_support import candidate_code
    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tools.judge import Judge

    code = candidate_code("triton_relu_ok.py")
    judges = [Judge(CORPUS_TASKS / "relu.py", JudgeConfig(device="cuda"), workdir=tmp_path / f"j{k}") for k in range(2)]
    t0 = time.time()
    verdicts: list = []
    try:
        threads = [threading.Thread(target=lambda j=judges[k % 2]: verdicts.append(j.evaluate(code))) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
    finally:
        for j in judges:
            j.close()
    assert [v.category.value for v in verdicts] == ["ok"] * 4, [v.message for v in verdicts]
    log = judges[0]._lease.log  # the GPU's hold log, in the lock dir every judge of the run shares
    holds = [h for h in (json.loads(x) for x in log.read_text().splitlines()) if h["got"] >= t0]
    modes = {(h["what"].split(" ", 1)[1], h["mode"]) for h in holds if h["what"].startswith("relu ")}
    assert {("correctness", "shared"), ("benchmark", "exclusive"), ("benchmark inputs", "shared")} <= modes, modes
    assert not exclusive_overlaps(holds)
