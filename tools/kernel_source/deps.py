"""[judge] What an index depends on: the thread's own position (CUDA's threadIdx/blockIdx, Triton's program ids and
``tl.arange`` lanes), data read from memory, or nothing (a constant, a size, a uniform value).

A dependence maps each source to the parts of it the value keeps: ``all`` (the whole of it, as ``i`` in
``blockIdx.x * blockDim.x + threadIdx.x``), ``hi`` (what a division or right shift keeps: ``blockIdx.x / 4``), ``lo``
(what a modulo or mask keeps: ``threadIdx.x % 32``). An index tells the threads that write through it apart when it
covers each source they differ in: all of it, or both its high and low parts (``row = i / cols`` and ``col = i %
cols`` together in ``row * cols + col``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

Dep = dict[str, frozenset[str]]

# The position sources: CUDA's thread and block index per axis, Triton's program id per axis and its block's lanes.
THREAD = ("tx", "ty", "tz")
BLOCK = ("bx", "by", "bz")
PROGRAM = ("p0", "p1", "p2")
LANE = "lane"
DATA = "data"  # a value read from memory: equal values send several threads to one element
WORDS = {
    "tx": "threadIdx.x",
    "ty": "threadIdx.y",
    "tz": "threadIdx.z",
    "bx": "blockIdx.x",
    "by": "blockIdx.y",
    "bz": "blockIdx.z",
    "p0": "tl.program_id(0)",
    "p1": "tl.program_id(1)",
    "p2": "tl.program_id(2)",
    LANE: "tl.arange",
}
ALL, HI, LO = "all", "hi", "lo"


def of(source: str) -> Dep:
    return {source: frozenset({ALL})}


def union(*deps: Mapping[str, frozenset[str]]) -> Dep:
    out: Dep = {}
    for d in deps:
        for k, v in d.items():
            out[k] = out.get(k, frozenset()) | v
    return out


def part(dep: Mapping[str, frozenset[str]], piece: str) -> Dep:
    """What ``dep / n`` (``piece`` hi) or ``dep % n`` (lo) keeps of each source."""
    return {k: frozenset({piece}) for k in dep}


def covers(dep: Mapping[str, frozenset[str]], source: str) -> bool:
    parts = dep.get(source, frozenset())
    return ALL in parts or {HI, LO} <= parts


def pinned(dep: Mapping[str, frozenset[str]], sources: Iterable[str]) -> Dep:
    """Of ``sources``, what an equality with a constant fixes (``threadIdx.x == 0`` pins all of tx, ``lane == 0`` its low part)."""
    return {k: v for k, v in dep.items() if k in sources}


def missing(
    index: Mapping[str, frozenset[str]], needed: Iterable[str], pins: Mapping[str, frozenset[str]]
) -> list[tuple[str, str]]:
    """The sources the writing threads differ in that ``index`` does not tell apart, each with ``absent`` (the index
    does not use it) or ``partial`` (it keeps only part of it), after the parts the guards pin."""
    out = []
    for s in needed:
        have = index.get(s, frozenset()) | pins.get(s, frozenset())
        if ALL in have or {HI, LO} <= have:
            continue
        out.append((s, "partial" if index.get(s) else "absent"))
    return out
