"""The GPU's lease across processes: exclusive holds alone, shared holds together, an exclusive hold never
starved by shared ones, and room for each stage's memory within a budget (docs/judge.md, "Exclusive
timing, shared correctness").

Real processes on real lock files: each holder is a `python -c` that takes the lease (or room), touches a
file when it has it, and gives it back when told to by another file. No GPU is involved: the lease is
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

from kernelfix.tools.gpu.lease import DeviceLease, exclusive_overlaps

GiB = 2**30
CORPUS_TASKS = Path(__file__).parent / "corpus" / "tasks"

HOLDER = """
import sys, time, pathlib
from kernelfix.tools.gpu.lease import DeviceLease
lock_dir, what, mode, need, budget, held, release = sys.argv[1:8]
lease = DeviceLease(pathlib.Path(lock_dir), "0")
if mode == "room":
    cm = lease.room(what, int(need) if need != "-" else None, int(budget) if budget != "-" else None)
else:
    cm = lease.hold(what, shared=mode == "shared")
with cm:
    pathlib.Path(held).touch()
    while not pathlib.Path(release).exists():
        time.sleep(0.01)
"""


class Holder:
    """A process that holds the lease (shared or exclusive) or room until ``release()``."""

    def __init__(self, lock_dir: Path, name: str, mode: str, need: int | None = None, budget: int | None = None):
        self.held, self.done = lock_dir / f"{name}.held", lock_dir / f"{name}.release"
        args = [
            str(lock_dir),
            name,
            mode,
            str(need) if need is not None else "-",
            str(budget) if budget is not None else "-",
            str(self.held),
            str(self.done),
        ]
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


def log_of(lock_dir: Path) -> dict[str, dict]:
    return {h["what"]: h for h in (json.loads(line) for line in (lock_dir / "gpu-0.log").read_text().splitlines())}


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
    asked while it waits goes after it (writer preference: timing is never starved)."""
    lease = DeviceLease(tmp_path, "0")
    first = Holder(tmp_path, "correctness-a", "shared")
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
    late = Holder(tmp_path, "correctness-b", "shared")
    assert not timed.wait(0.3), "the exclusive hold waits for the shared one it found"
    assert not late.holds(within=0.2), "a shared hold asked later goes after the exclusive one"
    first.release()
    assert timed.wait(10)
    assert late.holds()
    late.release()
    t.join(10)
    by = log_of(tmp_path)
    assert by["timing"]["mode"] == "exclusive" and by["correctness-b"]["mode"] == "shared"
    assert (
        by["correctness-a"]["released"] <= by["timing"]["got"] <= by["timing"]["released"] <= by["correctness-b"]["got"]
    )
    assert not exclusive_overlaps(list(by.values()))


def test_shared_holds_run_together(tmp_path):
    a, b = Holder(tmp_path, "a", "shared"), Holder(tmp_path, "b", "shared")
    assert a.holds() and b.holds(), "both at once"
    a.release()
    b.release()
    by = log_of(tmp_path)
    assert by["b"]["got"] < by["a"]["released"] and not exclusive_overlaps(list(by.values()))


def test_stages_get_room_within_the_budget_and_wait_for_it_beyond(tmp_path):
    budget = 10 * GiB
    a = Holder(tmp_path, "a", "room", need=4 * GiB, budget=budget)
    b = Holder(tmp_path, "b", "room", need=4 * GiB, budget=budget)
    assert a.holds() and b.holds(), "8 of 10 GiB: both at once"
    lease = DeviceLease(tmp_path, "0")
    assert sorted(w for _, w, _ in lease.room_tickets()) == [4 * GiB, 4 * GiB]
    c = Holder(tmp_path, "c", "room", need=4 * GiB, budget=budget)
    assert not c.holds(within=0.3), "12 of 10 GiB: it waits for room"
    a.release()
    assert c.holds()
    b.release()
    c.release()
    by = log_of(tmp_path)
    assert by["b"]["got"] < by["a"]["released"], "a and b had room at once"
    assert by["c"]["got"] >= by["a"]["released"]
    assert lease.room_tickets() == []


def test_a_stage_of_unknown_size_has_the_memory_to_itself(tmp_path):
    """A task the meta device cannot count declares the whole GPU: it waits for the others, and nothing joins it."""
    small = Holder(tmp_path, "small", "room", need=GiB, budget=10 * GiB)
    assert small.holds()
    unknown = Holder(tmp_path, "unknown", "room", need=None, budget=10 * GiB)
    assert not unknown.holds(within=0.3)
    small.release()
    assert unknown.holds()
    again = Holder(tmp_path, "again", "room", need=GiB, budget=10 * GiB)
    assert not again.holds(within=0.3)
    unknown.release()
    assert again.holds()
    again.release()


def test_a_judges_reference_cache_is_counted_once_however_many_of_its_stages_have_room(tmp_path):
    mine, other = DeviceLease(tmp_path, "0"), DeviceLease(tmp_path, "0")
    budget = 10 * GiB
    with (
        mine.room("first", 8 * GiB, budget, cache_bytes=6 * GiB),
        mine.room("second", 8 * GiB, budget, cache_bytes=6 * GiB),
    ):
        assert len(mine.room_tickets()) == 2, "2 + 2 GiB of work beside one 6 GiB cache: 10 of 10"
    held = threading.Event()

    def another_judge() -> None:
        with other.room("theirs", 8 * GiB, budget, cache_bytes=6 * GiB):
            held.set()

    with mine.room("mine", 8 * GiB, budget, cache_bytes=6 * GiB):
        t = threading.Thread(target=another_judge, daemon=True)
        t.start()
        assert not held.wait(0.3), "another judge's cache is another 6 GiB: 16 of 10"
    assert held.wait(10)
    t.join(10)


def test_a_dead_holders_room_and_lock_come_back(tmp_path):
    """The kernel drops a killed process's lock; its room is swept by whoever counts."""
    dead_room = Holder(tmp_path, "dead-room", "room", need=8 * GiB, budget=10 * GiB)
    dead_lock = Holder(tmp_path, "dead-lock", "shared")
    assert dead_room.holds() and dead_lock.holds()
    for h in (dead_room, dead_lock):
        h.proc.send_signal(signal.SIGKILL)
        h.proc.wait(timeout=30)
    lease = DeviceLease(tmp_path, "0")
    assert len(os.listdir(lease.rooms)) == 1, "its ticket is left behind"
    with lease.room("next", 8 * GiB, 10 * GiB):
        assert [w for _, w, _ in lease.room_tickets()] == [8 * GiB], "only this stage's own"
        with lease.hold("timing"):
            pass
    assert os.listdir(lease.rooms) == []


def test_exclusive_overlaps_names_only_an_exclusive_hold_beside_another():
    shared = [{"mode": "shared", "got": 0.0, "released": 2.0}, {"mode": "shared", "got": 1.0, "released": 3.0}]
    assert exclusive_overlaps(shared) == []
    timing = {"mode": "exclusive", "got": 2.5, "released": 4.0}
    assert exclusive_overlaps([*shared, timing]) == [(shared[1], timing)]
    assert exclusive_overlaps([*shared, {"mode": "room", "got": 0.0, "released": 9.0}]) == [], "room is not a hold"
    assert (
        exclusive_overlaps([{"got": 0.0, "released": 1.0}, {"got": 1.0, "released": 2.0}]) == []
    )  # an older log: exclusive, back to back


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
    log = judges[0]._share.device_lease.log  # the GPU's hold log, in the lock dir every judge of the run shares
    holds = [h for h in (json.loads(x) for x in log.read_text().splitlines()) if h["got"] >= t0]
    modes = {(h["what"].split(" ", 1)[1], h["mode"]) for h in holds if h["what"].startswith("relu ")}
    assert {
        ("correctness", "shared"),
        ("benchmark", "exclusive"),
        ("benchmark inputs", "shared"),
        ("correctness", "room"),
    } <= modes, modes
    assert not exclusive_overlaps(holds)


def test_candidates_cannot_see_the_lease(tmp_path, monkeypatch):
    """flock needs no write access: a candidate that could open the lock file could hold it and stall every
    judge's GPU work. Its sandbox hides the lock dir, unless $KERNELFIX_LOCKS holds the candidate's own dirs."""
    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tools.handles import sandboxing

    monkeypatch.setenv("KERNELFIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("KERNELFIX_LOCKS", str(tmp_path / "locks"))
    args = dict(workdir=tmp_path / "eval", private=tmp_path / "private", siblings=[], credentials=[], device="cpu")
    iso, _ = sandboxing.isolation("candidate", JudgeConfig(device="cpu"), **args)
    assert str((tmp_path / "locks").resolve()) in iso.hidden
    monkeypatch.setenv("KERNELFIX_LOCKS", str(tmp_path))  # the eval's own dirs are under it: hiding it would hide them
    iso, _ = sandboxing.isolation("candidate", JudgeConfig(device="cpu"), **args)
    assert str(tmp_path.resolve()) not in iso.hidden
