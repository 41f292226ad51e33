"""bench/tune_hf.py's results as text: one table of the timings, then what tune kept and where the time goes."""

from __future__ import annotations

GOAL_EAGER = 1.15  # the Llama's prefill, eager, with the swaps


def _ms(st: dict | None) -> str:
    if not st:
        return "-"
    return f"{st['median_ms']:.2f} ms ({st['p10_ms']:.2f}-{st['p90_ms']:.2f})"


def _x(c: dict | None) -> str:
    if not c or c.get("speedup") is None:
        return "-"
    return f"{c['speedup']:.3f}x ({c['speedup_low']:.3f}-{c['speedup_high']:.3f})"


def _row(rows: list, model: str, what: str, before: str, after: str, ratio: str, note: str = "") -> None:
    rows.append((model, what, before, after, ratio, note))


def _timings(model: str, r: dict, rows: list) -> None:
    p = r.get("prefill") or {}
    if p.get("error"):
        _row(rows, model, "prefill", "-", "-", "-", f"FAILED: {p['error'][:80]}")
    elif p.get("eager"):
        logits = f"logits {'match' if p.get('logits_match') else 'DIFFER'} (max diff {p.get('logits_max_abs_diff', 0):.3g}), {p.get('swaps')} swaps"
        e = p["eager"]
        goal = (
            ""
            if model != "llama"
            else f"; goal {GOAL_EAGER}x eager: {'met' if e['speedup'] >= GOAL_EAGER else 'MISSED'}"
        )
        _row(rows, model, "prefill eager", _ms(e.get("before")), _ms(e.get("after")), _x(e), logits + goal)
        c = p.get("compiled") or {}
        _row(
            rows,
            model,
            "prefill torch.compile",
            _ms(c.get("before") or p.get("compiled_original")),
            _ms(c.get("after")),
            _x(c),
            "; ".join([*(p.get("notes") or []), *([p["compiled_error"][:120]] if p.get("compiled_error") else [])])
            or f"compile {p.get('compile_s')} s",
        )
        t = p.get("tuned_eager_vs_compiled_original") or {}
        _row(
            rows,
            model,
            "tuned eager vs compiled original",
            _ms(t.get("before")),
            _ms(t.get("after")),
            _x(t),
            "the aim: at least 1x",
        )
    g = r.get("generate") or {}
    if g.get("error"):
        _row(rows, model, "generate", "-", "-", "-", f"FAILED: {g['error'][:80]}")
    elif g.get("before"):
        ident = (
            "tokens identical" if g.get("tokens_identical") else f"TOKENS DIFFER from token {g.get('first_difference')}"
        )
        if "original_repeats_itself" in g:
            ident += (
                "; the original repeats itself"
                if g["original_repeats_itself"]
                else "; the ORIGINAL ITSELF differs run to run"
            )
        _row(
            rows,
            model,
            f"generate {g.get('new_tokens')} tokens",
            _ms(g["before"]),
            _ms(g["after"]),
            _x(g),
            f"{ident}; kernels ran {g.get('kernel_calls_per_generate')} calls/generate, {g.get('fallbacks')} fallbacks",
        )
    t = r.get("train") or {}
    if t.get("error"):
        _row(rows, model, "training step", "-", "-", "-", f"FAILED: {t['error'][:80]}")
    elif t.get("original"):
        tu = t.get("tuned") or {}
        _row(
            rows,
            model,
            "train step: tuned --backward",
            _ms(t["original"]),
            _ms(tu.get("after")),
            _x(tu) if tu else "-",
            "; ".join(t.get("notes") or []) or f"loss {t.get('loss')}",
        )
        lg = t.get("liger")
        if lg:
            _row(
                rows,
                model,
                "train step: Liger Kernel",
                _ms(t["original"]),
                _ms(lg),
                f"{lg['speedup_vs_original_median']:.3f}x (medians)",
                "apply_liger_kernel_to_llama(), timed after the two above",
            )


def _tune_lines(model: str, part: str, r: dict) -> list[str]:
    t = r.get(part)
    if not t:
        return []
    out = [f"{model} {part}: rc {t.get('rc')} in {t.get('seconds')} s; kept {t.get('kept') or 'nothing'}"]
    for m in t.get("tuned", []):
        e, c = m["eager"], m["compiled"]
        out.append(
            f"  {m['module']} ({m['class']}, share {m['share']}): session {m['status']}, swap "
            f"{'KEPT' if m['kept'] else 'not kept'}: eager {e.get('speedup')}x (p10 {e.get('speedup_low')}), compiled "
            f"{c.get('speedup')}x (p10 {c.get('speedup_low')}){'' if m['kept'] else '; ' + str(m.get('reason'))[:160]}"
        )
    comb = t.get("combined")
    if comb:
        out.append(
            f"  together {comb['modules']}: {'KEPT' if comb['kept'] else 'not kept'}: eager {comb['eager'].get('speedup')}x "
            f"({comb['eager'].get('before_ms')} -> {comb['eager'].get('after_ms')} ms), compiled {comb['compiled'].get('speedup')}x"
        )
    return out


def _profile_lines(model: str, r: dict) -> list[str]:
    p = r.get("profile") or {}
    if not p or p.get("error"):
        return [f"{model} profile: FAILED: {p['error'][:200]}"] if p.get("error") else []
    after = p.get("after_swaps") or {}
    out = [f"{model} after the swaps, one forward: {after.get('total_ms')} ms of kernels (top 12)"]
    out += [
        f"  {k['ms']:9.3f} ms {100 * k['share']:5.1f}%  x{k['calls']:<6g} {k['kernel'][:90]}"
        for k in after.get("kernels", [])[:12]
    ]
    for g in after.get("gemms", [])[:6]:
        out.append(
            f"  {g['op']}: {g['ms']:.3f} ms, {g['tflops']} TFLOPS ({100 * g['of_peak']:.0f}% of the H200's bf16 peak)"
        )
    bw = p.get("copy_tbs")
    out.append(
        f"{model} hand-written kernels alone at the model's shapes (copy bandwidth {bw if bw else '-'} TB/s; H200 spec 4.8 TB/s)"
    )
    for k in p.get("roofline", []):
        of_copy = f"{100 * k['of_copy']:.0f}% of copy, " if k.get("of_copy") else ""
        out.append(
            f"  {k['kernel']:<22} {k['shape']:<40} {k['ms'] * 1e3:9.1f} us {k['tbs']:6.2f} TB/s ({of_copy}{100 * k['of_spec']:.0f}% of spec)"
        )
    return out


def table(results: dict) -> str:
    rows: list = []
    for model in ("llama", "qwen3_moe"):
        if model in results:
            _timings(model, results[model], rows)
    head = ("model", "measure", "original (p10-p90)", "tuned (p10-p90)", "speedup (p10-p90)", "")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(5)]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(r[:5], widths)) + "  " + r[5] for r in [head, *rows]]
    for model in ("llama", "qwen3_moe"):
        if model in results:
            lines += _tune_lines(model, "tune", results[model]) + _tune_lines(model, "train-tune", results[model])
            lines += _profile_lines(model, results[model])
    return "\n".join(lines)
