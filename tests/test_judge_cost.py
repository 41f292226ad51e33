"""The reference worker's savings at large sizes (docs/service.md, "The judge's cost at published sizes"): what it no
longer makes twice, and that what it skips is never what a check reads."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from kernelfix.tools.transport.protocol import TrialPlan
from kernelfix.tools.workers.reference.trial_data import TrialData, Trials


class _Worker(Trials):
    """A reference worker's trial bookkeeping, with a counted stand-in for the reference's forward."""

    def __init__(self, cache_bytes: int = 0):
        self.cache, self.cache_used, self.recent = {}, 0, None
        self.spec = SimpleNamespace(cache_bytes=cache_bytes, atol=None, rtol=None)
        self.cuda, self.device, self.seconds, self.vacuous_of = False, "cpu", {}, {}
        self.made: list[tuple[int, bool]] = []
        self.plans: dict[int, TrialPlan] = {}

    def _compute(self, plan: TrialPlan, inputs_only: bool = False) -> TrialData:
        self.made.append((plan.index, inputs_only))
        return TrialData(
            inputs=[torch.zeros(4)],
            out=torch.zeros(4),
            out64=None if inputs_only else torch.zeros(4, dtype=torch.float64),
            inputs_only=inputs_only,
        )


def test_timed_inputs_skip_the_float64_truth_and_never_reach_a_check():
    w, plan, fresh = (
        _Worker(),
        TrialPlan(index=0, seed=1, purpose="correctness", float64=True),
        TrialPlan(index=5, seed=2, purpose="fresh"),
    )
    timed = w._get(plan, inputs_only=True)
    assert timed.inputs_only and timed.out64 is None
    checked = w._get(plan)  # a check (or the next verdict's trial) of the same index: made again, whole
    assert not checked.inputs_only and checked.out64 is not None
    assert w._get(plan, inputs_only=True) is checked  # a whole trial serves timing as it is
    w._get(fresh)
    assert w.made == [(0, True), (0, False), (5, False)]


def test_timed_inputs_are_never_cached():
    w = _Worker(cache_bytes=1 << 30)
    w._get(TrialPlan(index=0, seed=1, purpose="correctness"), inputs_only=True)
    assert w.cache == {} and w.cache_used == 0
    w._get(TrialPlan(index=0, seed=1, purpose="correctness"))
    assert 0 in w.cache and not w.cache[0].inputs_only


def test_the_allocator_keeps_its_blocks_only_for_a_trial_that_takes_them_again(monkeypatch):
    from kernelfix.tools.workers.reference import trial_data

    freed: list[int] = []
    monkeypatch.setattr(
        trial_data, "free", lambda cuda: freed.append(w.made[-1][0])
    )  # after trial N's tensors were made
    w = _Worker()
    # _Worker makes a float64 output for every trial but a timed one (inputs_only).
    plans = [TrialPlan(index=i, seed=i, purpose="correctness", float64=f) for i, f in enumerate([True, True, False])]
    plans += [TrialPlan(index=3, seed=3, purpose="correctness", input_set=1, float64=True)]
    for p in plans:
        w.plans[p.index] = p
        w._get(p)
    w._get(plans[3], inputs_only=True)  # recent: whole trial 3
    assert [i for i, _ in w.made] == [0, 1, 2, 3]  # the timed inputs of trial 3: trial 3 as it is, nothing freed
    w.plans[5] = TrialPlan(index=5, seed=5, purpose="correctness", input_set=1, float64=True)
    w._get(w.plans[5], inputs_only=True)
    # 0 -> 1: float64 again, its blocks taken again; 1 -> 2: no float64 to take the last one's: freed; 2 -> 3: other
    # shapes (input set 1): freed; 3 -> 5 timed, no float64: freed.
    assert freed == [1, 2, 3] and set(w.seconds) == {"free"}


def test_a_varied_trials_base_moments_are_found_once_and_change_nothing(monkeypatch):
    from kernelfix.tools.correctness import input_variants

    x, idx = torch.randn(3000, generator=torch.Generator().manual_seed(1)) * 3 + 1, torch.arange(5)
    plain = {v: input_variants.apply([x, idx, 2.0], v, seed=9)[0] for v in ("scaled", "shifted", "heavy_tailed")}
    known: dict = {}
    calls = []
    real = input_variants.moments
    monkeypatch.setattr(input_variants, "moments", lambda t: calls.append(1) or real(t))
    for v, expect in plain.items():
        got = input_variants.apply([x.clone(), idx, 2.0], v, seed=9, known=known)[0]
        assert torch.equal(got[0], expect[0]) and torch.equal(got[1], idx) and got[2] == 2.0
    assert len(calls) == 1 and set(known) == {0}


def test_tritons_key_is_computed_ahead_only_where_triton_is_imported(monkeypatch):
    import sys
    import types

    from kernelfix.tools.workers.candidate import ahead

    calls = []
    cache = types.ModuleType("triton.runtime.cache")
    cache.triton_key = lambda: calls.append(1) or "3.6.0-abc"
    monkeypatch.delitem(sys.modules, "triton", raising=False)
    assert not ahead.triton_key_ahead() and calls == []  # a CUDA candidate's fork server: Triton stays unimported
    monkeypatch.setitem(sys.modules, "triton", types.ModuleType("triton"))
    monkeypatch.setitem(sys.modules, "triton.runtime.cache", cache)
    assert ahead.triton_key_ahead() and calls == [1]


def test_same_bytes_by_words_and_by_bytes_sees_every_byte(monkeypatch):
    from kernelfix.tools.correctness import chunked
    from kernelfix.tools.correctness.chunked import same_bytes

    monkeypatch.setattr(chunked, "CHUNK", 16)  # several steps either way
    for n in (1000, 1001):  # 4000 bytes: compared as 8-byte words; 4004: byte by byte
        a = torch.randn(n, generator=torch.Generator().manual_seed(n))
        assert same_bytes(a, a.clone())
        for byte in (0, 7, 2001, 4 * n - 1):
            b = a.clone()
            b.view(torch.uint8)[byte] ^= 1
            assert not same_bytes(a, b), (n, byte)
    nan = torch.full((64,), float("nan"))
    assert same_bytes(nan, nan.clone()) and not same_bytes(torch.zeros(64), torch.zeros(64).neg())  # bits, not values


def test_tritons_driver_is_started_ahead_only_where_triton_is_imported(monkeypatch):
    import sys
    import types

    from kernelfix.tools.workers.candidate import ahead

    calls: list[str] = []

    class Backend:
        def __init__(self, target):
            calls.append(f"backend {target}")

        def hash(self):
            calls.append("hash")
            return "ptxas-12.9-90"

    active = SimpleNamespace(get_current_target=lambda: calls.append("target") or "cuda:90")
    runtime_driver = types.ModuleType("triton.runtime.driver")
    runtime_driver.driver = SimpleNamespace(active=active)
    compiler = types.ModuleType("triton.compiler.compiler")
    compiler.make_backend = Backend
    monkeypatch.delitem(sys.modules, "triton", raising=False)
    assert not ahead.triton_driver_ahead() and calls == []  # a CUDA candidate's worker: Triton stays unimported
    monkeypatch.setitem(sys.modules, "triton", types.ModuleType("triton"))
    monkeypatch.setitem(sys.modules, "triton.runtime.driver", runtime_driver)
    monkeypatch.setitem(sys.modules, "triton.compiler.compiler", compiler)
    assert ahead.triton_driver_ahead() and calls == ["target", "backend cuda:90", "hash"]
    compiler.make_backend = lambda target: 1 / 0  # a Triton that differs: the first kernel call does it, as before
    assert not ahead.triton_driver_ahead()
