"""[judge] The candidate's warm-up (first-call compilation, Triton's autotuning) on inputs of its own.

It runs on the GPU, so under a shared hold of the GPU's lock (docs/judge.md, "Exclusive timing, shared
correctness"): beside other judges' correctness trials, never beside a timed run. It asks for no room
for its memory: it runs only where the inputs are below ``warmup_max_gb`` (1 GiB), as before, when it
ran outside the lease. The compile stage starts it in the background as soon as the candidate is built,
while the judge waits for its reference; the correctness stage waits for it before the first trial.
Whether it runs at all is decided from the task's input size, which the reference worker counts on the
meta device.
"""

from __future__ import annotations

from kernelfix.tools.handles.candidate_run import CandidateRun
from kernelfix.tools.stages.stage_context import StageContext
from kernelfix.tools.transport.protocol import Warmed


def _hold(ctx: StageContext):
    return ctx.lease("warm-up", shared=True)


def start(ctx: StageContext, run: CandidateRun) -> None:
    """Begin the warm-up in the background (nothing to do off the GPU, or for inputs above ``warmup_max_gb``)."""
    run.warm(lambda: _hold(ctx), ctx.ref.counted_input_bytes)


def wait(ctx: StageContext, run: CandidateRun) -> Warmed:
    """The warm-up's reply; started here if the compile stage did not (a resumed evaluation)."""
    return run.warmed(lambda: _hold(ctx), ctx.ref.counted_input_bytes)
