"""[judge, one-shot child] Host syncs inside the candidate's forward: which call made the host wait for the GPU, on which line.

A forward that calls ``.item()``, ``.cpu()``, ``.tolist()`` or ``torch.cuda.synchronize()`` makes the
host wait until the GPU has finished everything queued; the GPU then idles while Python reads the
value and launches the next kernel. A profile sees only the symptom (kernels busy for part of the
forward: "launch-bound"), and the fix it implies (fuse the kernels) is not the one that helps.

The profile target (``tools/workers/profile_target.py``) calls ``watch`` on a warmed-up forward, before the
profiled one, where Nsight Compute does not replay kernels:

- torch's GPU trace (the hooks ``torch.cuda._sanitizer`` uses) reports each device, stream and event
  synchronization torch performs, and the Python stack at that moment names the candidate's line;
- a GPU-side wait queued ahead of the forward (``torch.cuda._sleep``) tells whether the forward
  returned before that work finished: a sync anywhere, even in compiled code torch does not see
  (``cudaDeviceSynchronize``, a blocking ``cudaMemcpy``), holds the host until it has. Where a
  profiler in front serializes every launch (Nsight Compute may), the wait cannot be told from the
  launch, and the report says so instead (``note``); the static check names such C++ calls anyway.

``sync_calls`` (which frames are the candidate's, what its line says) is a pure function, tested on the
CPU; ``watch`` needs a CUDA device.
"""

from __future__ import annotations

import linecache
import os
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SyncKind = Literal["device", "stream", "event"]
SLEEP_MS = 20.0  # GPU work queued ahead of the watched forward
BLOCKED_SHARE = 0.5  # the forward's host time grew by more than this share of it: the host waited for the GPU


class HostSync(BaseModel):
    """One line of the candidate that synchronized the host with the GPU, and how often per forward."""

    model_config = ConfigDict(extra="forbid")

    kind: SyncKind  # what torch synchronized: the device, a stream (.item(), .cpu(), ...) or an event
    line: int | None = None  # in the candidate's source
    code: str = ""  # that line's text
    count: int = 1


class SyncReport(BaseModel):
    """What ``watch`` saw in one forward."""

    model_config = ConfigDict(extra="forbid")

    syncs: list[HostSync] = Field(default_factory=list)
    blocked: bool | None = None  # the forward waited for GPU work queued before it (None: not measured)
    sleep_ms: float | None = None  # that work, as timed on the GPU
    plain_ms: float | None = None  # the forward's host time with nothing queued ahead
    waited_ms: float | None = None  # its host time with the work queued ahead
    note: str | None = None  # why something could not be measured


def sync_calls(
    events: Sequence[tuple[SyncKind, Sequence[tuple[str, int]]]],
    candidate_path: str,
    read_line: Callable[[str, int], str] | None = None,
) -> list[HostSync]:
    """The candidate's lines behind sync events: each event's stack (outermost first, as
    ``traceback.extract_stack`` gives it) is searched for the innermost frame in the candidate's file;
    events with none (the judge's own syncs, torch's) are left out. Same line and kind: counted once."""
    read_line = read_line or (lambda path, line: linecache.getline(path, line))
    want = os.path.realpath(candidate_path)
    found: dict[tuple[SyncKind, int], HostSync] = {}
    for kind, stack in events:
        frame = next(((f, n) for f, n in reversed(stack) if os.path.realpath(f) == want), None)
        if frame is None:
            continue
        key = (kind, frame[1])
        if key in found:
            found[key].count += 1
        else:
            found[key] = HostSync(kind=kind, line=frame[1], code=read_line(frame[0], frame[1]).strip()[:200])
    return sorted(found.values(), key=lambda s: (s.line or 0, s.kind))


def watch(forward: Callable[[], Any], candidate_path: str) -> SyncReport:
    """Run ``forward`` twice on the current CUDA stream: once recording torch's sync events with their
    stacks, once behind ``SLEEP_MS`` of queued GPU work, timing the host; then which lines synced."""
    import torch
    from torch.cuda import _gpu_trace

    events: list[tuple[SyncKind, list[tuple[str, int]]]] = []
    recording = [False]

    def hook(kind: SyncKind) -> Callable[..., None]:
        def cb(*_: Any) -> None:
            if recording[0]:
                events.append((kind, [(f.filename, f.lineno or 0) for f in traceback.extract_stack()[:-1]]))

        return cb

    torch._C._activate_gpu_trace()  # this process only (the profile target): it cannot be turned off again
    _gpu_trace.register_callback_for_device_synchronization(hook("device"))
    _gpu_trace.register_callback_for_stream_synchronization(hook("stream"))
    _gpu_trace.register_callback_for_event_synchronization(hook("event"))
    report = SyncReport()
    torch.cuda.synchronize()
    recording[0] = True
    try:
        t0 = time.perf_counter()
        forward()
        report.plain_ms = (time.perf_counter() - t0) * 1e3
    finally:
        recording[0] = False
    torch.cuda.synchronize()
    report.syncs = sync_calls(events, candidate_path)
    try:
        cycles = _cycles_for(SLEEP_MS)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        torch.cuda._sleep(cycles)
        launched_ms = (time.perf_counter() - t0) * 1e3
        end.record()
        t0 = time.perf_counter()
        forward()
        report.waited_ms = (time.perf_counter() - t0) * 1e3
        torch.cuda.synchronize()
        report.sleep_ms = start.elapsed_time(end)
        if (
            launched_ms > BLOCKED_SHARE * report.sleep_ms
        ):  # the launch itself waited: a profiler serializes launches here
            report.note = (
                "launches wait for their kernels in this process (a profiler in front): the host-wait check cannot tell"
            )
        else:
            report.blocked = report.waited_ms - report.plain_ms > BLOCKED_SHARE * report.sleep_ms
    except Exception as e:  # the timing is a second opinion; the recorded calls stand without it
        report.note = f"the host-wait check did not run: {type(e).__name__}: {e}"[:300]
    return report


def _cycles_for(ms: float) -> int:
    """GPU clock cycles ``torch.cuda._sleep`` spins for ``ms`` milliseconds, measured."""
    import torch

    probe = 2_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(probe)
    end.record()
    end.synchronize()
    per_ms = probe / max(start.elapsed_time(end), 1e-3)
    return int(per_ms * ms)
