"""ANALYSIS.json and ANALYSIS.md beside exported data: what each filter kept and dropped,
token-length histograms and verdict categories of what was kept."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from kernelfix.agent.export.filters import FilterReport
from kernelfix.agent.export.sft_records import FilterStep, Record, SessionKind
from kernelfix.base import atomic

# Histogram bin edges in tokens: powers of two, then everything above.
EDGES = [0, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]


class Unusable(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    why: str


class SessionFate(BaseModel):
    """One session: kept or dropped, by which rule (the filter that dropped it; for a kept one, the speedup-gain rule it passed)."""

    model_config = ConfigDict(extra="forbid")

    session: str  # its id, or its path when unusable
    task: str | None
    kind: SessionKind | None
    kept: bool
    rule: str
    steps: list[FilterStep] = Field(default_factory=list)  # every filter's decision, in order


def fate(r: Record, kept: bool) -> SessionFate:
    if kept:
        gain = next((s for s in r.trail if s.filter == "speedup_gain" and s.why != "off"), None)
        rule = f"speedup_gain: {gain.why}" if gain else "passed every filter (speedup_gain off)"
    else:
        last = r.trail[-1]
        rule = f"{last.filter}: {last.why}"
    m = r.metadata
    return SessionFate(session=m.session_id, task=m.task, kind=m.kind, kept=kept, rule=rule, steps=r.trail)


class Analysis(BaseModel):
    model_config = ConfigDict(extra="forbid")

    output: str
    format: str
    loss: str
    tokenizer: str
    sessions_found: int
    unusable: list[Unusable] = Field(default_factory=list)  # not a session, unreadable, or no model turn
    records_in: int
    records_out: int
    leakage_flagged: int
    filters: list[FilterReport]
    histograms: dict[str, dict[str, int]]  # prompt / completion / reasoning tokens -> bin -> records
    categories_all_turns: dict[str, int]  # over every judged turn of the kept records
    final_categories_in: dict[str, int]  # the final answer's category, before filtering
    tasks_out: int
    sessions: list[SessionFate] = Field(default_factory=list)  # every session found, in order


def histogram(values: list[int]) -> dict[str, int]:
    bins = {f"{lo}-{hi - 1}": 0 for lo, hi in zip(EDGES, EDGES[1:])}
    bins[f"{EDGES[-1]}+"] = 0
    for v in values:
        for lo, hi in zip(EDGES, EDGES[1:]):
            if lo <= v < hi:
                bins[f"{lo}-{hi - 1}"] += 1
                break
        else:
            bins[f"{EDGES[-1]}+"] += 1
    return bins


def analyse(
    *,
    output: str,
    fmt: str,
    loss: str,
    tokenizer: str,
    sessions_found: int,
    unusable: list[Unusable],
    before: list[Record],
    kept: list[Record],
    filters: list[FilterReport],
) -> Analysis:
    m = [r.metadata for r in kept]
    kept_ids = {id(r) for r in kept}
    return Analysis(
        output=output,
        format=fmt,
        loss=loss,
        tokenizer=tokenizer,
        sessions_found=sessions_found,
        unusable=unusable,
        records_in=len(before),
        records_out=len(kept),
        leakage_flagged=sum(x.leakage for x in m),
        filters=filters,
        histograms={
            "prompt_tokens": histogram([x.prompt_tokens for x in m]),
            "completion_tokens": histogram([x.completion_tokens for x in m]),
            "reasoning_tokens": histogram([x.reasoning_tokens for x in m]),
        },
        categories_all_turns=dict(Counter(t.category or "not judged" for x in m for t in x.turns).most_common()),
        final_categories_in=dict(Counter(r.metadata.final_category or "not judged" for r in before).most_common()),
        tasks_out=len({x.task_sha1 for x in m}),
        sessions=[fate(r, id(r) in kept_ids) for r in before]
        + [SessionFate(session=u.path, task=None, kind=None, kept=False, rule=f"unusable: {u.why}") for u in unusable],
    )


def markdown(a: Analysis) -> str:
    lines = [
        "# Export analysis",
        "",
        f"{a.records_out} records of {a.tasks_out} tasks written to `{a.output}` ({a.format}, loss on {a.loss}); "
        f"{a.sessions_found} sessions found, {len(a.unusable)} unusable, {a.records_in} records before filtering; "
        f"{a.leakage_flagged} flagged as leakage. Tokens counted with {a.tokenizer}.",
        "",
        "## Filters, in order",
        "",
        "| filter | setting | in | kept | dropped | flagged | why |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for f in a.filters:
        why = ", ".join(f"{k}: {v}" for k, v in f.reasons.items()) or "-"
        state = f.setting if f.enabled or f.name == "leakage" else "off"
        lines.append(f"| {f.name} | {state} | {f.seen} | {f.kept} | {f.dropped} | {f.flagged} | {why} |")
    if a.unusable:
        lines += ["", "## Unusable sessions", ""] + [f"- `{u.path}`: {u.why}" for u in a.unusable]
    lines += ["", "## Sessions", "", "| session | task | kind | kept | rule |", "| --- | --- | --- | --- | --- |"]
    lines += [
        f"| {f.session} | {f.task or '-'} | {f.kind or '-'} | {'yes' if f.kept else 'no'} | {_cell(f.rule)} |"
        for f in a.sessions
    ]
    lines += [
        "",
        "## Token lengths of the kept records",
        "",
        "| tokens | prompt | completion | reasoning |",
        "| --- | --- | --- | --- |",
    ]
    h = a.histograms
    for b in h["prompt_tokens"]:
        lines.append(f"| {b} | {h['prompt_tokens'][b]} | {h['completion_tokens'][b]} | {h['reasoning_tokens'][b]} |")
    lines += ["", "## Verdict categories", "", "| category | turns in kept records |", "| --- | --- |"]
    lines += [f"| {c} | {n} |" for c, n in a.categories_all_turns.items()] or ["| - | 0 |"]
    lines += ["", "| final answer's category, before filtering | records |", "| --- | --- |"]
    lines += [f"| {c} | {n} |" for c, n in a.final_categories_in.items()] or ["| - | 0 |"]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def write(directory: Path, a: Analysis) -> None:
    atomic.write_json(directory / "ANALYSIS.json", a.model_dump(mode="json"))
    atomic.write_text(directory / "ANALYSIS.md", markdown(a))
