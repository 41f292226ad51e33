"""[reference worker] ``check``: a candidate's output against the reference, on the device, and its inputs against the worker's copy."""

from __future__ import annotations

from typing import Any

from kernelfix.tools.correctness.chunked import relative_error, same_bytes
from kernelfix.tools.task_size import tensor_bytes as nbytes
from kernelfix.tools.transport import TensorSpec, flatten, unflatten
from kernelfix.tools.transport.protocol import CandidateOutput, Check, Checked, TrialPlan
from kernelfix.tools.transport.tree import read, torch_dtype
from kernelfix.tools.workers.child import short
from kernelfix.tools.workers.reference.trial_data import TrialData, oom


class Checks:
    """The part of :class:`ReferenceServer` that judges a candidate's output (and gradients) against the reference."""

    def check(self, req: Check, fds: list[int]) -> None:
        from kernelfix.tools.correctness.compare import compare
        from kernelfix.tools.verdict import Category, TrialReport

        plan = self.plans[req.trial]
        self.seconds = {}
        data = self._get(plan)
        got = req.output
        self.w.phase("compare", trial=plan.index)
        out = self.outs.get(got.out) if got.out is not None else None
        report: TrialReport | None = None
        cand: Any = None
        if got.unsupported:
            report = TrialReport(
                trial=plan.index,
                seed=plan.seed,
                ok=False,
                category=Category.OUTPUT_STRUCTURE,
                problem=f"output is not a tensor or a tuple of tensors ({got.unsupported})",
            )
        else:
            try:
                if got.copied and out is not None and len(out.specs) == len(got.specs):
                    tensors = [
                        read(out.arena, s) for s in out.specs
                    ]  # where the judge put them: never an offset the candidate names
                else:
                    tensors = [_meta(s) for s in got.specs]
                cand = unflatten(got.skeleton, tensors)
                cand_grads = None
                if data.grads is not None:  # [output, gradients], as the candidate's worker sends it
                    if not (isinstance(cand, list) and len(cand) == 2):
                        raise ValueError("the worker's reply is not [output, gradients]")
                    cand, cand_grads = cand
                with self._timed("compare"):
                    report = compare(
                        data.out,
                        cand,
                        atol=self.spec.atol,
                        rtol=self.spec.rtol,
                        trial=plan.index,
                        seed=plan.seed,
                        rel_error_tol=self.spec.rel_error_tol,
                        noise=data.noise or 0.0,
                    )
                if not report.ok and report.category == Category.NUMERICAL and self.spec.truth_factor:
                    report = self._by_truth(plan, data, cand, report)
                if report.ok and data.grads is not None:
                    report = self._check_grads(plan, data, got, cand_grads, report)
            except Exception as e:  # a malformed skeleton, or values that never arrived
                if oom(e):  # the judge's own comparison met a full GPU: the machine's fault, never the candidate's
                    raise
                report = TrialReport(
                    trial=plan.index,
                    seed=plan.seed,
                    ok=False,
                    category=Category.OUTPUT_STRUCTURE,
                    problem=f"output could not be read ({short(e)})",
                )
        if data.out64 is not None and cand is not None:
            with self._timed("vs_float64"):
                report = report.model_copy(
                    update={
                        "error_vs_float64": relative_error(data.out64, cand),
                        "reference_error_vs_float64": data.noise,
                    }
                )
        if data.out64_transient:
            data.out64, data.noise, data.out64_transient = None, None, False
        mutated: list[int] = []
        slot = self.slots.get(req.slot) if req.slot is not None else None
        if slot is not None and slot.trial == plan.index:
            _, mine = flatten(data.inputs)  # the inputs lead the arena; a cotangent after them is not an input
            with self._timed("mutation"):
                mutated = [
                    i for i, (a, s) in enumerate(zip(mine, slot.specs)) if not same_bytes(a, read(slot.arena, s))
                ]
        seconds = {k: round(v, 4) for k, v in self.seconds.items()}
        self.w.say(Checked(report=report, mutated=mutated, seconds=seconds), req.id)

    def _check_grads(self, plan: TrialPlan, data: TrialData, got: CandidateOutput, cand_grads: Any, report: Any) -> Any:
        """Each gradient by the output's rules (dtype tolerance, error norm, the float64 rule); the first wrong one named."""
        from kernelfix.tools.correctness.compare import compare
        from kernelfix.tools.correctness.truth import truth_check
        from kernelfix.tools.verdict import Category, TrialReport

        if got.no_gradient:
            return TrialReport(
                trial=plan.index, seed=plan.seed, ok=False, category=Category.NO_GRADIENT, problem=got.no_gradient
            )
        if not isinstance(cand_grads, list) or len(cand_grads) != len(data.grads or []):
            return TrialReport(
                trial=plan.index,
                seed=plan.seed,
                ok=False,
                category=Category.NO_GRADIENT,
                problem="the gradients did not arrive",
            )
        for i, (key, ref_g, g) in enumerate(zip(data.grad_keys, data.grads or [], cand_grads)):
            noise = data.grad_noise[i] if data.grad_noise else 0.0
            rep = compare(
                ref_g,
                g,
                atol=self.spec.atol,
                rtol=self.spec.rtol,
                trial=plan.index,
                seed=plan.seed,
                rel_error_tol=self.spec.rel_error_tol,
                noise=noise,
                path=key.name,
            )
            if (
                not rep.ok
                and rep.category == Category.NUMERICAL
                and self.spec.truth_factor
                and data.grads64 is not None
            ):
                check = truth_check(
                    ref_g,
                    data.grads64[i],
                    g,
                    factor=float(self.spec.truth_factor),
                    rel_error_tol=self.spec.rel_error_tol,
                    path=key.name,
                )
                if check.passed:
                    continue
                rep = rep.model_copy(
                    update={"truth": check, "problem": f"{rep.problem}; against the float64 reference: {check.why}"}
                )
            if not rep.ok:
                return rep
        return report

    def _by_truth(self, plan: TrialPlan, data: TrialData, cand: Any, report: Any) -> Any:
        """A trial outside atol/rtol, judged against the float64 reference: passed when the candidate
        is no further from it than ``truth_factor`` times the float32 reference (a kernel exact where
        the reference rounds, as cuDNN's TF32 convolutions do). The float64 output is computed here
        if this trial has none yet; kept with the trial only while the cache can hold it."""
        from kernelfix.tools.correctness.truth import truth_check

        kept = data.out64 is not None
        if not kept and self.model64 is not None:
            self._float64(plan, data)
        if data.out64 is None:
            return report
        check = truth_check(
            data.out, data.out64, cand, factor=float(self.spec.truth_factor or 0), rel_error_tol=self.spec.rel_error_tol
        )
        if check.passed:
            report = report.model_copy(
                update={"ok": True, "category": None, "problem": None, "passed_by": "float64", "truth": check}
            )
        else:
            report = report.model_copy(
                update={"truth": check, "problem": f"{report.problem}; against the float64 reference: {check.why}"}
            )
        if not kept and plan.index in self.cache:
            extra = nbytes(data.out64)
            if self.cache_used + extra <= self.spec.cache_bytes:
                self.cache_used += extra
            else:  # the check has its answer; the cache keeps to its budget
                data.out64_transient = True
        return report


def _meta(s: TensorSpec):
    import torch

    return torch.empty(s.shape, dtype=torch_dtype(s.dtype), device="meta")
