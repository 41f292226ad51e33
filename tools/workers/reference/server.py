"""The reference server: the only process that runs Model, and where outputs are compared.

``python -m kernelfix.tools.workers.reference.server SPEC.json``, in the sandbox,
for as long as its judge lives. It imports the task from the judge's private
copy, builds Model (and a float64 copy for float32 tasks), then answers:

- ``prepare``: a trial's inputs (drawn from ``get_inputs()`` under the trial's
  seed, on the device, or varied from another trial's) and reference output, kept
  in its cache while they fit ``cache_bytes``, else computed again when asked;
  the inputs are copied into an input arena (or into an existing one, ``into``,
  for the same-tensors-new-contents checks) and an output arena is made for the
  candidate's answer; the arenas' fds go back over the request socket;
- ``check``: the candidate's output (from the output arena) against the
  reference, on the device, in chunks; and whether the candidate wrote to its
  inputs (the input arena against the worker's own copy, byte for byte);
- ``baseline``: eager and torch.compile timing on the first trial's inputs;
- ``determinism``: the same seed twice, for ``kernelfix baseline``;
- ``release``: arenas no longer needed.

No tensor touches the disk. Nothing of a candidate's runs here: the candidate's
worker only ever sees the arenas.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Any

from kernelfix.sandbox.process import rss_bytes
from kernelfix.tools import input_sets, task_size
from kernelfix.tools.correctness import input_variants
from kernelfix.tools.correctness.compare import leaves, relative_error, same_bytes, vacuous_tolerance
from kernelfix.tools.transport import Arena, TensorSpec, flatten, layout, unflatten
from kernelfix.tools.transport.tree import contiguous_spec, read, spec_of, torch_dtype, write
from kernelfix.tools.timing.clock import Cuda, perf_counter
from kernelfix.tools.workers.child import TaskProblem, TooLarge, Worker, build_model, load_task, nbytes, seed_all, short, sync, to_device
from kernelfix.tools.transport.protocol import CandidateOutput, Checked, Prepared, ReferenceReady, ReferenceSpec, TrialPlan


@dataclass
class _Data:
    """One trial's tensors, as this worker computed them."""

    inputs: list | None = None
    out: Any = None
    out64: Any = None
    noise: float | None = None
    ref_ms: float = 0.0
    vacuous: str | None = None
    float64_note: str | None = None
    skipped: str | None = None
    out64_transient: bool = False  # computed for one check, beyond the cache's budget: dropped after it
    peak: int | None = None  # the allocator's peak just after the trial's forward (and backward): CUDA only
    # --backward: the cotangent sent with the inputs, the gradients the reference got (and in float64)
    cot: list | None = None
    grads: list | None = None
    grad_keys: list = field(default_factory=list)
    grads64: list | None = None
    grad_noise: list | None = None

    @property
    def size(self) -> int:
        return nbytes(self.inputs) + nbytes(self.out) + nbytes(self.out64) + nbytes(self.cot) + nbytes(self.grads) + nbytes(self.grads64)

    @property
    def payload(self) -> Any:
        """What the input arena carries: the inputs, and under --backward the cotangent beside them."""
        return self.inputs if self.cot is None else [self.inputs, self.cot]

    @property
    def expected(self) -> Any:
        """What the output arena receives: the output, and under --backward the gradients beside it."""
        return self.out if self.grads is None else [self.out, self.grads]


@dataclass
class _Slot:
    arena: Arena
    specs: list[TensorSpec]
    trial: int  # whose inputs it holds now


@dataclass
class _Out:
    arena: Arena
    specs: list[TensorSpec] = field(default_factory=list)


class ReferenceServer:
    def __init__(self, w: Worker, spec: ReferenceSpec):
        self.w, self.spec = w, spec
        self.device = spec.device
        self.cuda = spec.device.startswith("cuda")
        self.cache: dict[int, _Data] = {}
        self.cache_used = 0
        self.recent: tuple[int, _Data] | None = None  # the last trial computed and not cached: its check comes next
        self.plans: dict[int, TrialPlan] = {}
        self.slots: dict[int, _Slot] = {}
        self.outs: dict[int, _Out] = {}
        self._ids = spec.id_base
        self.on_device = spec.inputs_on_device and self.cuda
        self.draw_note: str | None = None

    def _id(self) -> int:
        self._ids += 1
        return self._ids

    # ------------------------------------------------------------------ start

    def start(self) -> None:
        import torch

        from kernelfix.tools.transport.arena import cuda_arenas_work

        if self.cuda:
            Cuda.bind()
        self.task = load_task(self.w, self.spec.task_path)
        self.size = task_size.on_meta(self.task)
        if self.size is not None:
            # Before allocating: the parent names it if memory runs out, and sizes its shared holds of the GPU by it.
            total = torch.cuda.get_device_properties(0).total_memory if self.cuda else None
            self.w.chan.send("sized", **self.size.model_dump(), gpu_total_bytes=total)
            self._refuse_if_too_large(self.size)
        self.w.phase("build_reference")
        try:
            self.model = build_model(self.task.Model, self.task, self.spec.init_seed, self.device)
        except Exception as e:
            raise TaskProblem(f"{short(e)} while building Model(*get_init_inputs())") from e
        self.model64, self.float64_note = None, "switched off in config"
        if self.spec.float64:
            try:  # copied before any forward: a stateful Model (running stats) starts where the float32 one does
                self.model64, self.float64_note = copy.deepcopy(self.model).double(), None
            except Exception as e:
                self.float64_note = f"the model cannot be copied ({short(e)})"
        kind, note = "host", None
        if self.cuda and self.spec.arena == "auto":
            note = cuda_arenas_work(torch.cuda.current_device())
            kind = "cuda" if note is None else "host"
        self.arena_kind = kind
        props = torch.cuda.get_device_properties(0) if self.cuda else None
        ready = ReferenceReady(
            float64_note=self.float64_note, arena_kind=kind, arena_note=note, torch=torch.__version__,
            gpu=props.name if props else None, capability=f"{props.major}.{props.minor}" if props else None,
            draw_note="drawn on the device" if self.on_device else None,
            task_flops=task_size.flops_on_meta(self.task), dtypes=self._dtypes(), gpu_props=_gpu_props(props) if props else {},
            input_sets=self._describe_sets(),
        )
        self.w.chan.send("ready", **ready.model_dump())

    def _describe_sets(self) -> list[str] | None:
        try:
            return input_sets.describe_all(self.task, self.spec.init_seed)
        except Exception as e:
            raise TaskProblem(f"{short(e)} while calling {input_sets.FUNCTION}()") from e

    def _dtypes(self) -> list[str]:
        import torch

        found = {str(p.dtype).removeprefix("torch.") for p in self.model.parameters() if p.is_floating_point()} if hasattr(self.model, "parameters") else set()
        def inputs_on_meta() -> list:
            seed_all(0)
            with torch.device("meta"):
                return leaves(self.task.get_inputs())

        try:
            found |= {str(t.dtype).removeprefix("torch.") for _, t in task_size.without_dynamo(inputs_on_meta) if isinstance(t, torch.Tensor) and t.is_floating_point()}
        except Exception:
            pass
        return sorted(found)

    def _refuse_if_too_large(self, size: task_size.TaskSize) -> None:
        """One trial's inputs and outputs live together wherever the reference runs: a task whose trial
        alone exceeds that memory cannot get a verdict here, and allocating up to the limit proves nothing more."""
        import torch

        text = task_size.size_text
        if self.cuda:
            total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
            if size.trial_bytes > total:
                raise TooLarge(
                    f"the task does not fit this GPU: one trial ({size.describe()}) needs {text(size.trial_bytes)} "
                    f"and the GPU has {text(total)}"
                )
        if self.cuda and self.on_device:
            return  # nothing of a trial need be on the host
        limit = self.spec.memory_limit_bytes
        host = size.input_bytes if self.cuda else size.trial_bytes  # drawn on the CPU for a GPU: its inputs pass through
        if limit and host > limit:
            raise TooLarge(
                f"the task does not fit the host memory the judge allows: one trial ({size.describe()}) needs "
                f"{text(host)} of host memory and the limit is {text(limit)}"
            )

    # ------------------------------------------------------------------ trial data

    def _draw(self, seed: int, input_set: int | None = None) -> list:
        import torch

        def get() -> list:  # get_inputs(), or one set of get_input_sets() (tools/input_sets.py)
            try:
                return input_sets.pick(self.task, input_set)
            except input_sets.InputSetsProblem as e:
                raise TaskProblem(str(e)) from e

        seed_all(seed)
        if self.on_device:
            try:
                # The same distributions get_inputs() asks for, drawn where they are used: a 6 GiB
                # input takes milliseconds here and ~10 s on the CPU.
                with torch.device(self.device):
                    inputs = get()
            except TaskProblem:
                raise
            except Exception as e:
                self.on_device = False
                self.draw_note = f"get_inputs() fails on the device ({short(e)}): drawn on the CPU"
                seed_all(seed)
                inputs = get()
        else:
            inputs = get()
        if not isinstance(inputs, (list, tuple)):
            raise TaskProblem(f"get_inputs() returned {type(inputs).__name__}, not a list")
        return to_device(list(inputs), self.device)

    def _inputs_of(self, index: int) -> list:
        if index in self.cache:
            return self.cache[index].inputs or []
        return self._draw(self.plans[index].seed, self.plans[index].input_set)

    def _get(self, plan: TrialPlan) -> _Data:
        if plan.index in self.cache:
            return self.cache[plan.index]
        if self.recent is not None and self.recent[0] == plan.index:
            return self.recent[1]
        if self.recent is not None:  # one uncached trial at a time: its memory goes back before the next
            self.recent = None
            _free(self.cuda)
        data = self._compute(plan)
        if data.skipped is None and self.cache_used + data.size <= self.spec.cache_bytes:
            self.cache[plan.index] = data
            self.cache_used += data.size
        elif data.skipped is None:
            self.recent = (plan.index, data)
        return data

    def _compute(self, plan: TrialPlan) -> _Data:
        import torch

        self.w.phase("reference_trial", trial=plan.index)
        try:
            if plan.variant:
                inputs, changed = input_variants.apply(self._inputs_of(plan.variant_of or 0), plan.variant, plan.seed)
                if not changed:
                    return _Data(skipped="no floating-point tensor inputs to vary")
            else:
                inputs = self._draw(plan.seed, plan.input_set)
            t0 = perf_counter()
            if self.spec.backward:
                out, cot, keys, grads = self._forward_backward(self.model, inputs, plan.seed, trial=plan.index)
            else:
                with torch.no_grad():
                    out = self.model(*inputs)
            sync(self.device)
            ref_ms = (perf_counter() - t0) * 1e3  # under --backward forward+backward: the candidate's deadline covers both
            peak = int(torch.cuda.max_memory_allocated()) if self.cuda else None  # before the float64 check's own
        except TaskProblem:
            raise
        except Exception as e:
            if _oom(e):
                raise
            raise TaskProblem(f"{short(e)} while running Model.forward on trial {plan.index}") from e
        if plan.variant and not _finite(out):
            return _Data(skipped=f"the reference is not finite on {input_variants.describe(plan.variant, plan.variant_of or 0)}")
        data = _Data(inputs=inputs, out=out, ref_ms=ref_ms, peak=peak)
        if self.spec.backward:
            data.cot, data.grad_keys, data.grads = cot, keys, grads
        if plan.float64 and self.model64 is not None:
            self._float64(plan, data)
        if plan.purpose == "correctness":
            data.vacuous = vacuous_tolerance(out, atol=self.spec.atol, rtol=self.spec.rtol)
        return data

    def _forward_backward(self, model: Any, inputs: list, seed: int, cot: list | None = None, trial: int | None = None) -> tuple[Any, list, list, list]:
        """Forward with grad, backward with the trial's cotangent: (output, cotangent, gradient keys, gradients)."""
        import torch

        from kernelfix.tools.correctness import gradients
        from kernelfix.tools.transport.protocol import GradKey

        args, leaf_list = gradients.grad_leaves(inputs)
        gradients.clear_grads(model)
        with torch.enable_grad():
            out = model(*args)
            cot = gradients.cotangents(out, seed) if cot is None else cot
            sync(self.device)  # a CUDA fault from here on is the backward's: the message says which pass
            try:
                why = gradients.backward(out, cot)
                sync(self.device)
            except Exception as e:
                if _oom(e):
                    raise
                where = f" on trial {trial}" if trial is not None else ""  # None: the float64 check's, which notes it
                raise TaskProblem(f"{short(e)} in torch's own backward of Model{where} (the reference's autograd, no candidate's code)") from e
        if why is not None:
            raise TaskProblem(f"{gradients.NO_BACKWARD} ({why}): run it without --backward")
        keys, grads = gradients.reference_grads(model, leaf_list)
        if not keys:
            raise TaskProblem(f"{gradients.NO_BACKWARD} (no floating input or parameter gets a gradient): run it without --backward")
        gradients.clear_grads(model)
        out = _detached(out)
        return out, cot, [GradKey.model_validate(k) for k in keys], [g.detach() for g in grads]

    def _float64(self, plan: TrialPlan, data: _Data) -> None:
        import torch

        self.w.phase("reference_float64", trial=plan.index)
        why = _no_float64_truth(self.model, data.inputs, data.out)
        if why is None:
            # A check it cannot afford is skipped with a note, not run into the memory limit (which would
            # end the worker and refuse a task that fits without it).
            need = sum(_bytes_as_float64(x) for x in (data.inputs, data.out, data.grads, data.cot) if x is not None)
            if self.cuda:
                free, where = torch.cuda.mem_get_info()[0], "of the GPU"
            else:
                free, where = (self.spec.memory_limit_bytes or 1 << 62) - rss_bytes([os.getpid()]), "of the host memory the judge allows"
            if need > 0.8 * free:
                why = f"skipped on trial {plan.index}: its float64 tensors need {task_size.size_text(need)}, {task_size.size_text(max(free, 0))} {where} is free"
        if why is None:
            try:
                if data.grads is not None:
                    out64, grads64 = self._backward_float64(data)
                else:
                    out64, grads64 = _forward_float64(self.model64, data.inputs, self.device), None
                why = _float64_mismatch(data.out, out64)
                if why is None:
                    data.out64, data.noise = out64, relative_error(out64, data.out) or 0.0
                    if grads64 is not None and len(grads64) == len(data.grads or []):
                        data.grads64 = grads64
                        data.grad_noise = [relative_error(g64, g) or 0.0 for g64, g in zip(grads64, data.grads or [])]
                if self.cuda:
                    torch.cuda.empty_cache()  # its float64 inputs were temporaries: the arenas to come need the memory
            except Exception as e:  # an op without a float64 kernel, a forward that mixes dtypes, no memory
                why = f"the reference fails in float64 ({short(e)})"
                if self.cuda:
                    torch.cuda.empty_cache()
        if why is not None:
            data.float64_note = why
            if not why.startswith("skipped"):
                self.model64, self.float64_note = None, why  # a task with no float64 truth stays so

    def _backward_float64(self, data: _Data) -> tuple[Any, list | None]:
        """The float64 model's output and gradients on the same inputs and cotangent (upcast)."""
        import torch

        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)  # tensors the forward creates itself follow
        try:
            ins, cot = _up(data.inputs, self.device), _up(data.cot, self.device)
            out64, _, keys, grads64 = self._forward_backward(self.model64, ins, 0, cot)
            sync(self.device)
        finally:
            torch.set_default_dtype(previous)
        if [k.name for k in keys] != [k.name for k in data.grad_keys]:
            return out64, None
        return out64, grads64

    # ------------------------------------------------------------------ requests

    def prepare(self, req: dict[str, Any], fds: list[int]) -> None:
        plan = TrialPlan.model_validate(req["trial"])
        self.plans[plan.index] = plan
        cached = plan.index in self.cache
        data = self._get(plan)
        reply = Prepared(index=plan.index, skipped=data.skipped, cached=cached, float64_note=data.float64_note or self.float64_note)
        if data.skipped is not None:
            self.w.chan.send("prepared", id=req.get("id"), **reply.model_dump())
            return
        self.w.phase("handoff", trial=plan.index)
        skel, tensors = flatten(data.payload)
        specs = [spec_of(t) for t in tensors]
        created: list[Arena] = []
        into = req.get("into")
        if into is not None:
            slot = self.slots[into]
            if [(s.dtype, s.shape, s.stride) for s in slot.specs] != [(s.dtype, s.shape, s.stride) for s in specs]:
                reply.skipped = "its inputs are laid out unlike the tensors they would replace"
                self.w.chan.send("prepared", id=req.get("id"), **reply.model_dump())
                return
            for s, t in zip(slot.specs, tensors):
                write(slot.arena, s, t)
            slot.trial, sid, specs = plan.index, into, slot.specs
        else:
            arena = self._arena(layout(specs))
            for s, t in zip(specs, tensors):
                write(arena, s, t)
            sid = self._id()
            self.slots[sid] = _Slot(arena, specs, plan.index)
            reply.in_arena = arena.spec
            created.append(arena)
        exp_skel, exp = flatten(data.expected)
        exp_specs = [contiguous_spec(t) for t in exp]
        out = self._arena(layout(exp_specs))
        oid = self._id()
        self.outs[oid] = _Out(out, exp_specs)
        created.append(out)
        sync(self.device)  # the arena's bytes are complete before the candidate may read them
        reply.slot, reply.inputs, reply.input_specs = sid, skel, specs
        reply.out, reply.out_arena, reply.expected, reply.expected_specs = oid, out.spec, exp_skel, exp_specs
        reply.ref_ms, reply.noise, reply.has_float64, reply.vacuous = data.ref_ms, data.noise, data.out64 is not None, data.vacuous
        reply.input_bytes, reply.output_bytes = nbytes(data.inputs), nbytes(data.out)
        reply.grads = list(data.grad_keys)
        assert self.w.requests is not None
        self.w.requests.send({"type": "fds", "id": req.get("id")}, [a.fd for a in created if a.fd is not None])
        for a in created:
            a.forget_fd()
        self.w.chan.send("prepared", id=req.get("id"), **reply.model_dump())

    def survey(self, req: dict[str, Any], fds: list[int]) -> None:
        """Every planned trial's reference, computed once and kept for the candidates to come, summarized:
        what the judge knows of the task before any candidate's trial runs. A trial the cache cannot
        hold ends the survey: the rest would be computed again for each candidate anyway."""
        out = []
        for raw in req["trials"]:
            plan = TrialPlan.model_validate(raw)
            self.plans[plan.index] = plan
            data = self._get(plan)
            if plan.index not in self.cache and data.skipped is None:
                out.append(self._summary(plan, data))
                break
            out.append(self._summary(plan, data))
        self.w.chan.send("surveyed", id=req.get("id"), trials=out, cache_used=self.cache_used)

    def _summary(self, plan: TrialPlan, data: _Data) -> dict[str, Any]:
        return Prepared(
            index=plan.index, skipped=data.skipped, ref_ms=data.ref_ms, noise=data.noise, has_float64=data.out64 is not None,
            float64_note=data.float64_note or self.float64_note, vacuous=data.vacuous, cached=plan.index in self.cache,
            input_bytes=nbytes(data.inputs), output_bytes=nbytes(data.out),
        ).model_dump()

    def check(self, req: dict[str, Any], fds: list[int]) -> None:
        from kernelfix.tools.correctness.compare import compare
        from kernelfix.tools.verdict import Category, TrialReport

        plan = self.plans[int(req["trial"])]
        data = self._get(plan)
        got = CandidateOutput.model_validate(req["output"])
        self.w.phase("compare", trial=plan.index)
        out = self.outs.get(got.out) if got.out is not None else None
        report: TrialReport | None = None
        cand: Any = None
        if got.unsupported:
            report = TrialReport(trial=plan.index, seed=plan.seed, ok=False, category=Category.OUTPUT_STRUCTURE, problem=f"output is not a tensor or a tuple of tensors ({got.unsupported})")
        else:
            try:
                if got.copied and out is not None and len(out.specs) == len(got.specs):
                    tensors = [read(out.arena, s) for s in out.specs]  # where the judge put them: never an offset the candidate names
                else:
                    tensors = [_meta(s) for s in got.specs]
                cand = unflatten(got.skeleton, tensors)
                cand_grads = None
                if data.grads is not None:  # [output, gradients], as the candidate's worker sends it
                    if not (isinstance(cand, list) and len(cand) == 2):
                        raise ValueError("the worker's reply is not [output, gradients]")
                    cand, cand_grads = cand
                report = compare(
                    data.out, cand, atol=self.spec.atol, rtol=self.spec.rtol, trial=plan.index, seed=plan.seed,
                    rel_error_tol=self.spec.rel_error_tol, noise=data.noise or 0.0,
                )
                if not report.ok and report.category == Category.NUMERICAL and self.spec.truth_factor:
                    report = self._by_truth(plan, data, cand, report)
                if report.ok and data.grads is not None:
                    report = self._check_grads(plan, data, got, cand_grads, report)
            except Exception as e:  # a malformed skeleton, or values that never arrived
                if _oom(e):  # the judge's own comparison met a full GPU: the machine's fault, never the candidate's
                    raise
                report = TrialReport(trial=plan.index, seed=plan.seed, ok=False, category=Category.OUTPUT_STRUCTURE, problem=f"output could not be read ({short(e)})")
        if data.out64 is not None and cand is not None:
            report = report.model_copy(update={"error_vs_float64": relative_error(data.out64, cand), "reference_error_vs_float64": data.noise})
        if data.out64_transient:
            data.out64, data.noise, data.out64_transient = None, None, False
        mutated: list[int] = []
        slot = self.slots.get(req.get("slot")) if req.get("slot") is not None else None
        if slot is not None and slot.trial == plan.index:
            _, mine = flatten(data.inputs)  # the inputs lead the arena; a cotangent after them is not an input
            mutated = [i for i, (a, s) in enumerate(zip(mine, slot.specs)) if not same_bytes(a, read(slot.arena, s))]
        self.w.chan.send("checked", id=req.get("id"), **Checked(report=report, mutated=mutated).model_dump())

    def _check_grads(self, plan: TrialPlan, data: _Data, got: CandidateOutput, cand_grads: Any, report: Any) -> Any:
        """Each gradient by the output's rules (dtype tolerance, error norm, the float64 rule); the first wrong one named."""
        from kernelfix.tools.correctness.compare import compare, truth_check
        from kernelfix.tools.verdict import Category, TrialReport

        if got.no_gradient:
            return TrialReport(trial=plan.index, seed=plan.seed, ok=False, category=Category.NO_GRADIENT, problem=got.no_gradient)
        if not isinstance(cand_grads, list) or len(cand_grads) != len(data.grads or []):
            return TrialReport(trial=plan.index, seed=plan.seed, ok=False, category=Category.NO_GRADIENT, problem="the gradients did not arrive")
        for i, (key, ref_g, g) in enumerate(zip(data.grad_keys, data.grads or [], cand_grads)):
            noise = data.grad_noise[i] if data.grad_noise else 0.0
            rep = compare(ref_g, g, atol=self.spec.atol, rtol=self.spec.rtol, trial=plan.index, seed=plan.seed,
                          rel_error_tol=self.spec.rel_error_tol, noise=noise, path=key.name)
            if not rep.ok and rep.category == Category.NUMERICAL and self.spec.truth_factor and data.grads64 is not None:
                check = truth_check(
                    ref_g, data.grads64[i], g, factor=float(self.spec.truth_factor), rel_error_tol=self.spec.rel_error_tol, path=key.name,
                )
                if check.passed:
                    continue
                rep = rep.model_copy(update={"truth": check, "problem": f"{rep.problem}; against the float64 reference: {check.why}"})
            if not rep.ok:
                return rep
        return report

    def _by_truth(self, plan: TrialPlan, data: _Data, cand: Any, report: Any) -> Any:
        """A trial outside atol/rtol, judged against the float64 reference: passed when the candidate
        is no further from it than ``truth_factor`` times the float32 reference (a kernel exact where
        the reference rounds, as cuDNN's TF32 convolutions do). The float64 output is computed here
        if this trial has none yet; kept with the trial only while the cache can hold it."""
        from kernelfix.tools.correctness.compare import truth_check

        kept = data.out64 is not None
        if not kept and self.model64 is not None:
            self._float64(plan, data)
        if data.out64 is None:
            return report
        check = truth_check(data.out, data.out64, cand, factor=float(self.spec.truth_factor or 0), rel_error_tol=self.spec.rel_error_tol)
        if check.passed:
            report = report.model_copy(update={"ok": True, "category": None, "problem": None, "passed_by": "float64", "truth": check})
        else:
            report = report.model_copy(update={"truth": check, "problem": f"{report.problem}; against the float64 reference: {check.why}"})
        if not kept and plan.index in self.cache:
            extra = nbytes(data.out64)
            if self.cache_used + extra <= self.spec.cache_bytes:
                self.cache_used += extra
            else:  # the check has its answer; the cache keeps to its budget
                data.out64_transient = True
        return report

    def _arena(self, size: int) -> Arena:
        """An arena of ``size`` bytes. Its memory comes from the driver, not torch's allocator: blocks the
        allocator holds free (a float64 reference's temporaries: 32 GiB for 45_Average_Pooling_2D) are
        given back first when the driver has too little (on the H100 that OOM came with 13.7 GiB free)."""
        try:
            return Arena.create(size, self.arena_kind, _device_index(self.device))
        except Exception as e:
            if not (self.cuda and _oom(e)):
                raise
            _free(self.cuda)
            return Arena.create(size, self.arena_kind, _device_index(self.device))

    def trim(self, req: dict[str, Any], fds: list[int]) -> None:
        """Another judge's stage wants this GPU's memory: drop the cached trials (each is computed again
        from its seed when asked) and return the allocator's free blocks. Arenas in use stay."""
        freed = self.cache_used + (self.recent[1].size if self.recent is not None else 0)
        self.cache.clear()
        self.cache_used = 0
        self.recent = None
        _free(self.cuda)
        import torch

        reserved = torch.cuda.memory_reserved() if self.cuda else 0  # what is left: live tensors, the model
        self.w.chan.send("trimmed", id=req.get("id"), freed=freed, reserved=reserved, slots=len(self.slots), outs=len(self.outs))

    def release(self, req: dict[str, Any], fds: list[int]) -> None:
        for sid in req.get("slots") or []:
            s = self.slots.pop(sid, None)
            if s is not None:
                s.arena.release()
        for oid in req.get("outs") or []:
            o = self.outs.pop(oid, None)
            if o is not None:
                o.arena.release()
        self.w.chan.send("released", id=req.get("id"))  # arenas are not the allocator's: nothing to empty

    def baseline(self, req: dict[str, Any], fds: list[int]) -> None:
        """Eager and torch.compile on the first trial's inputs. ``warm_only``: compile and run once,
        time nothing (outside the GPU lease); else time both (under it)."""
        import torch

        from kernelfix.tools.timing.clock import bandwidth_gbps, l2_flush_buffer, time_cuda

        plan = TrialPlan.model_validate(req["trial"])
        self.plans[plan.index] = plan
        data = self._get(plan)
        inputs = data.inputs or []
        out_bytes = nbytes(data.out)
        t = req["timing"]
        if t.get("backward") and self.recent is not None and self.recent[1] is data:
            # Timing needs the inputs and the cotangent alone. The output and gradients kept beside the
            # timed passes' own (and autograd's temporaries) met 80 GiB for 38_L1Norm_'s 8 GiB trial; an
            # uncached trial is computed again when next asked.
            self.recent = None
            data = _Data(inputs=data.inputs, cot=data.cot)
            _free(self.cuda)
        torch.set_grad_enabled(False)
        if not hasattr(self, "_compiled"):
            self._compiled, self._compile_note = None, None
            if t.get("time_torch_compile", True):
                self.w.phase("compile_reference")
                try:
                    cref = torch.compile(self.model)
                    if t.get("backward"):  # the training graph, and its backward compiled at its first call
                        self._passes(cref, data)[1]()
                    else:
                        cref(*inputs)
                    sync(self.device)
                    self._compiled = cref
                except Exception as e:  # a task torch.compile can't handle still gets an eager speedup
                    self._compile_note = f"torch.compile failed: {short(e)}"
                    torch._dynamo.reset()
        if req.get("warm_only"):
            if self._compiled is not None and plan.input_set is not None:  # another set's shapes: compiled here, outside the lease
                if t.get("backward"):
                    self._passes(self._compiled, data)[1]()
                else:
                    self._compiled(*inputs)
                sync(self.device)
            self.w.chan.send("baseline_warm", id=req.get("id"))
            return
        flush = l2_flush_buffer(t.get("flush_l2", True))
        runs, warm, budget = t["timing_runs"], t["warmup_ms"], t["timing_budget_s"]

        def progress(n: int) -> None:
            self.w.phase("timing", done=n)

        extra: dict[str, Any] = {}
        if t.get("backward"):  # forward (grad enabled) and forward+backward; the latter is what ranks
            self.w.phase("time_eager")
            fwd, both = self._passes(self.model, data)
            extra["eager_forward"] = time_cuda(fwd, runs, warm, budget, flush, progress)
            eager = time_cuda(both, runs, warm, budget, flush, progress)
            compiled = None
            if self._compiled is not None:
                self.w.phase("time_torch_compile")
                fwd, both = self._passes(self._compiled, data)
                extra["compiled_forward"] = time_cuda(fwd, runs, warm, budget, flush, progress)
                compiled = time_cuda(both, runs, warm, budget, flush, progress)
            _clear_grads(self.model)
        else:
            self.w.phase("time_eager")
            eager = time_cuda(lambda: self.model(*inputs), runs, warm, budget, flush, progress)
            compiled = None
            if self._compiled is not None:
                self.w.phase("time_torch_compile")
                compiled = time_cuda(lambda: self._compiled(*inputs), runs, warm, budget, flush, progress)
        del flush
        self.w.phase("bandwidth")
        bw = bandwidth_gbps()
        self.w.chan.send(
            "baseline", id=req.get("id"), eager=eager, compiled=compiled, compile_note=self._compile_note,
            bytes_moved=nbytes(inputs) + out_bytes, bandwidth_gbps=bw, gpu=torch.cuda.get_device_name(0),
            peak_bytes=int(torch.cuda.max_memory_allocated()), **extra,
        )

    def _passes(self, model: Any, data: _Data) -> tuple[Any, Any]:
        """--backward timing's callables (gradients.timed_passes); torch.compile's module shares Model's parameters."""
        from kernelfix.tools.correctness import gradients

        return gradients.timed_passes(model, data.inputs or [], data.cot or [], params_of=self.model)

    def determinism(self, req: dict[str, Any], fds: list[int]) -> None:
        """The same trial twice from scratch: inputs and outputs must agree (``kernelfix baseline``)."""
        import torch

        plan = TrialPlan.model_validate(req["trial"])
        # Two trials at once, beside nothing else: under --backward a trial is four tensors (inputs,
        # outputs, cotangent, gradients) and three held together filled the H100 for 21_Sigmoid.
        self.recent = None
        _free(self.cuda)
        held = 0
        if self.cuda:  # the peaks `kernelfix baseline` reports: one trial's own, and this process's (baseline's reply)
            torch.cuda.reset_peak_memory_stats()
            held = torch.cuda.memory_allocated()
        first = self._compute(plan)
        first.out64 = first.cot = first.grads = first.grads64 = None  # only inputs and outputs are compared
        if self.spec.backward and self.cuda:
            # The second run's autograd needs the room (39_L2Norm_'s 8 GiB trial met 80 GiB): the first
            # waits in host memory, and each comparison brings it back a chunk at a time.
            first.inputs, first.out = _to_host(first.inputs), _to_host(first.out)
        _free(self.cuda)
        second = self._compute(plan.model_copy(update={"float64": False}))  # its float64 note is first's
        # The second run's tensors lead: the comparisons bring the other's chunks to their device.
        inputs_equal = all(same_bytes(b, a) for (_, a), (_, b) in zip(leaves(first.inputs), leaves(second.inputs)) if isinstance(a, torch.Tensor))
        outputs_equal = all(
            isinstance(b, torch.Tensor) and same_bytes(b, a) for (_, a), (_, b) in zip(leaves(first.out), leaves(second.out)) if isinstance(a, torch.Tensor)
        )
        self.w.chan.send(
            "determinism", id=req.get("id"), inputs_equal=inputs_equal, outputs_equal=outputs_equal,
            rel_error=relative_error(second.out, first.out), vacuous=first.vacuous, ref_ms=first.ref_ms,
            input_bytes=nbytes(first.inputs), output_bytes=nbytes(first.out), float64_note=first.float64_note or self.float64_note,
            trial_peak_bytes=first.peak - held if first.peak is not None else None,
            draw_note=self.draw_note or ("drawn on the device" if self.on_device else "drawn on the CPU"),
        )


def _to_host(obj: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_host(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _to_host(v) for k, v in obj.items()}
    return obj


def _clear_grads(model: Any) -> None:
    from kernelfix.tools.correctness import gradients

    gradients.clear_grads(model)


def _gpu_props(props: Any) -> dict[str, Any]:
    """The numbers of the GPU the prompt's GPU block and the floor use (tools/gpu/specs.py: measured)."""
    import torch

    out: dict[str, Any] = {"name": props.name}
    for key in ("multi_processor_count", "total_memory", "L2_cache_size", "shared_memory_per_block_optin",
                "shared_memory_per_multiprocessor", "regs_per_multiprocessor", "max_threads_per_multi_processor"):
        value = getattr(props, key, None)
        if value is not None:
            out[key] = int(value)
    try:  # memory clock and bus width: the driver's attributes (peak DRAM bandwidth = 2 x clock x width)
        from kernelfix.tools.transport import cuda_vmm

        out.update(cuda_vmm.memory_attributes(torch.cuda.current_device()))
    except Exception:
        pass
    return out


def _free(cuda: bool) -> None:
    import torch

    if cuda:
        torch.cuda.empty_cache()  # a candidate's process needs what this one's allocator no longer holds


def _device_index(device: str) -> int:
    return int(device.split(":")[1]) if ":" in device else 0


def _meta(s: TensorSpec):
    import torch

    return torch.empty(s.shape, dtype=torch_dtype(s.dtype), device="meta")


def _oom(e: BaseException) -> bool:
    return "OutOfMemoryError" in [c.__name__ for c in type(e).__mro__] or "out of memory" in str(e).lower()


def _finite(obj: Any) -> bool:
    import torch

    return all(bool(torch.isfinite(x).all()) for _, x in leaves(obj) if isinstance(x, torch.Tensor) and x.is_floating_point())


def _floating(obj: Any) -> list:
    import torch

    return [x for _, x in leaves(obj) if isinstance(x, torch.Tensor) and x.is_floating_point()]


def _no_float64_truth(model, inputs: list, out: Any) -> str | None:
    """Why a float64 run of the task is no truth to judge by (None when it is one): its floating
    tensors must all be float32 or half precision (float16, bfloat16), which float64 refines. A
    half-precision reference rounds as much as an honest kernel does, so it needs the rule as much."""
    tensors = _floating(inputs) + _floating(out)
    if hasattr(model, "parameters"):
        tensors += [p for p in model.parameters() if p.is_floating_point()] + [b for b in model.buffers() if b.is_floating_point()]
    other = sorted({str(t.dtype).removeprefix("torch.") for t in tensors if t.dtype not in _refined()})
    if not tensors:
        return "no floating-point inputs, weights or outputs"
    if other:
        return f"the task is not float32 or half precision throughout ({', '.join(other)})"
    return None


def _refined() -> tuple:
    """The dtypes a float64 run refines: upcast for it, judged against it."""
    import torch

    return (torch.float32, torch.float16, torch.bfloat16)


def _bytes_as_float64(obj: Any) -> int:
    """What ``obj``'s tensors take once the refined ones are float64 (4x for half precision, 2x for float32)."""
    import torch

    total = 0
    for _, x in leaves(obj):
        if isinstance(x, torch.Tensor):
            total += x.numel() * 8 if x.dtype in _refined() else x.numel() * x.element_size()
    return total


def _up(obj: Any, device: str) -> Any:
    """float32 and half-precision tensors as float64 (on ``device``), anything else as it is."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device=device, dtype=torch.float64) if obj.dtype in _refined() else obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_up(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: _up(v, device) for k, v in obj.items()}
    return obj


def _detached(obj: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach()
    if isinstance(obj, (list, tuple)):
        return type(obj)(_detached(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _detached(v) for k, v in obj.items()}
    return obj


def _forward_float64(model64, inputs: list, device: str) -> Any:
    import torch

    def up(obj: Any) -> Any:
        return _up(obj, device)

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # tensors the forward creates itself follow
    try:
        with torch.no_grad():
            out = model64(*up(inputs))
        sync(device)
    finally:
        torch.set_default_dtype(previous)
    return out


def _float64_mismatch(out: Any, out64: Any) -> str | None:
    import torch

    a, b = leaves(out), leaves(out64)
    if len(a) != len(b):
        return "the float64 reference returns a different structure"
    for (path, x), (_, y) in zip(a, b):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            if not isinstance(y, torch.Tensor) or y.dtype != torch.float64 or y.shape != x.shape:
                return f"the reference's {path} is not float64 when run in float64 (it casts)"
    return None


def main() -> None:
    w = Worker()

    def body(w: Worker) -> None:
        server = ReferenceServer(w, ReferenceSpec.model_validate(w.spec))
        server.start()
        w.serve(
            {"prepare": server.prepare, "survey": server.survey, "check": server.check, "release": server.release, "baseline": server.baseline, "determinism": server.determinism,
             "trim": server.trim}
        )

    w.run(body)


if __name__ == "__main__":
    main()
