"""[judge] The compile stage: the candidate's worker imports it (building its extensions) and builds ModelNew.

Meanwhile the reference worker starts (the task's import, Model): a task that
does not run stops the evaluation here with ``TaskError``, before any trial. A
CUDA candidate on a machine without a GPU is built for real (nvcc, the host
compiler, the linker) and ends as ``infra:no_gpu``.
"""

from __future__ import annotations

import time

from kernelfix.tools.evaluation import Evaluation, EventSink
from kernelfix.tools.handles.reference_failures import ReferenceUnavailable
from kernelfix.tools.handles.worker_handle import WorkerGone
from kernelfix.tools.stages import warmup
from kernelfix.tools.stages.stage_context import StageContext
from kernelfix.tools.verdict import Category, CompileReport


def run(ctx: StageContext, ev: Evaluation, on_event: EventSink | None) -> Evaluation:
    run = ctx.run_for(ev, on_event)
    log_path = str(run.workdir / "logs" / "candidate.log")
    try:
        try:
            msg = run.built()
        except WorkerGone as e:
            if e.outcome.last("hello") is not None or e.outcome.timed_out:
                raise
            ctx.release(ev)  # it died before running anything of the candidate's: the machine's; once more
            run = ctx.run_for(ev, on_event)
            msg = run.built()
    except WorkerGone as e:
        extensions = run.builds()
        err = e.outcome.last("error")
        cached = bool(extensions) and all(b.cached for b in extensions)
        if err is not None and err.get("kind") == "gpu_required":
            ev.compiled = True
            ev.compile = CompileReport(
                backend=ev.backend,
                seconds=e.outcome.wall_s,
                ok=True,
                cached=cached,
                extensions=extensions,
                note="built for the GPU; not loadable here",
                log_path=log_path,
            )
            return ev.fail(
                "correctness",
                Category.NO_GPU,
                f"{err.get('message')}; correctness, legality and timing need a CUDA GPU",
            )
        if err is not None and err.get("kind") == "task":
            # The task failed in the candidate's worker: the reference worker says how (TaskError).
            try:
                ctx.reference(on_event)
            except ReferenceUnavailable as r:
                return ev.fail("compile", r.category, r.message)
            return ev.fail(
                "compile", Category.WORKER, f"the task did not load in the candidate's worker: {err.get('message')}"
            )
        f = run.failure("compile", e)
        if f.category.family.value == "compile_error":
            ev.compile = CompileReport(
                backend=ev.backend,
                seconds=e.outcome.wall_s,
                ok=False,
                errors=f.details,
                extensions=extensions,
                log_path=log_path,
            )
            return ev.fail("compile", f.category, f.message)
        if f.details:
            ev.warnings.append("traceback: " + " | ".join(f.details[-4:]))
        return ev.fail("compile", f.category, f.message)
    extensions = run.builds()
    ev.breakdown |= run.start_breakdown()
    ev.compiled = True
    ev.compile = CompileReport(
        backend=ev.backend,
        seconds=round(msg.at or 0.0, 3),
        ok=True,
        cached=bool(extensions) and all(b.cached for b in extensions),
        extensions=extensions,
        log_path=log_path,
    )
    warmup.start(ctx, run)  # on the GPU, under a shared hold, while the reference gets ready
    t0 = time.monotonic()
    try:
        ctx.reference(on_event)  # a broken task stops here, before any trial (TaskError)
    except ReferenceUnavailable as e:
        return ev.fail("compile", e.category, e.message)
    ev.breakdown["compile.reference_wait"] = round(time.monotonic() - t0, 3)  # the reference worker still starting
    return ev
