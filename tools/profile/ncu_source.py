"""[judge] Nsight Compute's source page (``--page source --csv --print-source cuda,sass``): per source line
of each profiled kernel, the counters the source-level findings quote (excessive global sectors,
shared-memory wavefronts, divergent branches, local-memory accesses, stall samples).

The page is a run of blocks, one per (kernel launch, source file): a ``"File Path"`` row, a
``"Function Name"`` row, a header row that starts with ``"Line No"``, then one row per source line
(its number in the file) followed by the SASS rows compiled from it (an empty ``Line No``; the
instruction in the second ``Source`` column). Each line keeps how often each SASS opcode of it ran
(``SourceRow.sass``): HMMA against HGMMA, RED/ATOM, DFMA, the integer-division sequence. A kernel
compiled without line information (no ``-lineinfo``) has SASS rows only. A Triton kernel has blocks
for its own ``.py`` and for Triton's library files it inlined; code inlined from CUDA's headers
(``atomicAdd``, ``wmma::mma_sync``) sits in blocks of those headers.
"""

from __future__ import annotations

import csv
import io

from pydantic import BaseModel, ConfigDict, Field


class SourceRow(BaseModel):
    """One source line of one kernel, with ncu's counters for it (as printed: numbers or text)."""

    model_config = ConfigDict(extra="forbid")

    file: str
    function: str
    line: int
    code: str
    metrics: dict[str, str] = Field(default_factory=dict)
    sass: dict[str, float] = Field(default_factory=dict)  # SASS opcode ("HMMA.16816.F32") -> warp instructions executed

    def ops(self, *prefixes: str) -> float:
        """Warp instructions executed of the opcodes that start with any of ``prefixes`` ("DFMA", "RED")."""
        return sum(n for op, n in self.sass.items() if op.startswith(prefixes))

    def number(self, name: str) -> float:
        """A counter as a number; 0 for '-', missing or text."""
        return _number(self.metrics.get(name, ""))


def parse(text: str) -> dict[str, list[SourceRow]]:
    """Source rows by function name, for the first launch of each function (later launches of the
    same kernel repeat its blocks)."""
    out: dict[str, list[SourceRow]] = {}
    blocks: set[tuple[str, str]] = set()  # (function, file) seen: the same pair again is a later launch
    done: set[str] = set()
    file = function = ""
    header: list[str] | None = None
    current: SourceRow | None = None  # the source line the SASS rows below belong to
    executed: int | None = None
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if row[0] == "File Path" and len(row) > 1:
            file, header, current = row[1], None, None
            continue
        if row[0] == "Function Name" and len(row) > 1:
            function = row[1]
            if (function, file) in blocks:
                done.add(function)
            blocks.add((function, file))
            continue
        if row[0] == "Line No":
            header, current = row, None
            executed = row.index("Instructions Executed") if "Instructions Executed" in row else None
            continue
        if header is None or function in done:
            continue  # a later launch
        if not row[0].strip():  # a SASS row: its opcode, counted on the source line above it
            if current is not None and len(row) > 3 and header[3] == "Source":
                words = row[3].split()
                words = words[1:] if words and words[0].startswith("@") else words  # the predicate
                if words:
                    runs = row[executed] if executed is not None and executed < len(row) else ""
                    n = _number(runs)
                    current.sass[words[0]] = current.sass.get(words[0], 0.0) + n
            continue
        try:
            line = int(row[0])
        except ValueError:
            continue
        names = [h for h in header[2:]]  # after "Line No", "Source"
        metrics = {}
        for h, v in zip(names, row[2:]):
            if h and h not in metrics:  # "Source" appears twice (CUDA and SASS columns)
                metrics[h] = v
        current = SourceRow(file=file, function=function, line=line, code=row[1].strip(), metrics=metrics)
        out.setdefault(function, []).append(current)
    return out


def _number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def rows_for(kernel_name: str, pages: dict[str, list[SourceRow]]) -> list[SourceRow]:
    """The rows of the function ncu's details page calls ``kernel_name`` (demangled, maybe with
    its parameter list; a Triton kernel's bare name)."""
    if kernel_name in pages:
        return pages[kernel_name]
    base = kernel_name.split("(")[0].strip()
    for name, rows in pages.items():
        if name.split("(")[0].strip() == base:
            return rows
    return []
