"""The correctness report: trials, error statistics, the worst index, the scale checks."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from kernelfix.tools.correctness.tolerance import describe
from kernelfix.tools.verdict import Verdict


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _flag(value: bool | None, yes: str, no: str) -> str:
    return "not checked" if value is None else (f"✓ {yes}" if value else f"✗ {no}")


def correctness_view(v: Verdict | None) -> RenderableType:
    if v is None:
        return Text("not judged yet", style="italic")
    parts: list[RenderableType] = [
        Text(
            f"{_flag(v.compiled, 'compiled', 'did not compile')}   {_flag(v.correct, 'correct', 'wrong')}   {_flag(v.legal, 'legal', 'illegal')}"
        )
    ]
    rep = v.correctness
    if rep is None or not rep.trials:
        why = v.message if v.failed_stage in (None, "extract", "static", "compile") and v.message else None
        parts.append(Text("no correctness check ran" + (f": it stopped before ({why})" if why else ""), style="italic"))
        return Group(*parts)
    numel = next((r.numel for r in rep.trials if r.numel), None)
    parts.append(
        Text(
            f"{rep.passed}/{len(rep.trials)} trials passed; {rep.tolerance or describe(rep.atol, rep.rtol)}, rel error norm limit {_g(rep.rel_error_tol)}"
            + (f"; {numel} elements per output" if numel else "")
        )
    )
    # Five narrow columns fit the 50 columns an 80-column terminal leaves; the worst index follows below.
    t = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1, 0, 0))
    for col in ("trial", "max abs", "max rel", "bad", "rel norm"):
        t.add_column(col, no_wrap=True)
    for r in rep.trials:
        name = ("✓ " if r.ok else "✗ ") + f"{r.trial}" + (f" {r.variant}" if r.variant else "")
        t.add_row(
            name,
            _g(r.max_abs_error),
            _g(r.max_rel_error),
            "-" if r.mismatches is None else str(r.mismatches),
            _g(r.rel_error_norm),
        )
    parts.append(t)
    bad = [r for r in rep.trials if not r.ok]
    if bad:
        w = max(bad, key=lambda r: r.max_abs_error or 0.0)
        line = f"worst: trial {w.trial}"
        if w.worst_index is not None:
            line += f" at index ({', '.join(map(str, w.worst_index))}): expected {_g(w.expected)}, got {_g(w.actual)}"
        parts.append(Text(line, style="bold"))
        first = next((r for r in bad if r.problem), None)
        if first is not None:
            parts.append(
                Text(
                    f"✗ trial {first.trial}: {first.problem}"
                    + (f" (and {len(bad) - 1} more failing trials)" if len(bad) > 1 else "")
                )
            )
    for k, why in rep.skipped_variants.items():
        parts.append(Text(f"variant {k} skipped: {why}", style="dim"))
    f64 = [r for r in rep.trials if r.error_vs_float64 is not None]
    if f64:
        r = max(f64, key=lambda r: r.error_vs_float64)
        parts.append(
            Text(
                f"vs float64: {_g(r.error_vs_float64)} (trial {r.trial}; float32 reference {_g(r.reference_error_vs_float64)})"
            )
        )
    elif rep.float64_note:
        parts.append(Text(f"vs float64: not compared ({rep.float64_note})", style="dim"))
    if rep.vacuous_tolerance:
        parts.append(Text(f"⚠ vacuous tolerance: {rep.vacuous_tolerance}"))
    if rep.precision_warning:
        parts.append(Text(f"⚠ precision: {rep.precision_warning}"))
    if rep.input_mutated:
        parts.append(Text(f"✗ the candidate wrote to inputs {rep.mutated_inputs}"))
    if v.legality and v.legality.forbidden_ops:
        parts.append(Text("✗ forbidden ops: " + ", ".join(f"{k} x{n}" for k, n in v.legality.forbidden_ops.items())))
    return Group(*parts)
