"""[judge] The profiled run started ahead of the profile stage, while the candidate is built, checked and timed.

Most of a one-kernel profile went into starting the profiled process: a new Python under Nsight Compute that
imports torch and the task before it touches the GPU (4-5 s of a 12 s stage on the H200). The judge starts that
process as the evaluation begins (``start``), when this evaluation will be profiled; it imports what it needs and
waits for its go (``GO_FILE``, in the evaluation's own directory, which the candidate cannot write: the sanitizer's
handoff). The stage, once the candidate is correct and legal, takes the GPU's room and its exclusive lock, hands it
the go with what the reference knows (the task's FLOPs and dtypes), and waits for it (``go``): CUDA, the inputs, the
candidate, the warm-up and ncu's replays all run under the lock, as before. An evaluation that never reaches the
stage cancels it (``cancel``): the process ends without starting CUDA.

Before the go the process does CPU work only (imports, the task's module, Triton's key), as a candidate worker
does outside the lock (docs/service.md); it holds no GPU memory and runs no kernel beside another's timing.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelfix.sandbox import ChildOutcome
from kernelfix.tools.evaluation import Evaluation
from kernelfix.tools.handles import one_shot
from kernelfix.tools.profile import ncu
from kernelfix.tools.sanitizer import handoff
from kernelfix.tools.stages.stage_context import StageContext

TARGET = "kernelfix.tools.workers.profile_target"
GO_FILE = "profile_go.json"  # in the evaluation's directory (read-only to the candidate)
WAIT_S = 900.0  # the longest a started run waits for its go (correctness and the benchmark of a large task)


@dataclass
class Started:
    future: Future[ChildOutcome]
    go_file: Path
    report: Path
    at: float  # time.time() at its start
    pool: ThreadPoolExecutor


_started: dict[str, Started] = {}
_lock = threading.Lock()


def spec(ctx: StageContext, ev: Evaluation, outdir: Path) -> dict[str, Any]:
    """The profiled run's spec (tools/workers/profile_target.py), without what only the stage knows."""
    c, wd = ctx.config, Path(ev.workdir)
    return {
        "task_path": str(wd / "task.py"),
        "candidate_path": str(ev.candidate_path),
        "build_dir": str(wd / "build"),
        "build": c.build.model_dump(),
        "device": ctx.device,
        "init_seed": ctx.seed,
        "outdir": str(outdir),
        "warmup_calls": c.profile_warmup_calls,
        "nvtx_range": ncu.NVTX_RANGE,
        "backward_range": ncu.BACKWARD_RANGE,
        "backward": bool(c.backward),
    }


def start(ctx: StageContext, ev: Evaluation) -> None:
    """Start ``ev``'s profiled run now, to wait for its go; nothing where it will not be profiled on a GPU with ncu."""
    c = ctx.config
    if ctx.device != "cuda" or ev.failed or ev.code is None or ev.id in _started:
        return
    path, _ = ncu.find(c.ncu_path)
    if path is None:
        return
    wd = Path(ev.workdir)
    outdir = wd / "out" / "profile"
    outdir.mkdir(parents=True, exist_ok=True)
    go_file = wd / GO_FILE
    go_file.unlink(missing_ok=True)
    report = outdir / ncu.REPORT
    s = spec(ctx, ev, outdir) | {"go_file": str(go_file), "wait_s": WAIT_S}
    wrap = ncu.command(path, report, c.profile_max_kernels, extra_metrics=True, backward=bool(c.backward))
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"profile-{ev.id}")
    future = pool.submit(
        one_shot.run, ctx, ev, "profile_ncu", TARGET, s, c.profile_timeout_s + WAIT_S, wrap=wrap, lease=False
    )
    with _lock:
        _started[ev.id] = Started(future=future, go_file=go_file, report=report, at=time.time(), pool=pool)


def take(ev: Evaluation) -> Started | None:
    """``ev``'s started run, for the stage to hand its go (it is no longer ``cancel``'s)."""
    with _lock:
        return _started.pop(ev.id, None)


def go(ctx: StageContext, started: Started, known: dict[str, Any] | None) -> tuple[ChildOutcome, float]:
    """Under the GPU's room and exclusive lock, the go, then the run to its end; (its outcome, the go's time.time())."""
    with ctx.room("profile_ncu"), ctx.lease("profile_ncu"):
        at = time.time()
        handoff.publish(started.go_file, {"go": True, "known": known})
        outcome = started.future.result()
    started.pool.shutdown(wait=False)
    return outcome, at


def publish_cancel(started: Started) -> None:
    """Tell a started run to end without starting CUDA (the stage ended before its go)."""
    try:
        handoff.publish(started.go_file, {"cancel": True})
    except OSError:  # the directory is gone: the run's own wait ends it
        pass
    started.pool.shutdown(wait=False)


def cancel(ev: Evaluation, wait: bool = False) -> None:
    """End ``ev``'s started run, if the stage never took it: told to stop (it starts no CUDA), and, with ``wait``, its end
    waited for (the evaluation's directory is tidied after)."""
    with _lock:
        started = _started.pop(ev.id, None)
    if started is None:
        return
    publish_cancel(started)
    if wait:
        started.future.exception()
