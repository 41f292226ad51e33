"""A verdict as a rich table, for the terminal (``kernelfix eval``)."""

from __future__ import annotations

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from kernelfix.prompts.feedback import input_set_lines
from kernelfix.tools.verdict import SANDBOX_NOTE, Category, CorrectnessReport, Verdict


def _flag(value: bool | None) -> Text:
    if value is None:
        return Text("not checked", style="dim")
    return Text("yes", style="green") if value else Text("NO", style="bold red")


def _fmt(x: float | None, unit: str = "") -> str:
    return "n/a" if x is None else f"{x:.4g}{unit}"


def _scale_rows(t: Table, rep: CorrectnessReport) -> None:
    """The checks that no shortcut passes: relative error norm, varied inputs, float64."""
    norms = [r for r in rep.trials if r.rel_error_norm is not None]
    if norms:
        worst = max(norms, key=lambda r: r.rel_error_norm / (r.rel_error_tol or 1))
        t.add_row("rel error norm", f"{worst.rel_error_norm:.3g} worst (trial {worst.trial}; limit {_fmt(worst.rel_error_tol)})")
    varied = [f"{r.variant} {'ok' if r.ok else 'FAIL'}" for r in rep.trials if r.variant]
    varied += [f"{k} skipped ({why})" for k, why in rep.skipped_variants.items()]
    if varied:
        t.add_row("varied inputs", ", ".join(varied))
    f64 = [r for r in rep.trials if r.error_vs_float64 is not None]
    if f64:
        r = max(f64, key=lambda r: r.error_vs_float64)
        t.add_row("vs float64", f"{r.error_vs_float64:.2g} (trial {r.trial}; reference {_fmt(r.reference_error_vs_float64)})")
    elif rep.float64_note:
        t.add_row("vs float64", Text(f"not compared: {rep.float64_note}", style="dim"))
    if rep.vacuous_tolerance:
        t.add_row("tolerance", Text(f"vacuous: {rep.vacuous_tolerance}", style="yellow"))


def verdict_view(v: Verdict) -> Group:
    status = "OK" if v.category == Category.OK else "FAIL"
    title = Text.assemble((f"{status} ", "bold green" if status == "OK" else "bold red"), (v.category.value, "bold"))
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold cyan", no_wrap=True)
    t.add_column()
    t.add_row("task", v.task)
    t.add_row("device / backend", f"{v.device} / {v.backend}")
    t.add_row("compiled", _flag(v.compiled))
    t.add_row("correct", _flag(v.correct))
    t.add_row("legal", _flag(v.legal))
    if v.correctness and v.correctness.trials:
        worst = max(v.correctness.trials, key=lambda r: r.max_abs_error or 0)
        t.add_row("trials", f"{v.correctness.passed}/{len(v.correctness.trials)} passed ({v.correctness.tolerance or _tol(v.correctness)}); max abs err {_fmt(worst.max_abs_error)}")
        _scale_rows(t, v.correctness)
        by_truth = sum(r.passed_by == "float64" for r in v.correctness.trials)
        if v.kernelbench_allclose is not None:
            t.add_row("KernelBench allclose", "yes" if v.kernelbench_allclose else
                      f"no: {by_truth} trial(s) passed against the float64 reference, closer to it than the reference")
    if v.legality and v.legality.forbidden_ops:
        t.add_row("forbidden ops", ", ".join(f"{k} x{n}" for k, n in v.legality.forbidden_ops.items()))
    if v.legality and v.legality.forbidden_backward_ops:
        t.add_row("forbidden ops (backward)", ", ".join(f"{k} x{n}" for k, n in v.legality.forbidden_backward_ops.items()))
    tm = v.timings
    if tm and tm.backward:  # --backward: the rows below are forward+backward
        for name, label in (("candidate", "candidate"), ("eager", "eager"), ("compiled", "torch.compile")):
            p = tm.backward.get(name)
            if p is not None and p.forward is not None and p.forward_backward is not None:
                t.add_row(f"{label} passes", f"forward {p.forward.median_ms:.4g} ms, backward {_fmt(p.backward_ms)} ms, "
                          f"forward+backward {p.forward_backward.median_ms:.4g} ms")
    if tm and tm.candidate:
        c = tm.candidate
        t.add_row("candidate", f"{c.median_ms:.4g} ms median (p10 {c.p10_ms:.4g}, p90 {c.p90_ms:.4g}, n={c.runs})")
    if tm and tm.eager:
        t.add_row("eager", f"{tm.eager.median_ms:.4g} ms")
    if tm and tm.compiled:
        t.add_row("torch.compile", f"{tm.compiled.median_ms:.4g} ms")
    elif tm and tm.compile_note:
        t.add_row("torch.compile", tm.compile_note)
    for line in input_set_lines(v.input_sets)[1:]:  # each shape of a get_input_sets() task
        t.add_row("input set", line.strip())
    if v.speedup_eager is not None:
        t.add_row("speedup", ("geometric mean " if v.input_sets else "") + f"{v.speedup_eager:.2f}x vs eager, {_fmt(v.speedup_compile, 'x')} vs torch.compile")
    if v.profile and (v.profile.summary or v.profile.note):
        t.add_row("profile", v.profile.summary or v.profile.note or "")
    if v.sanitizer is not None:
        t.add_row("sanitizer", sanitizer_summary(v.sanitizer))
    if v.stage_seconds:
        t.add_row("stage time", ", ".join(f"{k} {s:.1f}s" for k, s in v.stage_seconds.items()))
    if v.breakdown:
        t.add_row("inside stages", ", ".join(f"{k} {s:.1f}s" for k, s in v.breakdown.items()))
    if v.logs_dir:
        t.add_row("logs", v.logs_dir)
    gaps = [w.removeprefix(SANDBOX_NOTE) for w in v.warnings if w.startswith(SANDBOX_NOTE)]
    if gaps:
        t.add_row("sandbox", Text("\n".join(gaps), style="yellow"))
    return Group(Panel(t, title=title, title_align="left"), Panel(Text(v.feedback), title="feedback", title_align="left"))


def _tol(rep) -> str:
    from kernelfix.tools.correctness.tolerance import describe

    return describe(rep.atol, rep.rtol)


def sanitizer_summary(r) -> str:
    """The sanitizer stage in one line: the note where it did not run, else its tools, input and hazards."""
    from kernelfix.tools.sanitizer.hazards import WORDS

    if not r.tools:
        return r.note or "not run"
    causes = r.causes
    found = ", ".join(f"{WORDS[h.kind]} in {h.kernel}" + (f" (line {h.where.candidate_line})" if h.where and h.where.candidate_line else "")
                      for h in causes[:3])
    if not found and r.global_races:  # no tool's hazard: the source's races on global memory
        found = ", ".join(f"global-memory race in {g.kernel} (line {g.line}, read from the source)" for g in r.global_races[:3])
    found = found or "no hazard"
    ran = ", ".join(f"{t.tool} {t.seconds:.0f}s" + ("" if t.finished else " (cut off)") for t in r.tools)
    return f"{found}; {ran}; on {r.inputs}" + (f"; {r.note}" if r.note else "")
