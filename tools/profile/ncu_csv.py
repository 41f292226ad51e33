"""[judge] Nsight Compute's CSV output, parsed into kernels and their metrics.

Two layouts: ``--page details`` (one row per metric or rule: kernel columns,
then Section Name, Metric Name, Metric Unit, Metric Value, and for rules Rule
Name, Rule Type, Rule Description, Estimated Speedup) and ``--page raw`` (one
row per kernel, one column per metric, a units row under the header). ncu's
own lines (``==PROF==``, ``==WARNING==``, ``==ERROR==``) may come before,
among or after the rows; numbers carry thousands separators ("2,618,440.24").
Values are brought to base units (s, byte, byte/s, hz) whatever prefix ncu
printed them with.
"""

from __future__ import annotations

import csv
import io
import re

from pydantic import BaseModel, ConfigDict, Field

# The start/end NVTX range the profiled backward runs in (tools/workers/profile_target.py): autograd launches a
# CUDA backward from its own thread, which a push/pop range does not reach.
BACKWARD_RANGE = "kernelfix_backward"

_KERNEL_COLUMNS = (
    "ID",
    "Process ID",
    "Process Name",
    "Kernel Name",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
)

# prefix -> factor, for the unit families ncu rescales
_SI = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
_TIME = {"ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3, "msecond": 1e-3, "s": 1.0, "second": 1.0}
_UNIT = re.compile(r"^(?P<prefix>Ki|Mi|Gi|Ti|[KMGTP]?)(?P<base>byte|B|hz|Hz)(?P<rate>/s|/second|/sec)?$")


class NcuMetric(BaseModel):
    model_config = ConfigDict(extra="forbid")

    section: str = ""  # details page: the section's display name; raw page: empty
    name: str  # as ncu prints it: "DRAM Throughput" (details) or "dram__bytes.sum" (raw, and --metrics)
    value: float | None  # in base units; None for text ("no data", "PolicySpread")
    unit: str  # after normalization: "s", "byte", "byte/s", "hz", "%", or ncu's as printed
    text: str  # as printed


class NcuRule(BaseModel):
    """One of ncu's rule results: its advice, and the speedup it estimates for following it."""

    model_config = ConfigDict(extra="forbid")

    section: str
    name: str
    kind: str  # OPT, WRN, INF, ERR
    description: str
    speedup_pct: float | None = None
    speedup_type: str | None = None  # local, global


class NcuKernel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: int
    process: str | None = None
    name: str
    grid: str | None = None
    block: str | None = None
    device: str | None = None
    cc: str | None = None
    metrics: list[NcuMetric] = Field(default_factory=list)
    rules: list[NcuRule] = Field(default_factory=list)
    start_end_ranges: str = ""  # the NVTX start/end ranges open at its launch, as ncu prints them (--nvtx)

    @property
    def in_backward(self) -> bool:
        """Launched inside the profiled backward (``BACKWARD_RANGE``), not the forward."""
        return BACKWARD_RANGE in self.start_end_ranges

    def get(self, name: str, section: str | None = None) -> float | None:
        """A metric's value by the name ncu prints (in ``section``'s display name, if given)."""
        for m in self.metrics:
            if m.name == name and (section is None or m.section == section):
                return m.value
        return None

    def matching(self, pattern: re.Pattern[str]) -> dict[str, float]:
        """Metrics whose name matches ``pattern`` in full, by name."""
        return {m.name: m.value for m in self.metrics if m.value is not None and pattern.fullmatch(m.name)}


class NcuOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    page: str  # "details", "raw" or "none" (no CSV table found)
    kernels: list[NcuKernel] = Field(default_factory=list)
    messages: list[str] = Field(default_factory=list)  # ncu's own ==PROF==/==WARNING==/==ERROR== lines

    def problems(self) -> list[str]:
        return [m for m in self.messages if m.startswith(("==ERROR==", "==WARNING=="))]


def parse_number(text: str) -> float | None:
    t = text.strip().replace(",", "")
    if not t:
        return None
    try:
        return float(t)
    except ValueError:
        return None


def normalize(value: float | None, unit: str) -> tuple[float | None, str]:
    """A value and its unit in base units: 175.3 usecond -> 1.753e-4 s; 2.9 Tbyte/s -> 2.9e12 byte/s."""
    u = unit.strip()
    if u in _TIME:
        return (None if value is None else value * _TIME[u]), "s"
    m = _UNIT.match(u)
    if m:
        prefix = m.group("prefix")
        factor = _BIN.get(prefix) or _SI.get(prefix, 1.0)
        base = "byte" if m.group("base") in ("byte", "B") else "hz"
        return (None if value is None else value * factor), base + ("/s" if m.group("rate") else "")
    return value, u


def _metric(section: str, name: str, text: str, unit: str) -> NcuMetric:
    v, u = normalize(parse_number(text), unit)
    return NcuMetric(section=section, name=name, value=v, unit=u, text=text)


def _split(text: str) -> tuple[list[str], list[str]]:
    """ncu's own lines, and the CSV table (from its header on) without them."""
    messages, table, in_table = [], [], False
    for line in text.splitlines():
        if line.startswith("=="):
            messages.append(line.strip())
        elif in_table:
            table.append(line)
        elif line.startswith('"ID",'):
            in_table = True
            table.append(line)
    return messages, table


def parse(text: str) -> NcuOutput:
    """Either page, recognized by its header."""
    messages, table = _split(text)
    if not table:
        return NcuOutput(page="none", messages=messages)
    rows = list(csv.reader(io.StringIO("\n".join(table))))
    header = rows[0]
    if "Metric Name" in header and "Section Name" in header:
        return NcuOutput(page="details", kernels=_details(header, rows[1:]), messages=messages)
    return NcuOutput(page="raw", kernels=_raw(header, rows[1:]), messages=messages)


def _kernel(row: dict[str, str]) -> NcuKernel:
    return NcuKernel(
        id=int(parse_number(row.get("ID") or "") or 0),
        process=row.get("Process ID") or None,
        name=row.get("Kernel Name") or "?",
        grid=row.get("Grid Size") or None,
        block=row.get("Block Size") or None,
        device=row.get("Device") or None,
        cc=row.get("CC") or None,
        start_end_ranges=next((v for k, v in row.items() if "Start/Stop_Range" in (k or "")), "") or "",
    )


def _details(header: list[str], rows: list[list[str]]) -> list[NcuKernel]:
    kernels: dict[tuple[str | None, str], NcuKernel] = {}
    for cells in rows:
        if not cells or not cells[0].strip():
            continue
        row = dict(zip(header, cells))
        key = (row.get("Process ID"), row.get("ID", ""))
        k = kernels.get(key)
        if k is None:
            k = kernels[key] = _kernel(row)
        section = row.get("Section Name") or ""
        if row.get("Rule Name"):
            k.rules.append(
                NcuRule(
                    section=section,
                    name=row["Rule Name"],
                    kind=row.get("Rule Type") or "",
                    description=row.get("Rule Description") or "",
                    speedup_pct=parse_number(row.get("Estimated Speedup") or ""),
                    speedup_type=row.get("Estimated Speedup Type") or None,
                )
            )
        elif row.get("Metric Name"):
            k.metrics.append(
                _metric(section, row["Metric Name"], row.get("Metric Value") or "", row.get("Metric Unit") or "")
            )
    return list(kernels.values())


def _raw(header: list[str], rows: list[list[str]]) -> list[NcuKernel]:
    units: list[str] = []
    out = []
    for cells in rows:
        if not cells:
            continue
        if not cells[0].strip():  # the units row: kernel columns blank
            units = cells
            continue
        row = dict(zip(header, cells))
        k = _kernel(row)
        for i, name in enumerate(header):
            if name in _KERNEL_COLUMNS or i >= len(cells) or ":" in name or " " in name:
                continue  # kernel columns, NVTX state columns
            k.metrics.append(_metric("", name, cells[i], units[i] if i < len(units) else ""))
        out.append(k)
    return out
