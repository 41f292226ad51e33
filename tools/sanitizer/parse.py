"""[judge] compute-sanitizer's text report, read into records: one per error or hazard it printed.

Every line of the report starts with the tool's prefix (``=========``). A record is a line right
after the prefix ("Invalid __global__ read of size 4 bytes", "Warning: Race reported between ...",
"Barrier error detected. Divergent thread(s) in block", "Uninitialized __global__ memory read of
size 4 bytes") and the indented lines under it: where (``at KERNEL+0xOFF in FILE:LINE``, or the
older ``at 0xOFF in FILE:LINE:KERNEL``), which thread, the address, device frames. The report ends
with a summary ("ERROR SUMMARY: 3 errors", racecheck's "RACECHECK SUMMARY: 1 hazard displayed
(1 error, 0 warnings)"). Both layouts of a location are read, with and without line information.
Pure functions of the text: the tests run them on reports captured on the H100
(tests/fixtures/sanitizer/).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from kernelfix.tools.verdict import HazardKind


class Loc(BaseModel):
    """One code location as the tool printed it."""

    model_config = ConfigDict(extra="forbid")

    function: str  # as printed: demangled with its parameters, or mangled, or a Triton kernel's name
    file: str | None = None
    line: int | None = None

    @property
    def kernel(self) -> str:
        return short_name(self.function)


class Record(BaseModel):
    """One error or hazard the tool printed, before it is grouped and placed."""

    model_config = ConfigDict(extra="forbid")

    kind: HazardKind
    header: str  # the record's first line, without the prefix
    frames: list[Loc] = Field(default_factory=list)  # the access, then the device frames that called it
    other: list[Loc] = Field(default_factory=list)  # a race's second access
    memory: str | None = None  # "global", "shared", "local", "generic"
    access: str | None = None  # read, write, atomic; RAW/WAR/WAW; a race's "write-read"
    size_bytes: int | None = None
    thread: str | None = None
    block: str | None = None
    address: str | None = None  # "out of bounds", "misaligned", with the nearest allocation when given
    count: int = 1  # racecheck's hazard count for a reported pair
    api: str | None = None  # an API error's call and error name


class Report(BaseModel):
    """One tool's whole report."""

    model_config = ConfigDict(extra="forbid")

    records: list[Record] = Field(default_factory=list)
    errors: int | None = None  # ERROR SUMMARY (racecheck: hazards displayed)
    messages: list[str] = Field(default_factory=list)  # the tool's own lines that are no record ("Error: ...")


# What the tool says whenever the program fails, as it does after a fault the tool reported: no problem of the run.
_ROUTINE = {"Error: process didn't terminate successfully", "Target application returned an error"}
_PREFIX = re.compile(r"^=========(?P<sp>\s*)(?P<text>.*)$")

_MEMCHECK = re.compile(
    r"Invalid (?P<mem>__global__|__shared__|__local__|generic)?\s*(?P<acc>read|write|atomic)(?: access)?"
    r"(?: of size (?P<size>\d+)(?: bytes?)?)?",
    re.I,
)
_EXCEPTION = re.compile(
    r"^(?:Warp |Lane |Device )?(?:Illegal|Misaligned|Out-of-range|Invalid)\b[\w\s-]*?(?:Address|Instruction|PC)\b"
    r"|^(?:Hardware|Lane User) Stack Overflow|^Warp Assert|^Malformed",
    re.I,
)
_API = re.compile(
    r'Program hit (?P<err>\w+) \(error (?P<code>\d+)\) due to "(?P<msg>[^"]*)" on CUDA API call to (?P<api>\w+)', re.I
)
_RACE = re.compile(
    r"Race reported between (?P<a1>Read|Write) access at (?P<l1>.+?)\s+and (?P<a2>Read|Write) access at (?P<l2>.+?)"
    r"(?:\s*\[(?P<n>[\d,]+) hazards?\])?\s*$",
    re.I,
)
_HAZARD = re.compile(r"Potential (?P<type>RAW|WAR|WAW) hazard detected at (?P<mem>__shared__|__global__)?", re.I)
_HAZARD_THREAD = re.compile(r"^(?P<acc>Read|Write) Thread \((?P<t>[^)]*)\) at (?P<loc>.+)$", re.I)
_BARRIER = re.compile(r"Barrier error detected\.?\s*(?P<why>.*)", re.I)
_UNINIT = re.compile(
    r"Uninitialized (?P<mem>__global__|__shared__|__local__)?\s*memory read(?: of size (?P<size>\d+)(?: bytes?)?)?",
    re.I,
)
_HOST_UNINIT = re.compile(r"Host API uninitialized memory access", re.I)
_ASSERT = re.compile(r"device[- ]side assert|Assertion .* failed", re.I)

_AT = re.compile(r"^at\s+(?P<loc>.+)$")
_FRAME = re.compile(r"^Device Frame:\s*(?P<loc>.+)$")
_BY = re.compile(r"by thread \((?P<t>[^)]*)\) in block \((?P<b>[^)]*)\)")
_ADDRESS = re.compile(r"^(?:Address|Access (?:at|to)) 0x[0-9a-fA-F]+ (?:is )?(?P<rel>.+)$")
_NEAREST = re.compile(r"^and is (?P<rel>.+)$")
_ERRORS = re.compile(r"ERROR SUMMARY:\s*(?P<n>[\d,]+) errors?\s*$", re.I)  # not "... N errors were not printed"
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY:\s*(?P<n>[\d,]+) hazards? displayed", re.I)

# A location: "k(float *)+0x70 in /dir/cuda.cu:12" (2022 on), "k+0x70" (no line table),
# "0x70 in /dir/cuda.cu:12:k(float*)" or "0x70 in k" (before), "k in file.h:236" (no offset).
_LOC_NEW = re.compile(r"^(?P<func>.+?)\+0x[0-9a-fA-F]+(?: in (?P<file>.+?):(?P<line>\d+))?$")
_LOC_OLD = re.compile(r"^0x[0-9a-fA-F]+ in (?:(?P<file>[^:]+?):(?P<line>\d+):)?(?P<func>.+)$")
_LOC_PLAIN = re.compile(r"^(?P<func>.+?) in (?P<file>\S+?):(?P<line>\d+)$")


def parse_loc(text: str) -> Loc | None:
    text = text.strip()
    for pattern in (_LOC_OLD, _LOC_NEW, _LOC_PLAIN):
        m = pattern.match(text)
        if m:
            line = m.group("line")
            return Loc(function=m.group("func").strip(), file=m.group("file"), line=int(line) if line else None)
    return Loc(function=text) if text else None


def short_name(function: str) -> str:
    """A kernel's name without its return type and parameter list: ``row_sum_kernel``, ``ns::k<4>``."""
    depth = 0
    for i, ch in enumerate(function):
        if ch in "<[":
            depth += 1
        elif ch in ">]":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            function = function[:i]
            break
    function = function.strip()
    if function.startswith("void "):
        function = function[5:]
    return function.strip() or "?"


def _memory(tag: str | None) -> str | None:
    return tag.strip("_").lower() if tag else None


def _header(text: str) -> Record | None:
    """The record a header line opens, or None for a line that opens none."""
    if m := _RACE.search(text):
        a1, a2 = m.group("a1").lower(), m.group("a2").lower()
        rec = Record(
            kind="shared_race",
            header=text,
            memory="shared",
            access=f"{a1}-{a2}",
            count=int((m.group("n") or "1").replace(",", "")),
        )
        if loc := parse_loc(m.group("l1")):
            rec.frames.append(loc)
        if loc := parse_loc(m.group("l2")):
            rec.other.append(loc)
        return rec
    if "Race reported between" in text:  # the pair's second half is on the next line
        return Record(kind="shared_race", header=text, memory="shared")
    if m := _HAZARD.search(text):
        return Record(
            kind="shared_race", header=text, memory=_memory(m.group("mem")) or "shared", access=m.group("type").upper()
        )
    if m := _BARRIER.search(text):
        why = m.group("why").lower()
        kind: HazardKind = "divergent_barrier" if "divergen" in why else "invalid_sync"
        return Record(kind=kind, header=text)
    if m := _UNINIT.search(text):
        return Record(
            kind="uninitialized_read",
            header=text,
            memory=_memory(m.group("mem")) or "global",
            access="read",
            size_bytes=int(m.group("size")) if m.group("size") else None,
        )
    if _HOST_UNINIT.search(text):
        return Record(kind="uninitialized_read", header=text, memory="global", access="read (host API)")
    if m := _MEMCHECK.search(text):
        return Record(
            kind="out_of_bounds",
            header=text,
            memory=_memory(m.group("mem")) or "generic",
            access=m.group("acc").lower(),
            size_bytes=int(m.group("size")) if m.group("size") else None,
        )
    if m := _API.search(text):
        return Record(kind="api_error", header=text, api=f"{m.group('api')}: {m.group('err')} ({m.group('msg')})")
    if _EXCEPTION.search(text):
        kind = "misaligned" if "misaligned" in text.lower() else "device_exception"
        return Record(kind=kind, header=text)
    if _ASSERT.search(text):
        return Record(kind="device_assert", header=text)
    return None


def _continue(rec: Record, text: str) -> None:
    """An indented line under ``rec``."""
    if rec.kind == "shared_race" and not rec.frames and not rec.other and _RACE.search(rec.header + " " + text):
        full = _header(rec.header + " " + text)
        if full is not None:
            rec.header, rec.frames, rec.other, rec.access, rec.count = (
                full.header,
                full.frames,
                full.other,
                full.access,
                full.count,
            )
        return
    if m := _HAZARD_THREAD.match(text):
        loc = parse_loc(m.group("loc"))
        if loc is not None:
            (rec.frames if not rec.frames else rec.other).append(loc)
            if rec.thread is None:
                rec.thread = m.group("t")
        return
    if m := _AT.match(text):
        if loc := parse_loc(m.group("loc")):
            rec.frames.append(loc)
        return
    if m := _FRAME.match(text):
        if loc := parse_loc(m.group("loc")):
            rec.frames.append(loc)
        return
    if m := _BY.search(text):
        rec.thread, rec.block = m.group("t"), m.group("b")
        return
    if m := _ADDRESS.match(text):
        rel = m.group("rel").strip()
        rec.address = rel
        if rec.kind == "out_of_bounds" and "misaligned" in rel.lower():
            rec.kind = "misaligned"
        return
    if (m := _NEAREST.match(text)) and rec.address:
        rec.address += f", {m.group('rel').strip()}"


def parse(text: str) -> Report:
    """Every record of one tool's report, with its error summary."""
    report = Report()
    rec: Record | None = None
    for raw in text.splitlines():
        m = _PREFIX.match(raw.rstrip())
        if m is None:
            continue  # the program's own output, where the report shares its stream
        indent, body = len(m.group("sp")), m.group("text").strip()
        if not body:
            rec = None
            continue
        if s := _ERRORS.search(body):
            report.errors = int(
                s.group("n").replace(",", "")
            )  # the tool's own count wins over racecheck's hazards displayed
            rec = None
            continue
        if body.startswith("ERROR SUMMARY"):  # "ERROR SUMMARY: 7 errors were not printed. Use --print-limit ..."
            rec = None
            continue
        if s := _RACE_SUMMARY.search(body):
            report.errors = int(s.group("n").replace(",", "")) if report.errors is None else report.errors
            rec = None
            continue
        if rec is not None and indent > 1:
            _continue(rec, body)
            continue
        opened = _header(body)
        if opened is not None:
            rec = opened
            report.records.append(rec)
            continue
        rec = None
        if (
            body.upper() != "COMPUTE-SANITIZER"
            and not body.startswith(("Saved host backtrace", "Host Frame", "in "))
            and body not in _ROUTINE
        ):
            report.messages.append(body[:300])
    return report
