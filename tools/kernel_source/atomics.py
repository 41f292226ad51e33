"""[judge] What an atomic is used for, read from the candidate's source at its line, so that a finding of contended
atomics carries the fix for that use (tools/profile/memory_findings.py):

- ``counter``: its returned value indexes the work (``i = atomicAdd(next, 1)``, then ``y[i]``): every element
  costs one atomic on one address. A grid-stride loop needs none; dynamic balancing claims a chunk per atomic.
- ``data``: its address is computed from the data (``atomicAdd(&hist[bin], 1)``): a histogram. Privatize per block,
  then one atomic per bin.
- ``one_address``: the threads accumulate into one address (``atomicAdd(out, v)``, ``atomicAdd(&y[blockIdx.x], v)``
  from every thread of the block): reduce per block first, then one atomic per block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kernelfix.tools.kernel_source import cuda_text, triton_ast
from kernelfix.tools.kernel_source import deps as D
from kernelfix.tools.kernel_source.cuda_text import Site

Use = Literal["counter", "data", "one_address"]

FIX: dict[Use, str] = {
    "counter": (
        "a counter that hands out work: each {call} on `{target}` returns the next element, so every element costs an atomic on "
        "one address, one after another in the L2. Hand the work out by position instead: a grid-stride loop "
        "(for (i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x); Triton: one program per BLOCK of "
        "elements from tl.program_id, or a persistent grid whose programs step by tl.num_programs) needs no counter. Where dynamic "
        "balancing is the point, claim a chunk per atomic: one lane per warp (or thread 0 of the block) takes "
        "base = atomicAdd(next, CHUNK) for 32 or blockDim.x times several elements, shares it (__shfl_sync, or shared memory and "
        "__syncthreads()), and the warp or block loops over its chunk; Triton: tl.atomic_add(next_ptr, BLOCK) once per program"
    ),
    "data": (
        "privatize: accumulate per block in shared memory (a private histogram per warp or block, integer shared-memory atomics), "
        "then one global atomic per bin per block; where many lanes of a warp hit the same bin, aggregate in the warp first "
        "(__match_any_sync, then the leader adds __popc of its peers). Triton: tl.histogram per program, then one "
        "tl.atomic_add of the whole histogram per program, with a persistent grid. On Hopper a thread-block cluster can share one "
        "histogram in distributed shared memory. Do not reorder lanes for coalescing: the scattered addresses are the updates' targets"
    ),
    "one_address": (
        "one address that all threads accumulate into (`{target}`): reduce first and add once per block: a warp sums its lanes with "
        "__shfl_down_sync (offsets 16, 8, 4, 2, 1), the block its warps through shared memory, then thread 0 does one {call}; "
        "or write per-block partials to slots of their own and add them in a second pass. Triton: tl.sum over the block, one "
        "tl.atomic_add per program, and fewer programs that each loop over several blocks (a persistent grid)"
    ),
}


@dataclass(frozen=True)
class AtomicUse:
    use: Use
    line: int
    call: str  # "atomicAdd", "tl.atomic_add"
    target: str  # its address as written

    @property
    def fix(self) -> str:
        return FIX[self.use].format(call=self.call, target=self.target)


def _classify(site: Site, language: str) -> Use | None:
    if site.claims_work:
        return "counter"
    if D.DATA in site.index:
        return "data"
    seen = D.union(site.index, site.pins)
    spread = D.covers(seen, "tx") if language == "cuda" else D.LANE in site.index
    return None if spread else "one_address"


def uses(source: str | None) -> list[AtomicUse]:
    """Each atomic call of the candidate's kernels whose use is one of the three, in line order."""
    if not source:
        return []
    out = []
    for language, reader in (("cuda", cuda_text.kernels), ("triton", triton_ast.kernels)):
        for k in reader(source):
            for s in k.sites:
                if s.kind != "rmw" and (use := _classify(s, language)) is not None:
                    out.append(AtomicUse(use=use, line=s.line, call=s.kind, target=s.target))
    return sorted(out, key=lambda u: u.line)


def use_at(source: str | None, line: int | None) -> AtomicUse | None:
    """The use of the atomic on ``line`` of the candidate; where the line is not known (or has none), the use every
    atomic of the source shares, if they share one."""
    found = uses(source)
    at = [u for u in found if line is not None and u.line == line]
    if at:
        return at[0]
    kinds = {u.use for u in found}
    return found[0] if len(kinds) == 1 else None
