"""Curation filters for SFT records, applied in this order, each optional and reported.

1. correct      the final answer is correct and legal (the judge's ``ok``)
2. speedup_gain optimization sessions: the final answer's speedup over eager is at least X times
                the first correct turn's (default 1.2, MusaCoder); untimed ones cannot show a gain and
                are dropped. Repair sessions (first turn failed, final correct) are kept whatever their
                gain: the repair is what they teach, and on a machine that cannot time it is all they show
3. shortest     among the sessions of one task, the shortest final reasoning first; keep the first K
                (default 1, ConCuR)
4. dedup        exact duplicates of SHA-1(normalized prompt|||completion): the first is kept
5. leakage      word-Jaccard(prompt, completion) >= 0.8 is flagged as leakage; dropped only when asked
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from kernelfix.agent.export.sft_records import FilterStep, Record


class FilterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    require_correct: bool = True
    min_speedup_gain: float | None = Field(1.2, ge=0, description="None: off")
    per_task: int | None = Field(
        1, ge=1, description="keep the K shortest-reasoning records per task; None: keep all (still ordered)"
    )
    dedup: bool = True
    leakage_threshold: float = Field(0.8, ge=0, le=1)
    drop_leakage: bool = False


class FilterReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    enabled: bool
    setting: str
    seen: int = 0
    kept: int = 0
    dropped: int = 0
    flagged: int = 0
    reasons: dict[str, int] = Field(default_factory=dict)  # why records were dropped (or flagged)
    dropped_sessions: list[str] = Field(default_factory=list)


Verdict = Callable[[Record], str | None]  # a reason to drop the record, or None to keep it


def _per_record(
    name: str,
    enabled: bool,
    setting: str,
    records: list[Record],
    why: Verdict,
    keep_why: Callable[[Record], str] | None = None,
) -> tuple[list[Record], FilterReport]:
    """``keep_why``: what to say of a record the filter keeps (default: that it passed)."""
    rep = FilterReport(name=name, enabled=enabled, setting=setting, seen=len(records))
    kept = []
    reasons: Counter[str] = Counter()
    for r in records:
        reason = why(r) if enabled else None
        if reason is None:
            kept.append(r)
            r.trail.append(
                FilterStep(filter=name, kept=True, why=(keep_why(r) if keep_why else "passed") if enabled else "off")
            )
        else:
            reasons[reason] += 1
            rep.dropped_sessions.append(r.metadata.session_id)
            r.trail.append(FilterStep(filter=name, kept=False, why=reason))
    rep.kept, rep.dropped, rep.reasons = len(kept), len(records) - len(kept), dict(reasons)
    return kept, rep


def _not_correct(r: Record) -> str | None:
    m = r.metadata
    return None if m.final_correct else f"final turn {m.final_category or 'not judged'}"


def _gain(x: float) -> tuple[Verdict, Callable[[Record], str]]:
    def why(r: Record) -> str | None:
        m = r.metadata
        if not m.final_correct or m.first_correct_turn is None:
            return "no correct turn"
        if m.kind == "repair":
            return None
        if m.final_speedup_eager is None or m.first_correct_speedup_eager is None:
            return "not timed"
        gain = m.final_speedup_eager / m.first_correct_speedup_eager
        return None if gain >= x else f"gain below {x:g}x"

    def keep_why(r: Record) -> str:
        m = r.metadata
        if m.kind == "repair":
            return f"repair session (turn {m.turns[0].turn} {m.turns[0].category}, correct at turn {m.first_correct_turn}): kept whatever its gain"
        return f"gain {m.final_speedup_eager / m.first_correct_speedup_eager:.2f}x >= {x:g}x"

    return why, keep_why


def _shortest(records: list[Record], k: int | None) -> tuple[list[Record], FilterReport]:
    setting = f"shortest final reasoning first, {k} per task" if k else "shortest final reasoning first, all kept"
    rep = FilterReport(name="shortest", enabled=k is not None, setting=setting, seen=len(records))
    by_task: dict[str, list[Record]] = {}
    for r in records:
        by_task.setdefault(r.metadata.task_sha1, []).append(r)
    kept = []
    for group in by_task.values():
        group.sort(
            key=lambda r: (r.metadata.reasoning_tokens, r.metadata.reasoning_tokens_all_turns, r.metadata.session_id)
        )
        kept += group[:k] if k else group
        for rank, r in enumerate(group, 1):
            if k and rank > k:
                rep.dropped_sessions.append(r.metadata.session_id)
            why = f"final reasoning {r.metadata.reasoning_tokens} tokens, {rank} of {len(group)} sessions of its task"
            r.trail.append(
                FilterStep(filter="shortest", kept=not k or rank <= k, why=why + (f" (keeps {k})" if k else ""))
            )
    rep.kept, rep.dropped = len(kept), len(records) - len(kept)
    if rep.dropped:
        rep.reasons = {"longer reasoning than another session of its task": rep.dropped}
    return kept, rep


def _dedup(records: list[Record], enabled: bool) -> tuple[list[Record], FilterReport]:
    seen: set[str] = set()

    def why(r: Record) -> str | None:
        if r.metadata.sha1 in seen:
            return "duplicate"
        seen.add(r.metadata.sha1)
        return None

    return _per_record("dedup", enabled, "exact SHA-1 of normalized prompt|||completion", records, why)


def _leakage(records: list[Record], threshold: float, drop: bool) -> tuple[list[Record], FilterReport]:
    flagged = 0
    for r in records:
        r.metadata.leakage = r.metadata.jaccard >= threshold
        flagged += r.metadata.leakage
    kept, rep = _per_record(
        "leakage",
        drop,
        f"word-Jaccard(prompt, completion) >= {threshold:g}: {'dropped' if drop else 'flagged'}",
        records,
        lambda r: "leakage" if r.metadata.leakage else None,
    )
    for r in kept:  # flagging runs even where dropping is off
        r.trail[-1].why = f"word-Jaccard {r.metadata.jaccard:g}" + (
            f" >= {threshold:g}: flagged as leakage" if r.metadata.leakage else ""
        )
    rep.enabled = True
    rep.flagged = flagged
    if not drop and flagged:
        rep.reasons = {"flagged as leakage (kept)": flagged}
    return kept, rep


def apply_filters(records: list[Record], cfg: FilterConfig) -> tuple[list[Record], list[FilterReport]]:
    reports = []
    records, rep = _per_record(
        "correct", cfg.require_correct, "final turn correct and legal", records, _not_correct, lambda r: "final turn ok"
    )
    reports.append(rep)
    gain = cfg.min_speedup_gain
    records, rep = _per_record(
        "speedup_gain",
        gain is not None,
        f"optimization sessions: final / first correct speedup over eager >= {gain:g}; repair sessions kept"
        if gain is not None
        else "off",
        records,
        *_gain(gain or 0.0),
    )
    reports.append(rep)
    records, rep = _shortest(records, cfg.per_task)
    reports.append(rep)
    records, rep = _dedup(records, cfg.dedup)
    reports.append(rep)
    records, rep = _leakage(records, cfg.leakage_threshold, cfg.drop_leakage)
    reports.append(rep)
    return records, reports
