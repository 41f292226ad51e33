"""Performance (timings, speedups, a text chart across turns) and the Nsight Compute profile."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from kernelfix.agent.state import Turn
from kernelfix.tools.verdict import ProfileReport, TimingStats, Verdict
from kernelfix.tui.turn_text import BEST_MARK, mark

BAR = "█"


def _ms(s: TimingStats | None) -> str:
    return "-" if s is None else f"{s.median_ms:.4g} ms (p10 {s.p10_ms:.4g}, p90 {s.p90_ms:.4g}, n={s.runs})"


def speedup_chart(turns: list[Turn], best_turn: int | None, width: int = 24) -> Text:
    """One row per turn: its mark, a bar as long as its speedup over eager, the number; 1.0x marked with '|'."""
    timed = [t.verdict.speedup_eager for t in turns if t.correct and t.verdict.speedup_eager is not None]
    scale = max([1.0, *timed])
    one = round(width / scale)  # where 1.0x falls
    out = Text()
    for t in turns:
        m = mark(t)
        out.append(f"{t.index:>3} {m} ")
        s = t.verdict.speedup_eager if t.correct and t.verdict else None
        if s is None:
            out.append("not timed" if t.correct else t.verdict.category.value if t.verdict else "running", style="dim")
        else:
            n = max(1, round(width * s / scale))
            cells = [BAR if i < n else " " for i in range(width)]
            if one < width and cells[one] == " ":
                cells[one] = "|"
            out.append("".join(cells), style="green" if s >= 1 else "yellow")
            out.append(f" {s:.2f}x")
        if t.index == best_turn:
            out.append(f" {BEST_MARK}best", style="bold")
        out.append("\n")
    if timed:
        out.append(f"    '|' = 1.00x eager; full width = {scale:.2f}x", style="dim")
    return out


def performance_view(turn: Turn, turns: list[Turn], best_turn: int | None) -> RenderableType:
    v = turn.verdict
    parts: list[RenderableType] = []
    if v is None:
        parts.append(Text("not judged yet", style="italic"))
    elif v.timings is None or v.timings.candidate is None:
        why = f"not timed on {v.device}" if turn.correct else f"no timing: the kernel failed ({v.category.value})"
        parts.append(Text(why, style="italic"))
    else:
        tm = v.timings
        t = Table(show_header=False, box=None, pad_edge=False)
        t.add_column(style="bold", no_wrap=True)
        t.add_column()
        t.add_row("candidate", _ms(tm.candidate))
        t.add_row("eager", _ms(tm.eager))
        t.add_row("torch.compile", _ms(tm.compiled) if tm.compiled else tm.compile_note or "-")
        t.add_row("vs eager", "-" if v.speedup_eager is None else f"{v.speedup_eager:.2f}x")
        t.add_row("vs compile", "-" if v.speedup_compile is None else f"{v.speedup_compile:.2f}x")
        if tm.floor_ms is not None:
            t.add_row("memory floor", f"{tm.floor_ms:.4g} ms ({tm.bandwidth_gbps or 0:.0f} GB/s)")
        if tm.gpu:
            t.add_row("gpu", tm.gpu)
        parts.append(t)
    parts.append(Text("\nspeedup over eager, by turn", style="bold"))
    parts.append(speedup_chart(turns, best_turn))
    return Group(*parts)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}%"


def profile_view(v: Verdict | None) -> RenderableType:
    p: ProfileReport | None = v.profile if v else None
    if p is None or p.source == "none":
        note = p.note if p and p.note else "no profile for this turn (profiles are taken of correct kernels on a GPU)"
        return Text(note, style="italic")
    parts: list[RenderableType] = [Text(f"{p.source}: {p.summary}" if p.summary else p.source, style="bold")]
    if p.kernel_ms is not None:
        parts.append(
            Text(
                f"{p.launches} launches, {p.kernel_ms:.4g} ms in kernels"
                + (f" (benchmark median {p.candidate_ms:.4g} ms)" if p.candidate_ms else "")
            )
        )
    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("kernel", "ms", "dram", "sm", "occ", "regs"):
        t.add_column(col, no_wrap=col != "kernel", overflow="fold")
    for k in p.kernels[:8]:
        t.add_row(
            k.name,
            "-" if k.duration_ms is None else f"{k.duration_ms:.4g}",
            _pct(k.dram_pct),
            _pct(k.compute_pct),
            _pct(k.achieved_occupancy_pct),
            "-" if k.registers_per_thread is None else str(k.registers_per_thread),
        )
    if p.kernels:
        parts.append(t)
    for k in p.kernels[:3]:
        if k.stalls:
            parts.append(Text(f"{k.name} stalls: " + ", ".join(f"{s.reason} {s.share_pct:.0f}%" for s in k.stalls[:4])))
    parts.extend(Text(f"• {h}") for h in p.highlights)
    if p.note:
        parts.append(Text(f"⚠ {p.note}"))
    return Group(*parts)
