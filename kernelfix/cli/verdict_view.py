"""A verdict for a person, on the terminal (``kernelfix eval``).

By default ``person_view``: the category, what went wrong in one line, the speedups, the first finding and
where the files are (only when they are kept). With -v ``verdict_view``: every check, the judge's stage
times and the timers inside them, and the feedback the model would read. With -q the category alone.
"""

from __future__ import annotations

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from kernelfix.tools.feedback.verdict_text import input_set_lines
from kernelfix.tools.verdict import SANDBOX_NOTE, CorrectnessReport, Family, Verdict

VERBOSE_HINT = "-v: every check, the stage times and the feedback the model reads"


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
        t.add_row(
            "rel error norm",
            f"{worst.rel_error_norm:.3g} worst (trial {worst.trial}; limit {_fmt(worst.rel_error_tol)})",
        )
    varied = [f"{r.variant} {'ok' if r.ok else 'FAIL'}" for r in rep.trials if r.variant]
    varied += [f"{k} skipped ({why})" for k, why in rep.skipped_variants.items()]
    if varied:
        t.add_row("varied inputs", ", ".join(varied))
    f64 = [r for r in rep.trials if r.error_vs_float64 is not None]
    if f64:
        r = max(f64, key=lambda r: r.error_vs_float64)
        t.add_row(
            "vs float64", f"{r.error_vs_float64:.2g} (trial {r.trial}; reference {_fmt(r.reference_error_vs_float64)})"
        )
    elif rep.float64_note:
        t.add_row("vs float64", Text(f"not compared: {rep.float64_note}", style="dim"))
    if rep.vacuous_tolerance:
        t.add_row("tolerance", Text(f"vacuous: {rep.vacuous_tolerance}", style="yellow"))


def _title(v: Verdict) -> Text:
    return Text(v.category.value, style="bold green" if v.ok else "bold red")


def _grid() -> Table:
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold cyan", no_wrap=True)
    t.add_column(overflow="fold")  # wraps between words; only a token wider than the terminal is folded
    return t


def person_view(v: Verdict, *, files: str | None = None) -> Group:
    """The verdict for a person: category (the title), result in one line, speedups, the first finding,
    sandbox gaps, and ``files`` (the evaluation's folder) only when it is kept."""
    t = _grid()
    t.add_row("task", f"{v.task} on {v.device} ({v.backend})")
    result = result_line(v)
    t.add_row("result", result)
    speed = speed_line(v)
    if speed:
        t.add_row("speedup", speed)
    finding = first_finding(v)
    if finding and finding not in result:
        t.add_row("first finding", finding)
    gaps = [w.removeprefix(SANDBOX_NOTE) for w in v.warnings if w.startswith(SANDBOX_NOTE)]
    if gaps:
        t.add_row("sandbox", Text("\n".join(gaps), style="yellow"))
    if files:
        t.add_row("files", files)
    return Group(Panel(t, title=_title(v), title_align="left", expand=False), Text(VERBOSE_HINT, style="dim"))


def result_line(v: Verdict) -> str:
    """What happened, in one line: the judge's message, or for a kernel that passed, what it passed."""
    if not v.ok:
        return v.message or v.category.value
    rep = v.correctness
    trials = f" on {rep.passed}/{len(rep.trials)} trials" if rep and rep.trials else ""
    return f"correct{trials} and legal" + (
        "" if v.speedup_eager is not None or v.device != "cpu" else "; not timed (timing needs a CUDA GPU)"
    )


def speed_line(v: Verdict) -> str | None:
    tm = v.timings
    if v.speedup_eager is None:
        return None
    cand = (
        f" ({tm.candidate.median_ms:.4g} ms against {tm.eager.median_ms:.4g} ms)"
        if tm and tm.candidate and tm.eager
        else ""
    )
    line = ("geometric mean " if v.input_sets else "") + f"{v.speedup_eager:.2f}x vs eager{cand}"
    if v.speedup_compile is not None:
        line += f", {v.speedup_compile:.2f}x vs torch.compile"
    elif tm and tm.compile_note:
        line += f"; torch.compile not timed: {tm.compile_note}"
    return line


def first_finding(v: Verdict) -> str | None:
    """The one thing to look at first: the sanitizer's cause, the compiler's first error, the first wrong trial,
    the forbidden ops, or for a correct kernel the profile's costliest finding or a precision warning."""
    from kernelfix.tools.sanitizer.hazards import describe

    causes = v.sanitizer.causes if v.sanitizer else []
    if causes:
        h = causes[0]
        return describe(h) + (f"; fix: {h.fix}" if h.fix else "")
    fam = v.family
    if fam == Family.COMPILE and v.compile and v.compile.errors:
        return "\n".join(v.compile.errors[:3])
    if fam == Family.CORRECTNESS and v.correctness:
        bad = next((r for r in v.correctness.trials if not r.ok), None)
        if bad is not None:
            bits = (
                [] if not bad.problem or bad.problem in (v.message or "") else [bad.problem]
            )  # the result line says it already
            if bad.max_abs_error is not None:
                bits.append(f"max abs error {bad.max_abs_error:.3g}")
            if bad.worst_index is not None and bad.expected is not None and bad.actual is not None:
                bits.append(f"worst at {tuple(bad.worst_index)}: expected {bad.expected:.6g}, got {bad.actual:.6g}")
            if bits:
                return (
                    f"trial {bad.trial}" + (f" ({bad.variant} inputs)" if bad.variant else "") + ": " + "; ".join(bits)
                )
    if fam == Family.CHEATING and v.legality:
        ops = v.legality.forbidden_ops or v.legality.forbidden_backward_ops
        if ops:
            return "torch ops doing the work: " + ", ".join(
                f"aten::{k} x{n}" for k, n in sorted(ops.items(), key=lambda kv: -kv[1])[:6]
            )
        errs = [f for f in v.legality.static_findings if f.severity == "error"]
        if errs:
            return (f"line {errs[0].line}: " if errs[0].line else "") + errs[0].message
    if v.ok:
        if v.profile and v.profile.findings:
            f = v.profile.findings[0]
            line = f" (line {f.where.candidate_line})" if f.where and f.where.candidate_line else ""
            return f"{f.what} in {f.kernel}{line}; fix: {f.fix}"
        if v.correctness and v.correctness.precision_warning:
            return v.correctness.precision_warning
    return None


def verdict_view(v: Verdict, *, files: str | None = None) -> Group:
    """Everything (-v): each check, the timings, the judge's stage times and the timers inside them, then the
    feedback the model reads."""
    t = _grid()
    t.add_row("task", v.task)
    t.add_row("result", result_line(v))
    t.add_row("device / backend", f"{v.device} / {v.backend}")
    t.add_row("compiled", _flag(v.compiled))
    t.add_row("correct", _flag(v.correct))
    t.add_row("legal", _flag(v.legal))
    if v.correctness and v.correctness.trials:
        worst = max(v.correctness.trials, key=lambda r: r.max_abs_error or 0)
        t.add_row(
            "trials",
            f"{v.correctness.passed}/{len(v.correctness.trials)} passed ({v.correctness.tolerance or _tol(v.correctness)}); max abs err {_fmt(worst.max_abs_error)}",
        )
        _scale_rows(t, v.correctness)
        by_truth = sum(r.passed_by == "float64" for r in v.correctness.trials)
        if v.kernelbench_allclose is not None:
            t.add_row(
                "KernelBench allclose",
                "yes"
                if v.kernelbench_allclose
                else f"no: {by_truth} trial(s) passed against the float64 reference, closer to it than the reference",
            )
    if v.legality and v.legality.forbidden_ops:
        t.add_row("forbidden ops", ", ".join(f"{k} x{n}" for k, n in v.legality.forbidden_ops.items()))
    if v.legality and v.legality.forbidden_backward_ops:
        t.add_row(
            "forbidden ops (backward)", ", ".join(f"{k} x{n}" for k, n in v.legality.forbidden_backward_ops.items())
        )
    tm = v.timings
    if tm and tm.backward:  # --backward: the rows below are forward+backward
        for name, label in (("candidate", "candidate"), ("eager", "eager"), ("compiled", "torch.compile")):
            p = tm.backward.get(name)
            if p is not None and p.forward is not None and p.forward_backward is not None:
                t.add_row(
                    f"{label} passes",
                    f"forward {p.forward.median_ms:.4g} ms, backward {_fmt(p.backward_ms)} ms, "
                    f"forward+backward {p.forward_backward.median_ms:.4g} ms",
                )
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
        t.add_row(
            "speedup",
            ("geometric mean " if v.input_sets else "")
            + f"{v.speedup_eager:.2f}x vs eager, {_fmt(v.speedup_compile, 'x')} vs torch.compile",
        )
    if v.profile and (v.profile.summary or v.profile.note):
        t.add_row("profile", v.profile.summary or v.profile.note or "")
    if v.sanitizer is not None:
        t.add_row("sanitizer", sanitizer_summary(v.sanitizer))
    if v.stage_seconds:
        t.add_row("stage time", ", ".join(f"{k} {s:.1f}s" for k, s in v.stage_seconds.items()))
    if v.breakdown:
        t.add_row("inside stages", ", ".join(f"{k} {s:.1f}s" for k, s in v.breakdown.items()))
    gaps = [w.removeprefix(SANDBOX_NOTE) for w in v.warnings if w.startswith(SANDBOX_NOTE)]
    if gaps:
        t.add_row("sandbox", Text("\n".join(gaps), style="yellow"))
    if files:
        t.add_row("files", files)
    return Group(
        Panel(t, title=_title(v), title_align="left", expand=False),
        Panel(Text(v.feedback), title="feedback (what the model reads next)", title_align="left", expand=False),
    )


def _tol(rep) -> str:
    from kernelfix.tools.correctness.tolerance import describe

    return describe(rep.atol, rep.rtol)


def sanitizer_summary(r) -> str:
    """The sanitizer stage in one line: the note where it did not run, else its tools, input and hazards."""
    from kernelfix.tools.sanitizer.hazards import WORDS

    if not r.tools:
        return r.note or "not run"
    causes = r.causes
    found = ", ".join(
        f"{WORDS[h.kind]} in {h.kernel}"
        + (f" (line {h.where.candidate_line})" if h.where and h.where.candidate_line else "")
        for h in causes[:3]
    )
    if not found and r.global_races:  # no tool's hazard: the source's races on global memory
        found = ", ".join(
            f"global-memory race in {g.kernel} (line {g.line}, read from the source)" for g in r.global_races[:3]
        )
    found = found or "no hazard"
    ran = ", ".join(f"{t.tool} {t.seconds:.0f}s" + ("" if t.finished else " (cut off)") for t in r.tools)
    return f"{found}; {ran}; on {r.inputs}" + (f"; {r.note}" if r.note else "")
