"""[reference worker] The reference server: the only process that runs Model, and where outputs are compared.

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
from typing import Any

from kernelfix.tools import input_sets, task_size
from kernelfix.tools.correctness.chunked import leaves
from kernelfix.tools.timing.clock import Cuda
from kernelfix.tools.transport import Arena
from kernelfix.tools.transport.protocol import (
    BaselineRequest,
    Check,
    DeterminismRequest,
    Prepare,
    ReferenceReady,
    ReferenceSpec,
    Release,
    Sized,
    Survey,
    TrialPlan,
    Trim,
)
from kernelfix.tools.workers.child import TaskProblem, TooLarge, Worker, build_model, load_task, seed_all, short
from kernelfix.tools.workers.reference.arenas import Handoff, Out, Slot
from kernelfix.tools.workers.reference.checks import Checks
from kernelfix.tools.workers.reference.float64 import Float64Truth
from kernelfix.tools.workers.reference.runs import Runs
from kernelfix.tools.workers.reference.trial_data import TrialData, Trials


class ReferenceServer(Trials, Float64Truth, Checks, Handoff, Runs):
    """The reference worker's state and its requests; each concern is a part of its own (trial_data, float64,
    checks, arenas, runs)."""

    def __init__(self, w: Worker, spec: ReferenceSpec):
        self.w, self.spec = w, spec
        self.device = spec.device
        self.cuda = spec.device.startswith("cuda")
        self.cache: dict[int, TrialData] = {}
        self.cache_used = 0
        self.recent: tuple[int, TrialData] | None = None  # the last trial computed and not cached: its check comes next
        self.plans: dict[int, TrialPlan] = {}
        self.slots: dict[int, Slot] = {}
        self.outs: dict[int, Out] = {}
        self.spares: dict[str, list[Arena]] = {}  # arenas an evaluation gave back for its next trial (Handoff)
        self._ids = spec.id_base
        self.on_device = spec.inputs_on_device and self.cuda
        self.draw_note: str | None = None
        self.seconds: dict[str, float] = {}  # the current request's, by step (Trials._timed)
        self.vacuous_of: dict[int, str | None] = {}  # each correctness trial's vacuous-tolerance note, once found
        self.input_moments: dict[int, dict[int, tuple[float, float]]] = {}  # a varied trial's base inputs' (mean, std)
        self.noise_of: dict[int, float] = {}  # each float64 trial's reference error against float64, once found

    def _id(self) -> int:
        self._ids += 1
        return self._ids

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
            self.w.say(Sized(**self.size.model_dump(), gpu_total_bytes=total))
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
            float64_note=self.float64_note,
            arena_kind=kind,
            arena_note=note,
            torch=torch.__version__,
            gpu=props.name if props else None,
            capability=f"{props.major}.{props.minor}" if props else None,
            draw_note="drawn on the device" if self.on_device else None,
            task_flops=task_size.flops_on_meta(self.task),
            dtypes=self._dtypes(),
            gpu_props=_gpu_props(props) if props else {},
            input_sets=self._describe_sets(),
        )
        self.w.say(ready)

    def _describe_sets(self) -> list[str] | None:
        try:
            return input_sets.describe_all(self.task, self.spec.init_seed)
        except Exception as e:
            raise TaskProblem(f"{short(e)} while calling {input_sets.FUNCTION}()") from e

    def _dtypes(self) -> list[str]:
        import torch

        found = (
            {str(p.dtype).removeprefix("torch.") for p in self.model.parameters() if p.is_floating_point()}
            if hasattr(self.model, "parameters")
            else set()
        )

        def inputs_on_meta() -> list:
            seed_all(0)
            with torch.device("meta"):
                return leaves(self.task.get_inputs())

        try:
            found |= {
                str(t.dtype).removeprefix("torch.")
                for _, t in task_size.without_dynamo(inputs_on_meta)
                if isinstance(t, torch.Tensor) and t.is_floating_point()
            }
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
        host = (
            size.input_bytes if self.cuda else size.trial_bytes
        )  # drawn on the CPU for a GPU: its inputs pass through
        if limit and host > limit:
            raise TooLarge(
                f"the task does not fit the host memory the judge allows: one trial ({size.describe()}) needs "
                f"{text(host)} of host memory and the limit is {text(limit)}"
            )


def _gpu_props(props: Any) -> dict[str, Any]:
    """The numbers of the GPU the prompt's GPU block and the floor use (tools/gpu/specs.py: measured)."""
    import torch

    out: dict[str, Any] = {"name": props.name}
    for key in (
        "multi_processor_count",
        "total_memory",
        "L2_cache_size",
        "shared_memory_per_block_optin",
        "shared_memory_per_multiprocessor",
        "regs_per_multiprocessor",
        "max_threads_per_multi_processor",
    ):
        value = getattr(props, key, None)
        if value is not None:
            out[key] = int(value)
    try:  # memory clock and bus width: the driver's attributes (peak DRAM bandwidth = 2 x clock x width)
        from kernelfix.tools.transport import cuda_vmm

        out.update(cuda_vmm.memory_attributes(torch.cuda.current_device()))
    except Exception:
        pass
    return out


def main() -> None:
    w = Worker()

    def body(w: Worker) -> None:
        server = ReferenceServer(w, ReferenceSpec.model_validate(w.spec))
        server.start()
        w.serve(
            {
                Prepare: server.prepare,
                Survey: server.survey,
                Check: server.check,
                Release: server.release,
                BaselineRequest: server.baseline,
                DeterminismRequest: server.determinism,
                Trim: server.trim,
            }
        )

    w.run(body)


if __name__ == "__main__":
    main()
