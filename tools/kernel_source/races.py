"""[judge] Races on global memory, read from the candidate's source: a read-modify-write without an atomic
(``p[i] += v``, ``p[i] = p[i] op v``, ``tl.store(p, tl.load(p) + v)``) whose element more than one thread or
program can reach, because its index

- comes from data (``out[idx[i]] += v``: repeated indices send several threads to one element),
- does not depend on a part of the thread's position the writers differ in (``y[blockIdx.x] += v`` run by every
  thread of the block; ``y[row]`` with ``row = tl.program_id(0)`` in a grid whose second axis splits the row),
- or drops part of it (``row = blockIdx.x / 4``: four blocks share each row).

Racecheck sees shared memory only, so such a race shows as a wrong output, or as two calls on the same inputs that
differ, with no hazard from any tool. Each race found gets the fix for its kind: an atomic, a second pass over
per-block partials, or one writer per element.
"""

from __future__ import annotations

from kernelfix.tools.kernel_source import cuda_text, triton_ast
from kernelfix.tools.kernel_source import deps as D
from kernelfix.tools.kernel_source.cuda_text import Kernel, Site
from kernelfix.tools.verdict import GlobalRace

LOOKED_FOR = (
    "read-modify-writes of global memory without an atomic (p[i] += v, p[i] = p[i] op v, "
    "tl.store(p, tl.load(p) + v)) at an index that several threads or programs can reach"
)

_FIX = {
    ("cuda", "blocks"): (
        "make the update atomic (atomicAdd({a}, v): the order of float additions then varies between calls, "
        "within rounding), or write each block's partial to a slot of its own (partial[blockIdx.x]) and add them "
        "in a second pass (a second kernel, or the last block to finish), or give each output element one block "
        "that loops over its whole reduction (one writer per element)"
    ),
    ("cuda", "threads"): (
        "reduce across the block first (warp shuffles, then shared memory) and let one thread write the result "
        "(if (threadIdx.x == 0) {t} = sum, with blocks that own their elements), or make each update atomic "
        "(atomicAdd({a}, v))"
    ),
    ("cuda", "data"): (
        "make each update atomic (atomicAdd({a}, v)): repeated indices then add up instead of overwriting each "
        "other; or sort the updates by index and let one thread sum each run of equal indices (one writer per element)"
    ),
    ("triton", "programs"): (
        "use tl.atomic_add({a}, value) instead of a load, an add and a store; or store each program's partial "
        "at an offset of its own (partial_ptr + pid) and reduce the partials in a second kernel; or give each "
        "output one program that loops over its whole reduction (one writer per element)"
    ),
    ("triton", "data"): (
        "use tl.atomic_add({a}, v, mask=mask): an atomic per element adds up repeated indices, within a block "
        "and across programs (a tl.store of a block with repeated offsets keeps one lane's value); or sort the "
        "updates by index and sum each run of equal indices in one program"
    ),
}


def find(source: str | None) -> list[GlobalRace]:
    """Every racing read-modify-write of global memory in ``source`` (a candidate's file: CUDA kernels in its strings,
    Triton kernels in its Python), in line order."""
    if not source:
        return []
    out = [
        r for k in cuda_text.kernels(source) for s in k.sites if s.kind == "rmw" and (r := _race(source, k, s, "cuda"))
    ]
    out += [
        r
        for k in triton_ast.kernels(source)
        for s in k.sites
        if s.kind == "rmw" and (r := _race(source, k, s, "triton"))
    ]
    return sorted(out, key=lambda r: r.line)


def _race(source: str, k: Kernel, s: Site, language: str) -> GlobalRace | None:
    code = cuda_text.line_text(source, s.line)
    element = f"`{s.target}`" if language == "cuda" else f"the element at `{s.target}`"
    if D.DATA in s.index:
        who = "threads" if language == "cuda" else "lanes and programs"
        why = (
            f"{element} is read, added to and written back without an atomic at an index read from memory: {who} whose "
            "data hold the same index add into one element at once, and one's write overwrites the other's"
        )
        return _made(k, s, code, "data", why, language)
    positions = D.THREAD + D.BLOCK if language == "cuda" else D.PROGRAM
    needed = [p for p in positions if p in k.used]
    missing = D.missing(s.index, needed, s.pins)
    if not missing:
        return None
    parts = [
        f"does not depend on {D.WORDS[p]}"
        if how == "absent"
        else f"keeps only part of {D.WORDS[p]} (a division or modulo of it)"
        for p, how in missing
    ]
    if language == "triton":
        reason, who = "programs", "several programs of the grid"
    elif any(p in D.BLOCK for p, _ in missing):
        reason, who = "blocks", "several blocks"
    else:
        reason, who = "threads", "the threads of a block" + (" that pass its condition" if s.pins else "")
    why = (
        f"{element} is read, added to and written back without an atomic, and its index {' and '.join(parts)}: {who} "
        "reach the same element, each reads it, adds its part and writes it back, and one's write overwrites another's"
    )
    return _made(k, s, code, reason, why, language)


def _made(k: Kernel, s: Site, code: str, reason: str, why: str, language: str) -> GlobalRace:
    if language == "triton":
        address = s.target
    elif s.target.startswith("*"):
        address = s.target[1:].strip()
        address = address[1:-1] if address.startswith("(") and address.endswith(")") else address
    else:
        address = f"&{s.target}"
    return GlobalRace(
        kernel=k.name,
        line=s.line,
        code=code[:200],
        target=s.target,
        reason=reason,  # type: ignore[arg-type]
        why=why,
        fix=_FIX[(language, reason)].format(t=s.target, a=address),
    )
