"""The reference worker's spare arenas (tools/workers/reference/arenas.py): a trial's GPU arenas kept for the same
evaluation's next trial, never another's, and given back when its stage ends, on ``trim`` and before an OOM retry.

On the H100 a 6 GiB arena took 1.6 ms to make and 5.6 ms to give back (bench/arena_cost.py), two of them on each of a
6 GiB ReLU's nine trials. GPU arenas exist only on the device; here they are stand-ins with the same spec, made by a
patched ``Arena.create``, so the rules run on the CPU (tests/test_transport.py maps a real one again on the GPU).
"""

from __future__ import annotations

import pytest

from kernelfix.tools.transport import Arena, ArenaSpec
from kernelfix.tools.transport.protocol import Release
from kernelfix.tools.workers.child import Worker
from kernelfix.tools.workers.reference import arenas as arenas_mod
from kernelfix.tools.workers.reference.arenas import SPARES_PER_OWNER, Handoff, Out, Slot


class FakeArena:
    made = 0

    def __init__(self, size: int) -> None:
        FakeArena.made += 1
        self.spec = ArenaSpec(kind="cuda", size=size)
        self.fd: int | None = 100 + FakeArena.made
        self.released = False
        self.exports = 0

    def export(self) -> None:
        assert self.fd is None and not self.released
        self.exports += 1
        self.fd = 200 + self.exports

    def release(self) -> None:
        self.released = True


class Chan:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict]] = []

    def send(self, kind: str, **kw) -> None:
        self.sent.append((kind, kw))


class Server(Handoff):
    def __init__(self) -> None:
        self.spares: dict[str, list] = {}
        self.slots: dict[int, Slot] = {}
        self.outs: dict[int, Out] = {}
        self.arena_kind, self.device, self.cuda = "cuda", "cuda:0", True
        self.w = type("W", (), {"chan": Chan(), "say": Worker.say})()  # the worker's own say, over a recording channel

    def hand(self, sid: int, arena) -> None:  # as prepare leaves it: in use, its fd sent
        arena.fd = None
        self.slots[sid] = Slot(arena, [], 0)

    def spare(self, sid: int, size: int, owner: str):
        """An arena made for ``owner``'s trial, handed over and given back with ``keep``: now its spare."""
        a = self._arena(size, owner)
        self.hand(sid, a)
        self.release(Release(**{"slots": [sid], "owner": owner, "keep": True}), [])
        return a


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setattr(Arena, "create", staticmethod(lambda size, kind, device=0: FakeArena(size)))
    monkeypatch.setattr(Arena, "allocated_size", staticmethod(lambda size, kind, device=0: size))
    monkeypatch.setattr(arenas_mod, "free", lambda cuda: None)
    return Server()


def test_the_next_trial_of_the_same_evaluation_takes_its_arena_again(server):
    a = server._arena(1 << 30, "ev1")
    server.hand(1, a)
    server.release(Release(**{"slots": [1], "owner": "ev1", "keep": True}), [])
    assert not a.released and server.spares == {"ev1": [a]}
    b = server._arena(1 << 30, "ev1")
    assert b is a and a.fd is not None and a.exports == 1  # the same memory, a new fd to send
    assert server.spares["ev1"] == []


def test_another_evaluation_never_gets_it(server):
    a = server.spare(1, 1 << 30, "ev1")
    b = server._arena(1 << 30, "ev2")  # its candidate's process may still map ev1's arenas
    assert b is not a and server.spares["ev1"] == [a]


def test_a_spare_of_another_size_is_not_taken(server):
    a = server.spare(1, 1 << 30, "ev1")
    assert server._arena(2 << 30, "ev1") is not a and server.spares["ev1"] == [a]


def test_the_stage_end_gives_the_owners_spares_back_and_no_one_elses(server):
    mine, theirs = server.spare(1, 1 << 30, "ev1"), server.spare(2, 1 << 30, "ev2")
    server.release(Release(**{"slots": [], "owner": "ev1"}), [])  # ev1's stage is over
    assert mine.released and not theirs.released and list(server.spares) == ["ev2"]


def test_a_release_without_keep_releases_at_once(server):
    a = server._arena(1 << 30, "ev1")
    server.hand(1, a)
    server.release(Release(**{"slots": [1], "owner": "ev1"}), [])
    assert a.released and not server.spares


def test_an_owner_keeps_at_most_a_few(server):
    made = [server._arena(1 << 30, "ev1") for _ in range(SPARES_PER_OWNER + 2)]
    for i, a in enumerate(made):
        server.hand(i, a)
    server.release(Release(**{"slots": list(range(len(made))), "owner": "ev1", "keep": True}), [])
    assert len(server.spares["ev1"]) == SPARES_PER_OWNER and sum(a.released for a in made) == 2


def test_trim_and_an_out_of_memory_retry_give_every_spare_back(server, monkeypatch):
    a, b = server.spare(1, 1 << 30, "ev1"), server.spare(2, 1 << 30, "ev2")
    assert server._drop_spares() == 2 << 30 and a.released and b.released and not server.spares
    c = server.spare(3, 1 << 30, "ev1")
    calls = []

    def create(size, kind, device=0):
        calls.append(size)
        if len(calls) == 1:
            raise RuntimeError("CUDA error: out of memory")
        return FakeArena(size)

    monkeypatch.setattr(Arena, "create", staticmethod(create))
    d = server._arena(3 << 30, "ev3")  # no spare fits: made new, and the first try's OOM gives the spares back
    assert isinstance(d, FakeArena) and c.released and not server.spares and calls == [3 << 30, 3 << 30]


def test_a_float64_truth_short_of_memory_takes_spares_one_at_a_time(server):
    big, small = server.spare(1, 2 << 30, "ev1"), server.spare(2, 1 << 30, "ev2")
    assert server._drop_one_spare() and big.released and not small.released  # the largest first
    assert server._drop_one_spare() and small.released
    assert not server._drop_one_spare()
