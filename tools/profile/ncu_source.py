"""Nsight Compute's source page (``--page source --csv --print-source cuda,sass``): per source line
of each profiled kernel, the counters the source-level findings quote (excessive global sectors,
shared-memory wavefronts, divergent branches, local-memory accesses, stall samples).

The page is a run of blocks, one per (kernel launch, source file): a ``"File Path"`` row, a
``"Function Name"`` row, a header row that starts with ``"Line No"``, then one row per source line
(its number in the file) followed by the SASS rows compiled from it (an empty ``Line No``). A
kernel compiled without line information (no ``-lineinfo``) has SASS rows only. A Triton kernel
has blocks for its own ``.py`` and for Triton's library files it inlined.
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

    def number(self, name: str) -> float:
        """A counter as a number; 0 for '-', missing or text."""
        text = self.metrics.get(name, "").replace(",", "")
        try:
            return float(text)
        except ValueError:
            return 0.0


def parse(text: str) -> dict[str, list[SourceRow]]:
    """Source rows by function name, for the first launch of each function (later launches of the
    same kernel repeat its blocks)."""
    out: dict[str, list[SourceRow]] = {}
    blocks: set[tuple[str, str]] = set()  # (function, file) seen: the same pair again is a later launch
    done: set[str] = set()
    file = function = ""
    header: list[str] | None = None
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if row[0] == "File Path" and len(row) > 1:
            file, header = row[1], None
            continue
        if row[0] == "Function Name" and len(row) > 1:
            function = row[1]
            if (function, file) in blocks:
                done.add(function)
            blocks.add((function, file))
            continue
        if row[0] == "Line No":
            header = row
            continue
        if header is None or not row[0].strip() or function in done:
            continue  # SASS rows, or a later launch
        try:
            line = int(row[0])
        except ValueError:
            continue
        names = [h for h in header[2:]]  # after "Line No", "Source"
        metrics = {}
        for h, v in zip(names, row[2:]):
            if h and h not in metrics:  # "Source" appears twice (CUDA and SASS columns)
                metrics[h] = v
        out.setdefault(function, []).append(SourceRow(file=file, function=function, line=line, code=row[1].strip(), metrics=metrics))
    return out


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
