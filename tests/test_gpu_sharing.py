"""Judges on one GPU share its memory by plan (docs/judge.md, "Many judges on one GPU").

Each hold of the GPU's lease leaves a mark while asked for and held; a judge that sees another's
mark while it holds no lease gives back what its workers keep on the GPU: the reference's cached
trials and the allocators' free blocks. These tests run the parts that need no GPU: the marks
between real processes, and a real reference worker giving back its cache and computing the same
trials again from their seeds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from agent_support import candidate_code

from kernelfix.tools.gpu.lease import DeviceLease
from kernelfix.tools.verdict import Category

HOLDER = """
import sys, time
from pathlib import Path
from kernelfix.tools.gpu.lease import DeviceLease
lease = DeviceLease(Path(sys.argv[1]), "0")
with lease.hold("another judge"):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_judge_sees_another_processes_wish_for_the_gpu_and_a_dead_ones_mark_is_swept(tmp_path):
    lease = DeviceLease(tmp_path, "0")
    with lease.hold("mine"):
        assert not lease.others_want(), "its own hold is not another's"
    other = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        assert lease.others_want()
    finally:
        other.send_signal(signal.SIGKILL)  # dies holding: its mark stays behind until someone looks
        other.wait()
    assert len(os.listdir(lease.wants)) == 1
    assert not lease.others_want() and os.listdir(lease.wants) == []


def test_the_reference_gives_back_its_cached_trials_and_recomputes_them_alike(judges):
    judge = judges("relu", "cpu")
    code = candidate_code("triton_relu_ok.py")
    first = judge.evaluate(code)
    assert first.category == Category.OK, first.message
    freed = judge.ref.give_back_gpu_memory()
    assert freed and freed > 0, "the survey's trials were cached"
    assert judge.ref.give_back_gpu_memory() == 0, "nothing is left to give"
    again = judge.evaluate(code)  # every trial computed anew from its seed: the same references
    assert again.category == Category.OK, again.message
    assert [(t.trial, t.max_abs_error) for t in again.correctness.trials] == [
        (t.trial, t.max_abs_error) for t in first.correctness.trials
    ]


def test_a_stage_that_fails_mid_trial_leaves_no_arena_in_the_reference(judges):
    """A candidate that dies in its forward never releases the trial it was given; the judge frees
    those arenas when it ends the evaluation (each failed try left 12 GiB of 19_ReLU on the H100)."""
    judge = judges("relu", "cpu")
    v = judge.evaluate(candidate_code("crash.py"))
    assert v.category == Category.CRASH, v.message
    assert not judge.ref._owned, "every evaluation's arenas are accounted for"
    judge.ref.give_back_gpu_memory()
    assert (judge.ref.last_trim.slots, judge.ref.last_trim.outs) == (0, 0)


def test_judges_in_one_process_see_each_other(tmp_path):
    """A batch's judges, or the throughput bench's, share a process: each is another to the rest."""
    mine, theirs = DeviceLease(tmp_path, "0"), DeviceLease(tmp_path, "0")
    with theirs.hold("a stage of another judge"):
        assert mine.others_want() and not theirs.others_want()
    assert not mine.others_want()


def test_judges_with_caches_of_their_own_queue_on_one_lock_dir(tmp_path, monkeypatch):
    """$KERNELFIX_LOCKS puts the lease where every judge on the machine finds it, whatever its cache."""
    from kernelfix.base.cache_dir import lock_root

    monkeypatch.delenv("KERNELFIX_LOCKS", raising=False)
    monkeypatch.setenv("KERNELFIX_CACHE", str(tmp_path / "a"))
    assert lock_root() == tmp_path / "a" / "locks"  # the default: beside the cache
    monkeypatch.setenv("KERNELFIX_LOCKS", str(tmp_path / "shared"))
    first = DeviceLease(lock_root(), "0")
    monkeypatch.setenv("KERNELFIX_CACHE", str(tmp_path / "b"))
    second = DeviceLease(lock_root(), "0")
    assert first.path == second.path == tmp_path / "shared" / "gpu-0.lock"
    with first.hold("one cache"):
        assert second.others_want(), "a judge with another cache sees this one's hold"


def test_a_trial_waits_for_its_busy_reference_before_it_takes_the_gpus_lock():
    """The baseline's torch.compile holds the judge's reference for seconds (CPU work, outside the lease for a
    small task). A trial that took the GPU's shared lock first and then waited for the reference kept the lock
    meanwhile, and a timed hold queued behind it stopped every judge's shared holds (8 s on the H100 bench).
    The trial now waits for the reference before the lock (lock order unchanged: the lease, then the reference)."""
    import contextlib
    import threading
    import time
    from types import SimpleNamespace

    from kernelfix.tools.handles.reference import Reference
    from kernelfix.tools.stages.correctness import shared_hold

    ref = Reference.__new__(Reference)  # only its lock takes part here
    ref._lock = threading.RLock()
    leased: list[bool] = []

    def lease(what, shared=False):
        free = ref._lock.acquire(blocking=False)  # from this thread: fails while the "compile" holds it
        if free:
            ref._lock.release()
        leased.append(free)
        return contextlib.nullcontext()

    ctx = SimpleNamespace(ref=ref, lease=lease)
    ev = SimpleNamespace(breakdown={})  # what shared_hold writes to
    compiling, done = threading.Event(), threading.Event()

    def compile_baseline() -> None:
        with ref._lock:
            compiling.set()
            time.sleep(0.3)
        done.set()

    threading.Thread(target=compile_baseline, daemon=True).start()
    assert compiling.wait(10)
    with shared_hold(ctx, ev, "correctness"):
        assert done.is_set()
    assert (
        leased == [True] and ev.breakdown["correctness.reference_busy"] > 0 and "correctness.lease_wait" in ev.breakdown
    )
