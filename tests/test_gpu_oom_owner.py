"""Whose memory a CUDA out-of-memory error ran into: the code's own, or other processes'.

The throughput run on the H100 (six judges at once) gave an honest 23_Softmax candidate
``runtime_error:oom`` for a 6 GiB request while its process held 6 GiB of an 80 GiB GPU:
the rest was its neighbours'. These are the messages torch writes, classified on any machine.
"""

from __future__ import annotations

from kernelfix.sandbox import ChildOutcome
from kernelfix.tools.classify import classify
from kernelfix.tools.handles.reference_failures import _memory_verdict
from kernelfix.tools.verdict import Category

GIB = 2**30


def _oom(asked_gib: float, process_gib: float, free_gib: float, total_gib: float = 79.18) -> dict:
    message = (
        f"CUDA out of memory. Tried to allocate {asked_gib:.2f} GiB. GPU 0 has a total capacity of {total_gib:.2f} GiB "
        f"of which {free_gib:.2f} GiB is free. Including non-PyTorch memory, this process has {process_gib:.2f} GiB memory in use."
    )
    memory = {
        "free": int(free_gib * GIB),
        "total": int(total_gib * GIB),
        "allocated": int(process_gib * GIB),
        "reserved": int(process_gib * GIB),
    }
    return {
        "type": "error",
        "kind": "exception",
        "phase": "time_candidate",
        "exc_type": "OutOfMemoryError",
        "mro": ["OutOfMemoryError", "RuntimeError", "Exception"],
        "message": message,
        "memory": memory,
    }


def _outcome(err: dict) -> ChildOutcome:
    return ChildOutcome(argv=["worker"], returncode=1, wall_s=1.0, messages=[err])


def test_a_candidate_that_asked_for_what_an_idle_gpu_has_is_not_blamed():
    f = classify("benchmark", _outcome(_oom(6.0, 6.0, 3.26)), timeout_s=60)
    assert f.category == Category.GPU_BUSY
    assert "asked 6.0 GiB" in f.message and "held 6.0" in f.message and "3.3 of 79.2 GiB were free" in f.message


def test_a_candidate_that_asked_for_more_than_the_gpu_has_is_its_own_oom():
    f = classify("benchmark", _outcome(_oom(80.0, 6.0, 70.0)), timeout_s=60)
    assert f.category == Category.OOM


def test_memory_the_process_took_outside_torchs_allocator_counts_as_its_own():
    err = _oom(8.0, 70.0, 1.0)
    err["memory"]["reserved"] = 2 * GIB  # torch's allocator holds 2 GiB; the process holds 70 (cudaMalloc of its own)
    assert classify("correctness", _outcome(err), timeout_s=60).category == Category.OOM


def test_the_reference_tells_a_task_too_large_from_a_busy_gpu():
    busy, msg = _memory_verdict(_oom(2.0, 10.0, 1.0), trial_bytes=4 * GIB)
    assert busy == Category.GPU_BUSY and "the reference asked 2.0 GiB" in msg
    large, msg = _memory_verdict(_oom(30.0, 50.0, 25.0), trial_bytes=40 * GIB)
    assert large == Category.TOO_LARGE and "does not fit this GPU" in msg
    # The step that ran out is named: the --backward sweep's norms ran out timing, not computing a trial.
    assert msg.endswith("of the GPU's 79.2 GiB")  # the fixture's phase is a candidate's: no reference step to name
    err = _oom(8.0, 72.6, 0.5) | {"phase": "time_eager"}
    large, msg = _memory_verdict(err, trial_bytes=16 * GIB)
    assert large == Category.TOO_LARGE and msg.endswith(
        "needed 80.6 GiB (held 72.6, asked 8.0) of the GPU's 79.2 GiB while timing eager"
    )


def test_a_candidate_that_filled_most_of_the_gpu_for_a_small_task_is_its_own_oom():
    """The GPU memory bomb under 16 test workers on the H100: it held 61.6 of 79.2 GiB, other judges'
    CUDA contexts the rest. Its request would have fit alone, but no task of 26 MiB needs 60 GiB."""
    bomb = _outcome(_oom(1.0, 61.6, 0.5))
    f = classify("correctness", bomb, timeout_s=60, trial_bytes=26 << 20)
    assert f.category == Category.OOM and "held 61.6 GiB and asked 1.0 more" in f.message and "26 MiB" in f.message
    assert classify("correctness", bomb, timeout_s=60).category == Category.GPU_BUSY  # the size unknown: as before
    # A task whose trial is 6 GiB may use 60 (16x): the others' memory is still to blame.
    assert classify("correctness", bomb, timeout_s=60, trial_bytes=6 * GIB).category == Category.GPU_BUSY
    # Under half the GPU is never the candidate's excess, however small the task.
    assert (
        classify("correctness", _outcome(_oom(6.0, 6.0, 3.26)), timeout_s=60, trial_bytes=1 << 20).category
        == Category.GPU_BUSY
    )
