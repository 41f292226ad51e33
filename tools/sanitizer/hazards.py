"""[judge] From the sanitizer's records to hazards: grouped by place, placed on the candidate's own line,
each with the fix for its kind, the candidate's kernels first.

A CUDA candidate's kernels are built with ``-lineinfo`` (tools/compile/load_inline.py), so a record
names the build's ``.cu`` file and line; that file is the ``cuda_sources`` string of the
candidate, so its line is found in the candidate's source by its text and the lines around it. A
Triton kernel's line table names the candidate's ``.py`` itself. A record in a kernel that is not
the candidate's (torch's own, launched by an op the candidate called) is kept but never blamed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

from kernelfix.tools.sanitizer.parse import Loc, Record
from kernelfix.tools.verdict import Backend, Hazard, HazardKind, SanitizerTool, SourceAt

# Most telling first: a wild access is undefined behaviour that can explain any other symptom, a
# barrier error can hide a race, and an uninitialized read often follows from either.
RANK: dict[HazardKind, int] = {
    "out_of_bounds": 0,
    "misaligned": 1,
    "device_exception": 2,
    "divergent_barrier": 3,
    "invalid_sync": 4,
    "shared_race": 5,
    "uninitialized_read": 6,
    "device_assert": 7,
    "api_error": 8,
}
WORDS: dict[HazardKind, str] = {
    "shared_race": "shared-memory race",
    "out_of_bounds": "out-of-bounds access",
    "misaligned": "misaligned access",
    "divergent_barrier": "barrier in divergent code",
    "invalid_sync": "invalid synchronization",
    "uninitialized_read": "uninitialized read",
    "device_exception": "device exception",
    "device_assert": "device-side assert",
    "api_error": "CUDA API error",
}
CONTEXT = 4  # lines each side compared when a line's text occurs more than once in the candidate


class Sources:
    """The files a hazard's line may be in: the candidate's source (as the sandbox saw it, at
    ``candidate_path``) and the build directory that holds its extensions' sources."""

    def __init__(
        self,
        candidate_source: str,
        candidate_path: str | Path,
        build_dir: str | Path | None,
        backend: Backend = "unknown",
        read: Callable[[Path], str] | None = None,
    ):
        from kernelfix.sandbox.untrusted_files import read_plain

        self.candidate = candidate_source.splitlines()
        self.candidate_path = Path(candidate_path)
        self.build_dir = Path(build_dir) if build_dir else None
        self.backend = backend
        self._read = read or (lambda p: read_plain(p, 16 << 20))
        self._files: dict[str, list[str] | None] = {}

    def _build_file(self, file: str, kernel: str) -> list[str] | None:
        """The build's copy of ``file`` (found by name: an object from the build cache names the directory
        it was first compiled in), the one that defines ``kernel`` where several share the name."""
        key = f"{file}\0{kernel}"
        if key in self._files:
            return self._files[key]
        found: list[str] | None = None
        d = self.build_dir
        if d is not None and d.is_dir() and not d.is_symlink():
            root = d.resolve()
            texts = []
            for p in sorted(d.rglob(Path(file).name))[:8]:
                if p.is_symlink() or not p.resolve().is_relative_to(root):
                    continue
                text = self._read(p)
                if text:
                    texts.append(text.splitlines())
            with_kernel = [t for t in texts if any(kernel in ln for ln in t)] if kernel else []
            pick = with_kernel or texts
            found = pick[0] if len(pick) == 1 or with_kernel else None
        self._files[key] = found
        return found

    def place(self, loc: Loc) -> SourceAt | None:
        """Where ``loc`` is: its code, and its line in the candidate, when either can be read."""
        if loc.file is None or loc.line is None:
            return None
        if Path(loc.file).name == self.candidate_path.name:  # a Triton kernel: the candidate's own .py
            code = self.candidate[loc.line - 1].strip() if 0 < loc.line <= len(self.candidate) else None
            return SourceAt(
                file=Path(loc.file).name,
                line=loc.line,
                code=code,
                candidate_line=loc.line if code is not None else None,
            )
        lines = self._build_file(loc.file, loc.kernel)
        code = lines[loc.line - 1].strip() if lines and 0 < loc.line <= len(lines) else None
        mapped = candidate_line(lines, loc.line, self.candidate) if lines else None
        return SourceAt(
            file=Path(loc.file).name, line=loc.line, code=code[:200] if code else None, candidate_line=mapped
        )

    def ours(self, loc: Loc) -> bool:
        """Whether ``loc`` is in the candidate's code: its .py, a .cu of its build, or a kernel it names."""
        if loc.file is not None and Path(loc.file).name == self.candidate_path.name:
            return True
        if loc.file is not None and self._build_file(loc.file, loc.kernel) is not None:
            return True
        name = loc.kernel.split("::")[-1].split("<")[0]
        return (
            bool(name)
            and name not in ("?", "")
            and any(re.search(rf"\b{re.escape(name)}\b", ln) for ln in self.candidate)
        )


def candidate_line(file_lines: Sequence[str], line: int, candidate: Sequence[str]) -> int | None:
    """Line ``line`` of ``file_lines`` (a .cu written from a string in the candidate) as a line of the
    candidate: where its text occurs once, that line; where it occurs more often (a ``}``, a
    ``__syncthreads();``), the occurrence whose neighbours match the file's; None where none does."""
    if not 0 < line <= len(file_lines):
        return None
    target = file_lines[line - 1].strip()
    if not target:
        return None
    hits = [i for i, text in enumerate(candidate) if text.strip() == target]
    if len(hits) <= 1:
        return hits[0] + 1 if hits else None

    def score(i: int) -> int:
        n = 0
        for d in range(-CONTEXT, CONTEXT + 1):
            a, b = line - 1 + d, i + d
            if (
                d
                and 0 <= a < len(file_lines)
                and 0 <= b < len(candidate)
                and file_lines[a].strip() == candidate[b].strip()
            ):
                n += 1
        return n

    scored = sorted(((score(i), i) for i in hits), reverse=True)
    if scored[0][0] > scored[1][0]:
        return scored[0][1] + 1
    return None


def fix(kind: HazardKind, memory: str | None, backend: Backend, api: str | None = None) -> str:
    """What to do about a hazard of this kind (never advice that another hazard's fix contradicts)."""
    triton = backend == "triton"
    if kind == "shared_race":
        if triton:
            return (
                "Two threads touch the same shared-memory word with no barrier between a write and the other's access: "
                "in Triton this comes from tl.inline_asm or a layout bug; compute with whole-block ops (tl.sum, tl.dot) instead."
            )
        return (
            "Put a barrier between the write and the other thread's access of the same shared-memory word: __syncthreads() "
            "between the steps of a block-wide tree. Inside one warp (a reduction's last steps), lanes run independently "
            "since Volta, so warp-synchronous code without a barrier races: reduce the last 32 values in registers with "
            "v += __shfl_down_sync(0xffffffff, v, offset) for offset 16, 8, 4, 2, 1, or put __syncwarp() between the steps."
        )
    if kind == "out_of_bounds":
        if memory == "shared":
            return "Index shared memory within the array's declared size: size it for blockDim and check the tile bounds (tx, ty < TILE)."
        if memory == "local":
            return "A local (per-thread) array is indexed past its length: bound the index, or size the array for the largest index."
        if triton:
            return (
                "Mask every load and store that can pass the tensor's end: mask = offs < n; tl.load(ptr + offs, mask=mask, other=0.0); "
                "tl.store(ptr + offs, y, mask=mask). The last program's block runs past n unless n is a multiple of BLOCK."
            )
        return (
            "Guard the access with the size it may reach: if (i < n) for a thread's own index (the grid is rounded up to whole "
            "blocks), c < cols (not <=) in a loop; take the bounds from the tensor's sizes, never a constant."
        )
    if kind == "misaligned":
        if memory == "shared":
            return "A shared array read through a wider type (float4, int4) must be aligned to that size: declare it __align__(16)."
        return (
            "A vector access (float4: 16 bytes) needs an address that is a multiple of its size; a row of a length that is no "
            "multiple of 4 floats breaks that from the second row on. Use float4 only when the pointer and the row stride are "
            "multiples of 4 elements (check on the host and pick the kernel), else scalar accesses, or scalar accesses for each "
            "row's unaligned head and tail."
        )
    if kind == "divergent_barrier":
        return (
            "Every thread of the block must reach the same __syncthreads(): keep the condition on the work, not on the barrier "
            "(if (tid < s) part[tid] += part[tid + s]; then __syncthreads(); outside the if), and never return early before a "
            "barrier. A __syncwarp(mask) must be reached by every lane its mask names."
        )
    if kind == "invalid_sync":
        return (
            "The mask given to __syncwarp / __shfl_*_sync / a named barrier must name exactly the threads that execute it: "
            "0xffffffff only where all 32 lanes are active, else __activemask() or __ballot_sync of the branch's condition."
        )
    if kind == "uninitialized_read":
        return (
            "A kernel read global memory nothing wrote: torch.empty (torch::empty) returns garbage. Zero what you accumulate into "
            "(torch.zeros, or store the first value: y[i] = sum, not y[i] += sum) and write every element of a buffer before "
            "any kernel reads it."
        )
    if kind == "device_assert":
        return (
            "A device-side assert fired: its condition is false for these inputs; check the indices and sizes it tests."
        )
    if kind == "api_error":
        return (
            f"The CUDA call failed ({api}): a launch needs blocks of at most 1024 threads, dynamic shared memory within the "
            "limit (above 48 KB only after cudaFuncSetAttribute(..., cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)) "
            "and a grid within 2^31-1 x 65535 x 65535."
            if api
            else "A CUDA API call failed: check the launch configuration."
        )
    return "The kernel faulted on the GPU: check every index against its tensor's size and every pointer's dtype and alignment."


_HEX = re.compile(r"\s*at 0x[0-9a-fA-F]+|\+0x[0-9a-fA-F]+|0x[0-9a-fA-F]+ ?")
# Errors a CUDA call returns because a kernel faulted before it: the fault is the hazard, not the call.
_AFTER_FAULT = re.compile(
    r"LaunchFailure|IllegalAddress|MisalignedAddress|Assert|IllegalInstruction|HardwareStackError|InvalidPc|"
    r"ILLEGAL_ADDRESS|LAUNCH_FAILED|MISALIGNED|ASSERT",
    re.I,
)


def _api_is_ours(api: str | None) -> bool:
    """A failed launch is the candidate's own call (its configuration); other calls that fail inside torch, or
    fail because a kernel faulted before them, are not."""
    if not api:
        return False
    call, _, err = api.partition(":")
    return "Launch" in call and not _AFTER_FAULT.search(err)


def _detail(rec: Record) -> str | None:
    parts = []
    if rec.address:
        parts.append(_HEX.sub("", rec.address).replace("  ", " ").strip())
    if rec.thread is not None:
        parts.append(f"thread ({rec.thread})" + (f" of block ({rec.block})" if rec.block else ""))
    return "; ".join(p for p in parts if p) or None


def _first(frames: Sequence[Loc], src: Sources) -> Loc | None:
    """The first frame in the candidate's code (an inlined library function's caller), else the first."""
    return next((f for f in frames if f.file is not None and src.ours(f)), frames[0] if frames else None)


def from_records(tool: SanitizerTool, records: Sequence[Record], src: Sources) -> list[Hazard]:
    """Records grouped by (kind, kernel, place), placed and given their fix."""
    out: dict[tuple, Hazard] = {}
    for rec in records:
        at = _first(rec.frames, src)
        other = _first(rec.other, src)
        kernel = (rec.frames[-1] if rec.frames else at).kernel if (rec.frames or at) else "?"
        if rec.kind == "api_error":
            kernel = "?"
        where = src.place(at) if at else None
        there = src.place(other) if other else None
        mine = _api_is_ours(rec.api) if rec.kind == "api_error" else any(src.ours(f) for f in [*rec.frames, *rec.other])
        key = (
            rec.kind,
            kernel,
            where and (where.file, where.line),
            there and (there.file, there.line),
            rec.access,
            rec.memory,
        )
        if key in out:
            out[key].count += rec.count
            continue
        header = " ".join(_HEX.sub("", rec.header).split())
        out[key] = Hazard(
            tool=tool,
            kind=rec.kind,
            kernel=kernel,
            what=(header + (f" ({rec.api})" if rec.api and rec.api not in header else ""))[:300],
            where=where,
            other=there,
            memory=rec.memory if rec.memory in ("global", "shared", "local", "generic") else None,  # type: ignore[arg-type]
            access=rec.access,
            size_bytes=rec.size_bytes,
            detail=_detail(rec),
            count=rec.count,
            in_candidate=mine,
            fix=fix(rec.kind, rec.memory, src.backend, rec.api),
        )
    return list(out.values())


def ordered(hazards: Sequence[Hazard]) -> list[Hazard]:
    """The candidate's hazards first, most telling kind first, then the most reported. An uninitialized read
    where an access goes out of bounds is that access's consequence (initcheck, without memcheck's padding,
    sees the bytes past the tensor as memory nothing wrote): it is left out, so its fix cannot mislead."""
    wild = {(h.where.file, h.where.line) for h in hazards if h.where and h.kind in ("out_of_bounds", "misaligned")}
    kept = [
        h for h in hazards if not (h.kind == "uninitialized_read" and h.where and (h.where.file, h.where.line) in wild)
    ]
    return sorted(kept, key=lambda h: (not h.in_candidate, RANK.get(h.kind, 99), -h.count))


def _at(s: SourceAt | None) -> str:
    if s is None:
        return ""
    line = f"line {s.candidate_line} of your source" if s.candidate_line is not None else f"{s.file}:{s.line}"
    return f" at {line}" + (f": `{s.code}`" if s.code else "")


def describe(h: Hazard) -> str:
    """One line for the feedback: the kind, where, with the tool's numbers."""
    if h.kind == "shared_race":
        acc = (h.access or "").split("-")
        first = acc[0] if acc and acc[0] in ("read", "write") else "an access"
        second = acc[1] if len(acc) > 1 else "another access"
        text = f"shared-memory race in {h.kernel}: a {first}{_at(h.where)}"
        if h.other is not None and (h.where is None or (h.other.file, h.other.line) != (h.where.file, h.where.line)):
            text += f", and a {second}{_at(h.other)}"
        elif h.other is not None:
            text += f" (and a {second} on the same line by another thread)"
        text += " of the same shared-memory word, with no barrier between them"
        return text + (f" ({h.count} hazards)" if h.count > 1 else "")
    mem = f"{h.memory} " if h.memory and h.memory != "generic" else ""
    size = f" of {h.size_bytes} bytes" if h.size_bytes else ""
    adjective = {
        "out_of_bounds": "out-of-bounds",
        "misaligned": "misaligned",
        "uninitialized_read": "uninitialized",
    }.get(h.kind)
    if adjective and h.access:
        head = f"{adjective} {mem}{h.access}{size}"  # "out-of-bounds global read of 4 bytes"
    else:
        head = WORDS[h.kind]
    text = f"{head} in {h.kernel}{_at(h.where)}" if h.kernel != "?" else f"{head}: {h.what}"
    if h.kind in ("divergent_barrier", "invalid_sync", "device_exception", "device_assert"):
        text += f" ({h.what})"
    if h.detail:
        text += f"; {h.detail}"
    return text + (f" ({h.count} reports)" if h.count > 1 else "")
