"""[judge] The legality stage: the aten ops recorded in every judged forward, against the allowlist.

The candidate's worker records the dispatcher ops of every forward call of the
correctness stage (``legality.recorder``: a dispatch mode, so ops its C++ calls
count too); ops nested in another op (``zeros`` -> ``zero_``) and Triton's own
machinery (the interpreter's copies, the autotuner) are not the candidate's.
Under --backward the judge's backward call is recorded too, its ops kept apart
(the autograd engine's bookkeeping left out: ``recorder.py``) and held to the
same allowlist.
"""

from __future__ import annotations

from kernelfix.tools.evaluation import Evaluation
from kernelfix.tools.legality.allowlist import is_allowed
from kernelfix.tools.stages.stage_context import StageContext
from kernelfix.tools.transport.protocol import Ops
from kernelfix.tools.verdict import Category, LegalityReport


def record(ev: Evaluation, result: Ops, allowed: frozenset[str]) -> None:
    """Keep the ops the correctness run recorded, sorted against the allowlist."""
    report = ev.legality or LegalityReport()
    ev.legality = report
    if result.ops is None:
        return
    report.aten_ops, report.forbidden_ops = _sort(result.ops, allowed)
    if result.backward_ops is not None:
        report.backward_ops, report.forbidden_backward_ops = _sort(result.backward_ops, allowed)
    report.runtime_checked = True
    report.recorder_intact = result.recorder_intact


def _sort(ops: dict[str, int], allowed: frozenset[str]) -> tuple[dict[str, int], dict[str, int]]:
    """Every aten op and its count, and those the allowlist refuses."""
    all_ops: dict[str, int] = {}
    forbidden: dict[str, int] = {}
    for name, count in dict(ops).items():
        if not str(name).startswith("aten::"):
            continue  # the candidate's own custom ops: what they call inside is counted on its own
        key = name.removeprefix("aten::")
        all_ops[key] = all_ops.get(key, 0) + count
        if not is_allowed(name, allowed):
            forbidden[key] = forbidden.get(key, 0) + count
    return all_ops, forbidden


def run(ctx: StageContext, ev: Evaluation) -> Evaluation:
    report = ev.legality or LegalityReport()
    ev.legality = report
    if not ctx.config.runtime_legality:
        report.note = "runtime legality check switched off in config"
        return ev
    if not report.runtime_checked:
        report.note = "no op record (the correctness stage did not run)"
        return ev
    if not report.recorder_intact:
        return ev.fail("legality", Category.TAMPERING, "the op recorder was switched off during forward")
    if report.forbidden_ops:
        ops = report.forbidden_ops
        top = ", ".join(sorted(ops, key=lambda k: -ops[k])[:5])
        return ev.fail("legality", Category.DISALLOWED_ATEN, f"forward ran torch compute ops: {top}")
    if report.forbidden_backward_ops:
        ops = report.forbidden_backward_ops
        top = ", ".join(sorted(ops, key=lambda k: -ops[k])[:5])
        return ev.fail(
            "legality",
            Category.DISALLOWED_ATEN,
            f"backward ran torch compute ops: {top} (the gradients must come from your own kernels, in a torch.autograd.Function's backward)",
        )
    return ev
