"""The judge/worker protocol (tools/transport/protocol.py): every message name the code sends or waits for is
declared there, read from the source with ast, and messages cross a real pipe and socket intact."""

from __future__ import annotations

import ast
import os
import socket
import time
from pathlib import Path

import pytest

from kernelfix.sandbox.channel import ChildChannel, MessageReader, RequestSocket
from kernelfix.tools.transport import ArenaSpec, TensorSpec
from kernelfix.tools.transport.protocol import (
    REPLIES,
    REQUESTS,
    CandidateOutput,
    CandidateTiming,
    Check,
    Prepared,
    ProtocolError,
    RunTrial,
    Sized,
    Surveyed,
    WallEnd,
    WorkerError,
    of_kind,
    parse,
)

TOOLS = Path(__file__).resolve().parent.parent / "tools"
DECLARED = set(REPLIES) | set(REQUESTS)
STATS = {"median_ms": 1.0, "mean_ms": 1.0, "std_ms": 0.0, "min_ms": 1.0, "p10_ms": 1.0, "p90_ms": 1.0, "runs": 10}


def _names_in_code() -> list[tuple[str, str]]:
    return [
        found for path in TOOLS.rglob("*.py") for found in _names(path.read_text(), str(path.relative_to(TOOLS.parent)))
    ]


def _names(source: str, file: str) -> list[tuple[str, str]]:
    """(where, name) of each message name written as a literal: ``X.send("name", ...)``, ``expect(["name"])``,
    ``X.get("type") == "name"`` and ``{"type": "name"}``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{file}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            first = node.args[0]
            if node.func.attr == "send" and isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.append((where, first.value))
            if node.func.attr == "expect" and isinstance(first, ast.List):
                found += [(where, e.value) for e in first.elts if isinstance(e, ast.Constant)]
        if isinstance(node, ast.Compare) and len(node.comparators) == 1:
            left, right = node.left, node.comparators[0]
            for a, b in ((left, right), (right, left)):
                if (
                    isinstance(a, ast.Call)
                    and isinstance(a.func, ast.Attribute)
                    and a.func.attr == "get"
                    and a.args
                    and isinstance(a.args[0], ast.Constant)
                    and a.args[0].value == "type"
                    and isinstance(b, ast.Constant)
                    and isinstance(b.value, str)
                ):
                    found.append((where, b.value))
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if (
                    isinstance(k, ast.Constant)
                    and k.value == "type"
                    and isinstance(v, ast.Constant)
                    and isinstance(v.value, str)
                ):
                    found.append((where, v.value))
    return found


def test_every_message_name_in_tools_is_declared_in_the_protocol():
    names = _names_in_code()
    undeclared = [f"{where}: {name!r}" for where, name in names if name not in DECLARED]
    assert not undeclared, "messages not in tools/transport/protocol.py:\n" + "\n".join(undeclared)


def test_no_worker_sends_a_bare_name_any_more():
    """Every worker message goes through Worker.say (a typed message): a literal name on chan.send is a stray."""
    bare = [
        f"{where}: {name}" for where, name in _names_in_code() if "workers/" in where and name not in ("go", "exit")
    ]
    assert not bare, bare


def test_the_sanity_of_the_scan_itself():
    """The scan sees what it is looking for (a scan that found nothing would pass the test above vacuously)."""
    probe = 'chan.send("wall_start", calls=1)\nm.get("type") == "bogus"\nh.expect(["built"])\nx = {"type": "fds"}'
    assert {n for _, n in _names(probe, "probe.py")} == {"wall_start", "bogus", "built", "fds"}


def test_a_misspelt_name_or_field_fails_loudly():
    with pytest.raises(ProtocolError, match="expected a 'wall_end'"):
        parse({"type": "wall_ends", "calls": 3}, WallEnd)
    with pytest.raises(ProtocolError, match="calsl"):
        parse({"type": "wall_end", "calsl": 3}, WallEnd)
    with pytest.raises(ValueError):
        WallEnd(calsl=3)  # type: ignore[call-arg]
    with pytest.raises(
        ProtocolError, match="candidate"
    ):  # a malformed stats block: the benchmark calls it manipulation
        of_kind([{"type": "candidate_timing", "candidate": {"median_ms": "fast"}}], CandidateTiming)


def _pipe_round_trip(messages: list) -> list[dict]:
    r, w = os.pipe()
    reader = MessageReader(r, time.monotonic(), "tok", None)
    chan = ChildChannel(w, "tok")
    for m, rid in messages:
        wire = m.wire() | ({"id": rid} if rid is not None else {})
        chan.send(wire.pop("type"), **wire)
    os.close(w)
    reader.thread.join(5)
    return reader.snapshot()


def test_replies_cross_the_authenticated_pipe_and_parse_back_the_same():
    out = CandidateOutput(
        index=2,
        out=7,
        skeleton=["leaf", 0],
        specs=[TensorSpec(dtype="float32", shape=[2, 3], stride=[3, 1], span=6)],
        copied=True,
        forward_ms=0.5,
    )
    sent = [
        (out, 4),
        (CandidateTiming.model_validate({"candidate": STATS}), None),
        (WallEnd(calls=300), None),
        (
            WorkerError(
                kind="exception", phase="forward", exc_type="RuntimeError", classes=["RuntimeError", "Exception"]
            ),
            None,
        ),
        (Surveyed(trials=[Prepared(index=0, ref_ms=1.5)], cache_used=64), 9),
        (Sized(input_bytes=10, output_bytes=20, gpu_total_bytes=1 << 30), None),
    ]
    got = _pipe_round_trip(sent)
    assert [g["type"] for g in got] == [m.KIND for m, _ in sent]
    assert got[0]["id"] == 4 and got[4]["id"] == 9 and all("_t" in g for g in got)
    assert got[3]["mro"] == ["RuntimeError", "Exception"]  # the wire's own key, as classify reads it
    for (m, _), raw in zip(sent, got):
        back = parse(raw, type(m))
        assert back.model_dump() == m.model_dump() and back.at == raw["_t"]


def test_a_request_crosses_the_socket_with_its_fds_and_parses_back():
    a, b = socket.socketpair()
    r, w = os.pipe()
    try:
        arena = ArenaSpec(kind="host", size=4096)
        spec = TensorSpec(dtype="float16", shape=[4], stride=[1], span=4)
        req = RunTrial(
            index=1,
            slot=3,
            in_arena=arena,
            inputs=["leaf"],
            input_specs=[spec],
            out=6,
            out_arena=arena,
            expected_specs=[spec],
            id=11,
        )
        assert RequestSocket(a).send(req.wire(), [r])
        raw, fds = RequestSocket(b).recv(timeout=5)
        assert raw["type"] == "trial" and raw["id"] == 11 and len(fds) == 1
        assert parse(raw, RunTrial) == req
        check = Check(trial=1, output=CandidateOutput(index=1, out=6), slot=3, id=12)
        assert parse(check.wire(), Check) == check
        for fd in fds:
            os.close(fd)
    finally:
        a.close(), b.close(), os.close(r), os.close(w)


def test_every_declared_message_names_itself_once():
    assert all(cls.KIND == name for name, cls in {**REPLIES, **REQUESTS}.items())
    assert {"candidate_timing", "wall_start", "wall_issued", "wall_end", "timed"} <= set(REPLIES)
