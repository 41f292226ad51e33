"""What `kernelfix tune` prints for a person (--json prints report.json instead)."""

from __future__ import annotations

from kernelfix.tune.decide import verdict
from kernelfix.tune.tune_config import TuneConfig
from kernelfix.tune.tune_report import Comparison, Ranking, SwapTrial, TuneReport

TABLE_ROWS = 12


def _ms(x: float) -> str:
    return f"{x:.3f} ms" if x >= 0.01 else f"{1e3 * x:.1f} us"


WIDTH = 120  # the table and its lines fit this many columns


def _fit(text: str, width: int) -> str:
    """``text`` cut at a word to ``width`` columns (never mid-word), with an ellipsis when cut."""
    if len(text) <= width:
        return text
    cut = text[: width - 4].rsplit(" ", 1)[0]
    return cut + " ..."


def _wrap(text: str, indent: str = "  ", width: int = WIDTH) -> list[str]:
    import textwrap

    return textwrap.wrap(
        text,
        width=width,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    ) or [indent]


def wrapped(text: str) -> str:
    """One message in lines of at most WIDTH columns, broken between words."""
    return "\n".join(_wrap(text, indent=""))


def fit_lines(text: str) -> str:
    """Each line of ``text`` within WIDTH columns, a long one broken between words and indented under itself (a path
    longer than the line stays whole)."""
    out = []
    for line in text.split("\n"):
        if len(line) <= WIDTH:
            out.append(line)
            continue
        pad = line[: len(line) - len(line.lstrip())]
        out += _wrap(line.strip(), indent=pad)
    return "\n".join(out)


_SHORT = {
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "float64": "f64",
    "int64": "i64",
    "int32": "i32",
    "bool": "b8",
}


def short_call(sig: str) -> str:
    """``kwargs['hidden_states']: float32[2, 16, 64], ...`` -> ``f32[2,16,64] +3``: the first tensor, and how many more."""
    import re

    tensors = re.findall(r"\b((?:b?float|u?int|complex)\d+|bool)\[([\d, ]*)\]", sig)
    if not tensors:
        return "-"
    dtype, shape = tensors[0]
    more = f" +{len(tensors) - 1}" if len(tensors) > 1 else ""
    return f"{_SHORT.get(dtype, dtype)}[{shape.replace(' ', '')}]{more}"


def ranking_text(r: TuneReport) -> str:
    from kernelfix.tune.tune_report import label

    rk: Ranking = r.ranking
    what = "CUDA kernel time" if rk.measure == "cuda_kernels" else "CPU time (the profiler's own cost per op included)"
    step = "forward+backward step" if rk.backward else "forward"
    head = _wrap(
        f"{r.model_name} ({r.model_class.rsplit('.', 1)[-1]}) on {rk.device}, called with {', '.join(short_call(x) for x in r.inputs[:1]) or 'no arguments'}"
        f"{' (' + str(len(r.inputs)) + ' arguments, all in report.json)' if len(r.inputs) > 1 else ''}",
        indent="",
    )
    head += _wrap(
        f"{step}: {_ms(rk.step_ms)} end to end"
        + (
            f", {_ms(rk.kernel_ms)} of CUDA kernels (the GPU busy {100 * rk.busy:.0f}%)"
            if rk.kernel_ms is not None and rk.busy is not None
            else ""
        )
        + f"; ranked by {what} over {rk.steps} {step}s, {_ms(rk.attributed_ms)} per {step}"
    )
    if rk.why:
        head += _wrap(rk.why)
    cands = [m for m in r.modules if m.candidate]
    rows = [("#", "target", "share", "bound", "calls", "input", "capture")]
    for m in cands[:TABLE_ROWS]:
        cap = "-" if m.capture is None else "ok" if m.capture == "ok" else "no"
        rows.append(
            (
                str(m.rank),
                _fit(label(m), 44),
                f"{100 * m.share:.1f}%",
                f"{m.amdahl:.3f}x" if m.amdahl else "-",
                f"{m.calls:g}",
                short_call(m.shapes[0]) if m.shapes else "-",
                cap,
            )
        )
    lines = head + [
        "",
        _fit(
            f"targets, largest share first (share: of the {step}, every instance included; bound: the model's "
            "speedup if it took no time)",
            WIDTH,
        ),
    ]
    if len(rows) > 1:
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines += [
            "  "
            + "  ".join(
                c.ljust(w) if i in (1, 5, 6) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))
            ).rstrip()
            for row in rows
        ]
        if len(cands) > TABLE_ROWS:
            lines.append(f"  ... {len(cands) - TABLE_ROWS} more in report.json")
        for m in cands[:TABLE_ROWS]:
            if m.chosen_because and "over" in m.chosen_because:
                lines += _wrap(f"#{m.rank} {label(m)}: {m.chosen_because}")
            if m.capture not in (None, "ok"):
                lines += _wrap(f"#{m.rank} {label(m)}: capture cannot take it: {m.capture}")
    else:
        lines.append("  none")
    others = [m for m in r.modules if not m.candidate and m.module != r.model_name][:6]
    if others:
        lines += ["", "passed over (the largest; every module in report.json):"]
        for m in others:
            lines += _wrap(f"{label(m)} ({100 * m.share:.1f}%): {m.reason}")
    return "\n".join(lines)


def no_candidates_text(r: TuneReport, cfg: TuneConfig) -> str:
    reasons: dict[str, int] = {}
    for m in r.modules:
        if m.module != r.model_name and m.reason:
            key = m.reason.split(":")[0].split(" (")[0]
            reasons[key] = reasons.get(key, 0) + 1
    why = (
        "; ".join(f"{n} module{'s' if n > 1 else ''}: {k}" for k, n in sorted(reasons.items(), key=lambda kv: -kv[1]))
        or "it calls no submodule"
    )
    skipped = [m for m in r.modules if m.skipped]
    extra = "" if not skipped else " " + "; ".join(f"{m.module} skipped: {m.skipped}" for m in skipped[:3])
    return (
        f"no module of {r.model_name} is worth a kernel ({why}; a module is worth one when it runs two or more compute ops "
        f"per call, holds at least {100 * cfg.min_share:g}% of the forward ([tune] min_share) and holds no smaller such module).{extra}"
    )


def comparison_line(c: Comparison | None, cfg: TuneConfig) -> str:
    """A mode's times (the rounds' medians, with their p10-p90) and the statistic the keep test reads (``verdict``)."""
    if c is None:
        return "not measured"
    if c.error or c.before is None or c.after is None:
        return verdict(c, cfg)
    return (
        f"{c.mode:8} forward {_ms(c.before.median_ms)} -> {_ms(c.after.median_ms)} median of {c.before.rounds} rounds "
        f"(p10-p90 {_ms(c.before.p10_ms)}-{_ms(c.before.p90_ms)} -> {_ms(c.after.p10_ms)}-{_ms(c.after.p90_ms)}); {verdict(c, cfg)}"
    )


def trial_text(t: SwapTrial, cfg: TuneConfig) -> str:
    what = " + ".join(t.targets or t.modules)
    lines = [f"  {what}: {'KEPT' if t.kept else 'not kept'}: {t.reason}"]
    for c in (t.eager, t.compiled):
        if c is not None and c.before is not None:
            lines.append(f"      {comparison_line(c, cfg)}")
    lines += [f"      {m}: {text}" for m, text in t.compile_paths.items()]
    return "\n".join(lines)


def summary_text(r: TuneReport, out: str, cfg: TuneConfig) -> str:
    lines = []
    if r.kept:
        c = r.combined
        lines.append(f"kept {len(r.kept)} swap{'s' if len(r.kept) > 1 else ''}: {', '.join(k.module for k in r.kept)}")
        if c is not None:
            lines += [f"  {comparison_line(x, cfg)}" for x in (c.eager, c.compiled) if x is not None]
        lines += [
            "",
            "Put them in your model, after building it and before running it:",
            "",
            "    import kernelfix",
            f"    {r.model_name} = kernelfix.load_tuned({out!r}, {r.model_name})",
        ]
    elif not r.selected:
        lines.append(f"tuned nothing: no module of {r.model_name} is worth a kernel (above); the model stays as it is")
    else:
        tried = [m for m in r.selected if m.swap is not None]
        if tried:
            lines.append(
                f"kept no swap: {len(tried)} tried, none made {r.model_name}'s forward faster beyond the noise "
                "eager and compiled with its output intact (report.json says why for each); the model stays as it is"
            )
        else:
            where = ", ".join(f"{m.module}: {m.skipped or m.session_status or 'not run'}" for m in r.selected)
            lines.append(
                f"kept no swap: no session found a correct kernel ({where}); the model stays as it is; "
                "run the same command again to continue unfinished sessions"
            )
    lines.append(f"report: {out}/report.json")
    return "\n".join(lines)
