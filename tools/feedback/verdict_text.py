"""[judge] The verdict as a short text for the model's next turn (and for people): ``Verdict.feedback``.

Repair-oriented after a failure (what failed, where, the numbers), optimization-
oriented after success (runtime, speedups, the profile's bottleneck and the
numbers behind it). Kept to a few lines: the full logs and the whole profile
stay on disk and in the verdict. The judge returns data; this is the one place that turns a verdict
into the model's text, and Judge.finish stores it in ``Verdict.feedback`` (kept in every trajectory).
"""

from __future__ import annotations

from kernelfix.tools.correctness.input_variants import describe
from kernelfix.tools.feedback import build_feedback
from kernelfix.tools.verdict import (
    SANDBOX_NOTE,
    Category,
    CorrectnessReport,
    Family,
    InputSetReport,
    TimingStats,
    Verdict,
)


def _ms(t: TimingStats | None) -> str:
    return "n/a" if t is None else f"{t.median_ms:.4g} ms"


def _fmt_index(idx: list[int] | None) -> str:
    return "?" if idx is None else "(" + ", ".join(map(str, idx)) + ")"


def render(v: Verdict) -> str:
    lines: list[str] = _sanitizer(v)  # the cause, where the sanitizer named one, before the numbers
    fam = v.family
    if v.category == Category.OK:
        lines.append(_success(v))
        lines += _checks(v.correctness)
        if v.profile:
            lines += v.profile.highlights
            lines += _techniques(v)
    elif fam == Family.FORMAT:
        lines.append(f"Format error ({v.category.value.split(':')[1]}): {v.message}.")
        lines.append(
            "Reply with one complete ```python block defining class ModelNew(nn.Module) with the same __init__ and forward signature as Model."
        )
    elif fam == Family.COMPILE:
        lines.append(f"Compilation failed ({v.category.value.split(':')[1]}): {v.message}")
        if v.compile and v.compile.errors:
            lines += [f"  {e}" for e in v.compile.errors]
    elif fam == Family.RUNTIME:
        lines.append(f"Runtime error ({v.category.value.split(':')[1].replace('_', ' ')}): {v.message}")
        if v.category == Category.ILLEGAL_MEMORY_ACCESS:
            lines.append(
                "Check index bounds and masks against the tensor sizes, and that pointers are to contiguous tensors of the dtype you assume."
            )
        elif v.category == Category.RUN_TIMEOUT:
            lines.append("The kernel or its launch loop did not terminate: check loop bounds and grid size.")
        elif v.category == Category.RESOURCE_LIMIT:
            lines.append("Stay within the sandbox's limits: no mass printing, no extra processes, no huge files.")
    elif fam == Family.CORRECTNESS:
        lines += _correctness(v)
    elif fam == Family.CHEATING:
        lines += _cheating(v)
    elif v.category == Category.NO_GPU:
        lines.append(f"Compiled; not run: {v.message}")
    else:
        lines.append(f"Judge problem ({v.category.value}), not caused by your code: {v.message}")
    lines += input_set_lines(v.input_sets, v.speedup_eager)  # a task with get_input_sets(): each shape
    lines += build_feedback.lines(v)  # every turn that built an extension: its time and what dominated it
    warns = [
        w for w in v.warnings if w and not w.startswith(SANDBOX_NOTE)
    ]  # the judge's own limits are not the model's business
    if warns and v.category not in (Category.DISALLOWED_ATEN,):
        lines.append("Warnings:")
        lines += [f"  - {w}" for w in warns[:6]]
    return "\n".join(lines)


MAX_HAZARDS = 3  # hazards the feedback names (the verdict keeps them all)


def _sanitizer(v: Verdict) -> list[str]:
    """What compute-sanitizer found (tools/sanitizer/): each of the candidate's hazards with its line, then its
    fix (once per kind). Where it ran and found none, one line that narrows the search; a note (no GPU, no
    sanitizer) stays out of the model's text."""
    from kernelfix.tools.kernel_source.races import LOOKED_FOR
    from kernelfix.tools.sanitizer.hazards import describe

    r = v.sanitizer
    if r is None or not r.tools:
        return []
    ran = ", ".join(t.tool for t in r.tools if t.problem is None) or ", ".join(t.tool for t in r.tools)
    on = f" on {r.inputs}" if r.inputs else ""
    causes = r.causes
    if not causes:
        races = _global_races(r.global_races)
        if r.nondeterministic:
            head = (
                f"compute-sanitizer ({ran}{on}) found no hazard, but two calls on the same inputs gave different outputs "
                f"({r.nondeterministic}): a race on global memory (racecheck sees shared memory only), or atomics whose "
                "order changes the result."
            )
            if races:
                return [
                    head,
                    "Cause: your source reads, adds to and writes back global memory that several threads or programs reach, "
                    "without an atomic:",
                    *races,
                ]
            if r.global_races is not None:
                return [
                    head,
                    f"Your source shows no {LOOKED_FOR}: look at atomics on floats (their order changes the sum's "
                    "rounding), and at kernels that read what another block or launch writes.",
                ]
            return [head]
        if not all(t.problem is None and t.finished for t in r.tools):
            return []  # a partial run proves nothing either way
        clean = f"compute-sanitizer ({ran}{on}) found no out-of-bounds or misaligned access, shared-memory race, barrier error or uninitialized read"
        if races:  # a lost update can be the same on every call: the wrong output is its only sign
            return [
                clean
                + "; racecheck sees shared memory only, and your source reads, adds to and writes back global memory "
                "that several threads or programs reach, without an atomic:",
                *races,
            ]
        return [clean + ("." if v.category == Category.OK else ": look at the arithmetic and the index math.")]
    tools = ", ".join(dict.fromkeys(h.tool for h in causes[:MAX_HAZARDS]))
    head = "Correct on every trial, but" if v.category == Category.OK else "Cause:"
    lines = [
        f"{head} compute-sanitizer ({tools}{on}) found {len(causes)} hazard{'s' if len(causes) > 1 else ''} in your kernels:"
    ]
    fixed: set[str] = set()
    for h in causes[:MAX_HAZARDS]:
        lines.append(f"  - {describe(h)}.")
        if h.fix and h.fix not in fixed:
            fixed.add(h.fix)
            lines.append(f"    Fix: {h.fix}")
    if len(causes) > MAX_HAZARDS:
        lines.append(f"  ({len(causes) - MAX_HAZARDS} more in the verdict's sanitizer report.)")
    if r.nondeterministic:
        lines.append(f"  Two calls on the same inputs also gave different outputs ({r.nondeterministic}).")
    return lines


def _global_races(found) -> list[str]:
    """The races on global memory the source shows (tools/kernel_source/races.py), each with its line and fix (once per fix)."""
    lines: list[str] = []
    fixed: set[str] = set()
    for g in (found or [])[:MAX_HAZARDS]:
        lines.append(f"  - line {g.line} of your source, in {g.kernel}: `{g.code}`: {g.why}.")
        if g.fix not in fixed:
            fixed.add(g.fix)
            lines.append(f"    Fix: {g.fix[0].upper()}{g.fix[1:]}.")
    return lines


def _techniques(v: Verdict) -> list[str]:
    """The knowledge notes the findings call for, by title: the ones the next message carries with their text and
    exemplars (knowledge.for_profile picks both)."""
    from kernelfix.tools.feedback import knowledge

    notes = knowledge.for_profile(v.profile)
    return (
        [f"Techniques for these findings: {'; '.join(n.title for n in notes)} (kernelfix.tools.feedback.knowledge)."]
        if notes
        else []
    )


def _success(v: Verdict) -> str:
    t = v.timings
    passed = v.correctness.passed if v.correctness else 0
    head = f"Correct ({passed}/{passed} trials) and legal."
    if t is None or t.candidate is None:
        return head + f" Not timed on {v.device}."
    c = t.candidate
    parts = [f"{head} Runtime {c.median_ms:.4g} ms (median of {c.runs}, p10-p90 {c.p10_ms:.4g}-{c.p90_ms:.4g} ms)."]
    if v.speedup_eager is not None:
        parts.append(f"Eager PyTorch {_ms(t.eager)}: {v.speedup_eager:.2f}x.")
    if v.speedup_compile is not None:
        parts.append(f"torch.compile {_ms(t.compiled)}: {v.speedup_compile:.2f}x.")
    elif t.compile_note:
        parts.append(f"({t.compile_note})")
    if t.backward:  # --backward: the times above are forward+backward; where the time goes, per pass
        parts.insert(1, "(forward+backward, what ranks.)")
        parts.append(_passes(t))
    elif t.floor_ms:
        parts.append(f"Memory floor {t.floor_ms:.4g} ms ({c.median_ms / t.floor_ms:.1f}x above it).")
    return " ".join(parts)


def _passes(t) -> str:
    """--backward: each callable's forward and backward, so the model knows which pass to work on."""
    names = {"candidate": "yours", "eager": "eager", "compiled": "torch.compile"}
    out = []
    for key, label in names.items():
        p = (t.backward or {}).get(key)
        if p is not None and p.forward is not None and p.backward_ms is not None:
            out.append(f"{label} forward {p.forward.median_ms:.4g} ms + backward {p.backward_ms:.4g} ms")
    return ("Passes: " + "; ".join(out) + ".") if out else ""


def _checks(rep: CorrectnessReport | None) -> list[str]:
    """What the correctness checks beyond atol/rtol saw, on a correct candidate: one line, two with a vacuous tolerance."""
    if rep is None or not rep.trials:
        return []
    parts = []
    norms = [t for t in rep.trials if t.rel_error_norm is not None]
    if norms:
        worst = max(norms, key=lambda t: t.rel_error_norm / (t.rel_error_tol or 1))
        parts.append(
            f"relative error norm at most {worst.rel_error_norm:.2g} (trial {worst.trial}, limit {worst.rel_error_tol:.2g})"
        )
    varied = [t.variant for t in rep.trials if t.variant]
    if varied:
        parts.append(f"right on {len(varied)} varied-input trials ({', '.join(varied)})")
    if rep.skipped_variants:
        parts.append("not tried: " + "; ".join(f"{k} ({why})" for k, why in rep.skipped_variants.items()))
    by_truth = [t for t in rep.trials if t.passed_by == "float64"]
    if by_truth:
        t = by_truth[0]
        parts.append(
            f"{len(by_truth)} trial(s) outside atol/rtol of the reference passed against the float64 reference "
            f"(trial {t.trial}: your max error {t.truth.error_max:.2g}, the reference's own {t.truth.reference_error_max:.2g}); "
            "KernelBench's allclose alone would fail them"
        )
    f64 = [t for t in rep.trials if t.error_vs_float64 is not None]
    if f64:
        t = max(f64, key=lambda t: t.error_vs_float64)
        parts.append(
            f"error vs float64 {t.error_vs_float64:.2g} on trial {t.trial} (the reference's {t.reference_error_vs_float64:.2g})"
        )
    lines = ["Checks: " + "; ".join(parts) + "."] if parts else []
    return lines + _vacuous(rep)


def _vacuous(rep: CorrectnessReport | None) -> list[str]:
    if rep is None or not rep.vacuous_tolerance:
        return []
    return [
        f"Note: atol/rtol alone prove nothing for this task: {rep.vacuous_tolerance}. The relative error norm decides."
    ]


def _correctness(v: Verdict) -> list[str]:
    rep = v.correctness
    failing = [t for t in rep.trials if not t.ok] if rep else []
    if not failing:
        return [f"Wrong output: {v.message}"]
    t = failing[0]
    n = len(rep.trials)
    advice = []
    if v.category == Category.INPUT_DEPENDENT:
        where = describe(t.variant, t.variant_of) if t.variant else "varied inputs"
        lines = [f"Right on the task's own inputs, wrong on trial {t.trial} ({where}): {t.problem}."]
        if t.truth is not None and not _far_above_rounding(t):
            # Off by more than the factor, but within reach of float32 rounding: a precision
            # problem the variant exposed, not a result that rests on the input distribution.
            lines.append(
                f"Against the exact (float64) result your relative error is {t.truth.error_norm:.2g}, "
                f"{t.truth.error_norm / max(t.truth.reference_error_norm, 1e-300):.0f}x the reference's own "
                f"{t.truth.reference_error_norm:.2g} (the limit is {t.truth.factor:g}x)."
            )
            advice = [
                "On these inputs the kernel loses more precision than the reference: look at the accumulation order "
                "and width (pairwise or per-thread partial sums in float32, never float16 accumulators), large "
                "intermediates that cancel, and approximations (fast exp/rsqrt) that the wider range exposes."
            ]
        else:
            advice = [
                "Compute the function for any input: nothing may rest on get_inputs()'s distribution (its mean, variance, range, a loss's expected value)."
            ]
    elif v.category == Category.PRECISION:
        return [
            f"Not accurate enough: {v.message}.",
            'Compute in float32 as the task does: no fp16/bf16 casts; in Triton, tl.dot(a, b, input_precision="tf32x3") (three TF32 '
            'products: float32-accurate, and faster than "ieee" FMAs where the judge measured it, on an H100) or "ieee", never the default TF32.',
        ]
    elif v.category == Category.NO_GRADIENT:
        return [
            f"No gradient on trial {t.trial}: {t.problem}.",
            "The backward pass is judged: wrap your kernels in a torch.autograd.Function (forward saves what backward needs "
            "with ctx.save_for_backward; backward launches your backward kernels and returns one gradient per forward input), "
            "call it as Fn.apply(...) in ModelNew.forward, and use the parameters (same order and shapes as Model's) as its inputs.",
        ]
    elif (t.problem or "").startswith("grad of"):
        lines = [f"Wrong gradient on trial {t.trial} (seed {t.seed}; the forward output is right): {t.problem}."]
        advice = [
            "Check your backward against the chain rule for this input or parameter: the cotangent (grad_output) is random, "
            "the reduction over broadcast dimensions (a weight's gradient sums over the batch) belongs in your kernel, "
            "and each gradient has its input's shape and dtype."
        ]
    else:
        lines = [f"Wrong output on trial {t.trial} (seed {t.seed}; {len(failing)} of {n} trials fail): {t.problem}."]
    if t.max_abs_error is not None and t.category == Category.NUMERICAL and t.expected is not None:
        norm = (
            f", relative error norm {t.rel_error_norm:.3g} (limit {t.rel_error_tol:.3g})"
            if t.rel_error_norm is not None
            else ""
        )
        lines.append(
            f"max abs error {t.max_abs_error:.3g}, max rel error {(t.max_rel_error or 0):.3g}, "
            f"{t.mismatches} of {t.numel} elements outside atol/rtol{norm}; worst at index {_fmt_index(t.worst_index)}: "
            f"expected {t.expected:.6g}, got {t.actual:.6g}."
        )
    elif t.worst_index is not None and t.expected is not None:
        lines.append(f"first at index {_fmt_index(t.worst_index)}: expected {t.expected:.6g}, got {t.actual}.")
    if t.truth is not None and v.category != Category.INPUT_DEPENDENT:
        lines.append(
            f"Against the float64 reference: your max error {t.truth.error_max:.3g} and relative error norm {t.truth.error_norm:.3g}, "
            f"the reference's own {t.truth.reference_error_max:.3g} and {t.truth.reference_error_norm:.3g} "
            f"(within {t.truth.factor:g}x of those would pass)."
        )
    return lines + advice + _vacuous(rep)


def _far_above_rounding(t) -> bool:
    """An error against the float64 reference that float32 rounding cannot explain: a hundred times the
    float32 reference's own, and above 1e-4 relative."""
    return t.truth.error_norm > max(100 * t.truth.reference_error_norm, 1e-4)


def _cheating(v: Verdict) -> list[str]:
    cat = v.category
    if (
        cat == Category.DISALLOWED_ATEN
        and v.legality
        and v.legality.forbidden_backward_ops
        and not v.legality.forbidden_ops
    ):
        ops = v.legality.forbidden_backward_ops
        listed = ", ".join(f"aten::{k} x{n}" for k, n in sorted(ops.items(), key=lambda kv: -kv[1])[:10])
        return [
            f"Not allowed: {v.message} ({listed}).",
            "The backward is judged like the forward: compute the gradients in your own kernels inside the autograd.Function's "
            "backward; torch may only allocate, view and copy there. Ops torch differentiates for you (an expand's sum, a "
            "matmul's) count too: keep them inside your Function.",
        ]
    if cat == Category.DISALLOWED_ATEN:
        ops = v.legality.forbidden_ops if v.legality else {}
        listed = ", ".join(f"aten::{k} x{n}" for k, n in sorted(ops.items(), key=lambda kv: -kv[1])[:10])
        return [
            f"Not allowed: {v.message}" + (f" ({listed})" if listed else "") + ".",
            "Write native kernels (CUDA C++ via load_inline, or Triton) for this work; in forward only allocation, "
            "view and copy ops (empty, zeros, view, reshape, permute, contiguous, ...) may call torch.",
        ]
    advice = {
        Category.FALLBACK: "Remove the try/except fallback: when the kernel fails, the error must surface.",
        Category.SIDE_STREAM: "Launch on the current stream (torch.cuda.current_stream() / at::cuda::getCurrentCUDAStream()).",
        Category.THREADS: "Do all work in forward's own thread, on the current stream.",
        Category.OUTPUT_CACHING: "Compute the output from the inputs on every call; do not reuse earlier results.",
        Category.INPUT_MUTATION: "Do not write to the inputs; allocate outputs (and scratch) separately.",
        Category.TAMPERING: "Do not touch torch internals, the judge or the interpreter; write the kernel.",
        Category.TIMING_MANIPULATION: "All work must happen inside forward on the current stream, and finish there.",
        Category.EXCESSIVE_SPEEDUP: "The measured time is below what moving the data allows; the kernel is not doing the work it claims.",
        Category.DISALLOWED_LIBRARY: "Write the kernel instead of calling cuBLAS/cuDNN.",
    }.get(cat, "")
    lines = [f"Rejected ({cat.value}): {v.message}."]
    if v.legality:
        lines += [f"  line {f.line}: {f.message}" for f in v.legality.static_findings if f.severity == "error"][:5]
    if advice:
        lines.append(advice)
    return lines


def input_set_lines(sets: list[InputSetReport], geo_eager: float | None = None) -> list[str]:
    """One line per set for the feedback and the table: shapes, trials, speedup; then the geometric mean."""
    if not sets:
        return []
    out = [
        f"Input sets (get_input_sets(): each judged on its own trials{', timed on its own' if any(s.timings for s in sets) else ''}):"
    ]
    for s in sets:
        state = "not reached" if s.ok is None else f"right on {s.trials} trials" if s.ok else "WRONG"
        t = s.timings
        if t is not None and t.candidate is not None:
            speed = (
                f"; {t.candidate.median_ms:.4g} ms, eager {t.eager.median_ms:.4g} ms"
                if t.eager
                else f"; {t.candidate.median_ms:.4g} ms"
            )
            speed += f": {s.speedup_eager:.2f}x" if s.speedup_eager is not None else ""
        else:
            speed = ""
        out.append(f"  set {s.index}: {s.shapes}: {state}{speed}")
    if geo_eager is not None:
        out.append(f"  geometric mean speedup vs eager: {geo_eager:.2f}x (what ranks candidates)")
    return out
