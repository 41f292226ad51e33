"""bench/judge_throughput.py's accounting (issue 33): who waited for room and behind whom, the sanitizer's
share, the GPU memory a stage used while it held room alone, and the steady-state round's new builds. On a
hold log of the lease's own format, as the H100 run wrote it (tools/gpu/lease.py: what, mode, asked, got,
released, need_bytes)."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
jt = pytest.importorskip("judge_throughput")

GiB = 2**30


def room(what: str, asked: float, got: float, released: float, gib: float) -> dict:
    return {
        "gpu": "0",
        "pid": 1,
        "what": what,
        "mode": "room",
        "asked": asked,
        "got": got,
        "released": released,
        "need_bytes": int(gib * GiB),
    }


def hold(what: str, got: float, released: float, mode: str = "shared") -> dict:
    return {"gpu": "0", "pid": 1, "what": what, "mode": mode, "asked": got, "got": got, "released": released}


# A wrong GELU's sanitizer holds room 0-10 s; Softmax's correctness (the whole budget) waits for it; the GELU's and
# the matmul's next stages queue behind Softmax, then run beside each other.
LOG = [
    room("88_MinGPTNewGelu sanitize", 0.0, 0.0, 10.0, 11.25),
    hold("88_MinGPTNewGelu sanitize probe", 0.5, 3.0),
    hold("88_MinGPTNewGelu sanitize", 3.0, 10.0),
    room("23_Softmax correctness", 1.0, 10.0, 14.0, 66.5),
    hold("23_Softmax correctness", 10.5, 13.5),
    room("88_MinGPTNewGelu correctness", 2.0, 14.0, 16.0, 11.25),
    room("1_Square_matrix_multiplication_ benchmark", 2.0, 14.0, 15.0, 4.31),
    hold("1_Square_matrix_multiplication_ benchmark", 14.2, 14.8, "exclusive"),
]


def test_room_waits_name_the_waiting_stage_and_the_holders_it_waited_behind():
    w = jt.room_waits(LOG)
    assert w["by_waiting_stage"] == {
        "88_MinGPTNewGelu correctness": 12.0,
        "1_Square_matrix_multiplication_ benchmark": 12.0,
        "23_Softmax correctness": 9.0,
    }
    # Softmax waited 9 s behind the sanitizer; the other two 8 s each behind it and 4 s each behind Softmax.
    assert w["behind_holder"] == {"88_MinGPTNewGelu sanitize": 25.0, "23_Softmax correctness": 8.0}
    assert jt.lease_use(LOG)["room_wait_s"] == 33.0 and jt.lease_use(LOG)["exclusive_overlaps"] == 0


def test_the_sanitizers_share_and_the_memory_a_stage_used_alone():
    rows = [{"stage_seconds": {"compile": 1.0, "sanitize": 10.0}}, {"stage_seconds": {"compile": 1.0}}]
    assert jt.sanitizer_share(rows, LOG, 20.0) == {
        "verdicts": 1,
        "stage_s": 10.0,
        "gpu_held_s": 9.5,
        "gpu_held_fraction_of_wall": 0.475,
    }
    samples = [
        (t / 2, mib)
        for t, mib in enumerate([1000, 1000, 2000, 9000, 3000, 3000] + [3000] * 14 + [60000] * 8 + [20000] * 6)
    ]
    mem = jt.memory_by_stage(LOG, samples)
    assert mem["23_Softmax correctness"] == {
        "declared_gib": 66.5,
        "stages": 1,
        "alone_samples": 8,
        "max_used_alone_gib": 58.59,
    }
    assert (
        mem["88_MinGPTNewGelu sanitize"]["max_used_alone_gib"] == 8.79
    )  # 0-10 s alone (Softmax only waited meanwhile)
    assert (
        mem["88_MinGPTNewGelu correctness"]["max_used_alone_gib"] == 19.53
    )  # alone once the matmul's room went, 15-16 s
    assert mem["1_Square_matrix_multiplication_ benchmark"]["alone_samples"] == 0  # never alone: no figure
    assert mem["1_Square_matrix_multiplication_ benchmark"]["max_used_alone_gib"] is None


def test_a_steady_round_renames_every_triton_kernel_so_each_is_a_new_build():
    mix = jt._mix(6)
    assert [jt.renamed(src, 1) for _, _, src in mix] == [src for _, _, src in mix]
    for _, label, src in mix:
        again = jt.renamed(src, 2)
        assert again != src and "_kernel_r2" in again and "_kernel(" not in again and "_kernel[" not in again, label


def test_the_total_counts_every_round_and_the_start_up():
    """``--rounds N``'s total: every verdict over the wall time from the judges' creation (the amortized figure), beside
    the cold and the steady rate, and an hour's projection: the cold round once, then the steady rate."""
    cold = [{"i": i} for i in range(24)]
    rounds = [(12.0, 60.0, cold), (60.0, 80.0, list(cold))]  # start-up 2 s, cold round 48 s, steady round 20 s
    t = jt.total(rounds, 10.0, {"verdicts_per_hour": 4320})
    assert t == {
        "rounds": 2,
        "verdicts": 48,
        "wall_s": 70.0,
        "verdicts_per_hour": 2469,
        "startup_s": 2.0,
        "cold_verdicts_per_hour": 1728,
        "steady_verdicts_per_hour": 4320,
        "one_hour_projection": 24 + (3600 - 50) * 1.2,
    }
    assert "one_hour_projection" not in jt.total(rounds[:1], 10.0, None)
