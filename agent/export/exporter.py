"""``kernelfix export``: sessions -> filtered SFT records -> chat JSONL or parquet, with ANALYSIS beside them;
or every judged candidate with its reward -> rl-jsonl (agent.export.rl).

    result = export(["runs/out/sessions"], Path("sft.jsonl"), ExportOptions())
"""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kernelfix.agent.export import analysis, rl, tokens
from kernelfix.agent.export.filters import FilterConfig, apply_filters
from kernelfix.agent.export.sft_records import LossMode, Message, Metadata, Record, leaf_finals, record
from kernelfix.agent.session_dir import SETTINGS, TRAJECTORY
from kernelfix.agent.state import Trajectory
from kernelfix.base import atomic

Format = Literal["chat-jsonl", "parquet", "rl-jsonl"]


class ExportError(Exception):
    """Bad input: nothing to export, an output that cannot be written, parquet without pyarrow (exit 2)."""


class ExportOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Format = "chat-jsonl"
    loss: LossMode = "final"
    filters: FilterConfig = Field(default_factory=FilterConfig)
    all_branches: bool = False  # a search: one record per root-to-leaf path, not only the best path


def find_sessions(paths: list[str]) -> tuple[list[Path], list[str]]:
    """Session directories under ``paths`` (a session, or any folder holding sessions, e.g. a batch's OUT); problems."""
    found: list[Path] = []
    problems = []
    for arg in paths:
        p = Path(arg)
        if p.is_file() and p.name == TRAJECTORY:
            p = p.parent
        if not p.is_dir():
            problems.append(f"{arg}: no such session or directory")
            continue
        if (p / SETTINGS).is_file() or (p / TRAJECTORY).is_file():
            found.append(p.resolve())
            continue
        below = {f.parent.resolve() for name in (SETTINGS, TRAJECTORY) for f in p.rglob(name)}
        if not below:
            problems.append(f"{arg}: no kernelfix sessions in it")
        found += sorted(below)
    unique = list(dict.fromkeys(found))
    return unique, problems


def read(session: Path) -> Trajectory | str:
    """The session's trajectory, or why there is none to read."""
    f = session / TRAJECTORY
    if not f.is_file():
        return "no trajectory.json (no turn was judged)"
    try:
        return Trajectory.model_validate_json(f.read_text(encoding="utf-8"))
    except (OSError, ValueError, ValidationError) as e:
        return f"unreadable trajectory.json: {' '.join(str(e).split())[:200]}"


def load(session: Path, loss: LossMode, all_branches: bool = False) -> list[Record] | str:
    """The session's record (every path's with ``all_branches``), or why it has none."""
    traj = read(session)
    if isinstance(traj, str):
        return traj
    finals = leaf_finals(traj) if all_branches else [None]
    recs = [r for f in finals if (r := record(traj, session_dir=str(session), loss=loss, final=f)) is not None]
    return recs or "no model turn"


def _dump(r: Record) -> dict:
    return {
        "messages": [m.model_dump(exclude_none=True) for m in r.messages],
        "metadata": r.metadata.model_dump(mode="json"),
    }


def _write_atomically(out: Path, write) -> None:
    """``write(f)`` streams the whole file into ``f``; ``out`` is replaced only once it is complete."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic.replacing(out) as f:
        write(f)


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExportError("--format parquet needs pyarrow: pip install 'kernelfix[parquet]'") from None
    return pa, pq


def _arrow_type(pa, tp):
    """The Arrow type of a field annotation of the record models."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    origin = typing.get_origin(tp)
    if origin is list:
        return pa.list_(_arrow_type(pa, args[0]))
    if origin is typing.Literal:
        return pa.string()
    if args and (origin is typing.Union or isinstance(tp, types.UnionType)):
        return _arrow_type(pa, args[0])
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return pa.struct(
            [(name, _arrow_type(pa, f.annotation)) for name, f in tp.model_fields.items() if not f.exclude]
        )
    return {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}[tp]


def write_records(records: list[Record], out: Path, fmt: Format) -> None:
    rows = [_dump(r) for r in records]
    if fmt == "parquet":
        pa, pq = _pyarrow()
        # One row per session; messages as a list of structs, metadata as a struct (nested turns kept),
        # typed from the pydantic models so every file has one schema, whatever its values.
        schema = pa.schema([("messages", pa.list_(_arrow_type(pa, Message))), ("metadata", _arrow_type(pa, Metadata))])
        _write_atomically(out, lambda f: pq.write_table(pa.Table.from_pylist(rows, schema=schema), f))
        return

    def jsonl(f) -> None:
        for row in rows:
            f.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))

    _write_atomically(out, jsonl)


def export(paths: list[str], out: Path, opts: ExportOptions) -> analysis.Analysis | rl.RLAnalysis:
    if opts.format == "parquet":
        _pyarrow()  # before any work
    sessions, problems = find_sessions(paths)
    if problems and not sessions:
        raise ExportError("\n".join(problems))
    if opts.format == "rl-jsonl":
        return export_rl(sessions, problems, out)
    records: list[Record] = []
    unusable = [analysis.Unusable(path=p.split(":", 1)[0], why=p.split(": ", 1)[-1]) for p in problems]
    for s in sessions:
        got = load(s, opts.loss, opts.all_branches)
        if isinstance(got, str):
            unusable.append(analysis.Unusable(path=str(s), why=got))
        else:
            records += got
    kept, reports = apply_filters(list(records), opts.filters)
    write_records(kept, out, opts.format)
    a = analysis.analyse(
        output=str(out.resolve()),
        fmt=opts.format,
        loss=opts.loss,
        tokenizer=tokens.tokenizer()[0],
        sessions_found=len(sessions),
        unusable=unusable,
        before=records,
        kept=kept,
        filters=reports,
    )
    analysis.write(out.resolve().parent, a)
    return a


def export_rl(sessions: list[Path], problems: list[str], out: Path) -> rl.RLAnalysis:
    """Every judged model candidate of every session, with its reward; no filters (failures are the negatives)."""
    rows: list[rl.RLRecord] = []
    unusable = [{"path": p.split(":", 1)[0], "why": p.split(": ", 1)[-1]} for p in problems]
    for s in sessions:
        traj = read(s)
        got = rl.records(traj, session_dir=str(s)) if not isinstance(traj, str) else traj
        if isinstance(got, str) or not got:
            unusable.append({"path": str(s), "why": got or "no judged model turn"})
        else:
            rows += got
    rl.write(rows, out)
    a = rl.analyse(rows, output=str(out.resolve()), sessions_found=len(sessions), unusable=unusable)
    rl.write_analysis(out.resolve().parent, a)
    return a
