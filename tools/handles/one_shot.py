"""[judge] One-shot children in a candidate's sandbox: a process that runs the candidate once for a tool in
front of it (Nsight Compute for the profile, compute-sanitizer for the sanitizer stage), and the
reading of what such a process wrote.

Each child gets the candidate worker's isolation, environment and limits, its spec as a file in the
evaluation's ``handoff`` directory, and a log of its run under ``logs/``. What it writes lies in
directories the candidate may write, so it is read only as a regular file, never through a link.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelfix.base import atomic
from kernelfix.sandbox import ChildOutcome, run_child
from kernelfix.sandbox.untrusted_files import read_plain
from kernelfix.tools.handles import sandboxing
from kernelfix.tools.verdict import SANDBOX_NOTE

if TYPE_CHECKING:
    from kernelfix.tools.evaluation import Evaluation
    from kernelfix.tools.handles.worker_context import WorkerContext


def run(
    ctx: "WorkerContext",
    ev: "Evaluation",
    stage: str,
    module: str,
    spec: dict[str, Any],
    timeout_s: float,
    *,
    wrap: Sequence[str] = (),
    env: dict[str, str] | None = None,
    fork: bool = False,
    lease: bool = True,
    on_message: Callable[[dict[str, Any]], None] | None = None,
    fork_kind: str = "all",
) -> ChildOutcome:
    """``python -m module SPEC`` under the candidate's sandbox, ``wrap`` (a profiler, a sanitizer) in
    front; ``env`` adds to the candidate's environment. ``lease``: hold the GPU for it (False where the
    caller holds it around several children). ``on_message``: each authenticated message as it arrives
    (the sanitizer's tools say when they are ready for their input). ``fork_kind``: the fork server a
    ``fork`` child starts from (the candidate worker's kind: warm already; "all": one of its own)."""
    wd = Path(ev.workdir)
    for d in sandboxing.CANDIDATE_DIRS:
        sandboxing.own_dir(wd / d)
    (wd / "logs").mkdir(parents=True, exist_ok=True)
    spec_path = wd / "handoff" / f"{stage}.spec.json"
    if spec_path.is_symlink() or spec_path.exists():
        spec_path.unlink()  # never write through something the candidate planted
    atomic.write_text(
        spec_path, json.dumps({**spec, "stage": stage}, default=str), fsync=False
    )  # no half-written spec after a kill
    iso, note = sandboxing.isolation(
        "candidate",
        ctx.config,
        workdir=wd,
        private=ctx.private,
        siblings=[],
        credentials=ctx.credentials,
        device=ctx.device,
    )
    argv = [*wrap, sys.executable, "-m", module, str(spec_path)]
    child_env = {**sandboxing.env("candidate", wd, ctx.device, ctx.gpu), **(env or {})}
    with contextlib.ExitStack() as held:
        if lease:  # the GPU alone (a profiler's replays time each kernel), with room for the stage's memory first
            held.enter_context(ctx.room(stage))
            held.enter_context(ctx.lease(stage))
        outcome = run_child(
            argv,
            cwd=wd,
            env=child_env,
            limits=sandboxing.limits(ctx.config, timeout_s),
            isolation=iso,
            authenticate=True,
            fork=fork and not wrap,
            on_message=on_message,
            fork_kind=fork_kind,
        )
    notes = [*outcome.sandbox_notes, *([note] if note else [])]
    ev.warnings += [SANDBOX_NOTE + n for n in notes if SANDBOX_NOTE + n not in ev.warnings]
    (wd / "logs" / f"{stage}.log").write_text(
        f"$ {' '.join(argv)}\nreturncode={outcome.returncode} signal={outcome.signal} timed_out={outcome.timed_out} wall={outcome.wall_s:.2f}s\n"
        f"--- stdout (tail) ---\n{outcome.stdout_tail}\n--- stderr (tail) ---\n{outcome.stderr_tail}\n"
    )
    return outcome


def result(outcome: ChildOutcome, path: Path) -> dict[str, Any]:
    """A one-shot child's result: from the message pipe, else from the file it also writes (a tool in
    front of the process may not pass the pipe on)."""
    got = outcome.last("result")
    if got is not None:
        return got
    try:
        data = json.loads(read_plain(path))
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
