"""[judge] One judge's share of its GPU beside other judges (docs/judge.md, "Many judges on one GPU"):
the GPU's lock for a piece of work (``lease``: exclusive, or shared), room for a stage's memory
(``room``), and, while others wait and this judge holds neither, its reference's GPU memory given back."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.gpu import room as gpu_room
from kernelfix.tools.gpu.lease import DeviceLease
from kernelfix.tools.handles.reference import Reference
from kernelfix.tools.task_size import TaskSize

YIELD_POLL_S = 0.2  # how soon an idle judge gives back GPU memory another judge wants
IDLE_REFERENCE_S = 20.0  # ... and after how long idle its reference worker stops (started again on demand)


class GpuShare:
    """``device_lease``: the GPU's lease (tools/gpu/lease.py); None on a CPU, where nothing queues."""

    def __init__(
        self, device_lease: DeviceLease | None, ref: Reference, task_name: str, config: Callable[[], JudgeConfig]
    ):
        """``config``: the judge's config as it is when asked (a caller may replace the judge's)."""
        self.device_lease, self.ref, self.task_name, self._config = device_lease, ref, task_name, config
        self._holding = 0  # GPU leases this judge's threads hold now
        self._busy = 0  # GPU stages of this judge with room on the GPU (Judge.room)
        self._budget: int | None = None  # what the stages with room may declare on this GPU (tools/gpu/room.py)
        self._last_held = time.monotonic()
        self._holding_lock = threading.Lock()
        self._yielder: threading.Thread | None = None
        self._closed = threading.Event()

    def close(self) -> None:
        self._closed.set()

    def lease(self, what: str, *, shared: bool = False) -> contextlib.AbstractContextManager:
        if self.device_lease is None:
            return contextlib.nullcontext()
        return self._held(what, shared)

    def room(self, what: str, need_bytes: int | None = None) -> contextlib.AbstractContextManager:
        if self.device_lease is None:
            return contextlib.nullcontext()
        return self._roomed(what, need_bytes)

    @contextlib.contextmanager
    def _held(self, what: str, shared: bool):
        assert self.device_lease is not None
        self._start_yielding()
        with self.device_lease.hold(f"{self.task_name} {what}", shared=shared):
            with self._holding_lock:
                self._holding += 1
            try:
                yield
            finally:
                with self._holding_lock:
                    self._holding -= 1
                    self._last_held = time.monotonic()

    @contextlib.contextmanager
    def _roomed(self, what: str, need_bytes: int | None):
        assert self.device_lease is not None
        self._start_yielding()
        cache = 0
        if need_bytes is None:
            need = gpu_room.stage_need(self.task_size(), self._config(), len(self.ref.trials))
            need_bytes, cache = need if need is not None else (None, 0)
        with self.device_lease.room(f"{self.task_name} {what}", need_bytes, self.gpu_budget(), cache_bytes=cache):
            with self._holding_lock:
                self._busy += 1
            try:
                yield
            finally:
                with self._holding_lock:
                    self._busy -= 1
                    self._last_held = time.monotonic()

    def task_size(self) -> "TaskSize | None":
        """One trial's inputs and outputs: counted on the meta device, else as the reference's trials showed them."""
        size = self.ref.size
        if size is None and self.ref.input_bytes + self.ref.output_bytes > 0:
            size = TaskSize(input_bytes=self.ref.input_bytes, output_bytes=self.ref.output_bytes)
        return size

    def gpu_budget(self) -> int | None:
        """What the stages with room on this GPU may declare together, once the reference has said the GPU's size."""
        if self._budget is None:
            props = (
                self.ref.ready.gpu_props if self.ref.ready is not None else {"total_memory": self.ref.gpu_total_bytes}
            )
            self._budget = gpu_room.budget(props)
        return self._budget

    def _start_yielding(self) -> None:
        """Watch, from the first GPU stage on, for other judges that want this GPU (docs/judge.md, "Many
        judges on one GPU"): while this judge does not hold the lease, its reference keeps no trials on
        the GPU and its allocators' free blocks go back, so the stage that holds the lease gets the memory."""
        with self._holding_lock:
            if self._yielder is not None:
                return
            self._yielder = threading.Thread(
                target=self._yield_while_others_want, daemon=True, name="kernelfix-yield-gpu"
            )
        self._yielder.start()

    def _yield_while_others_want(self) -> None:
        assert self.device_lease is not None
        while not self._closed.wait(YIELD_POLL_S):
            if self._holding or self._busy or not self.device_lease.others_want():
                continue
            if time.monotonic() - self._last_held > IDLE_REFERENCE_S and self.ref.stop_idle():
                # Idle that long while others want the GPU: its CUDA context goes too (a judge kept for
                # later, as a test session or a batch keeps several); the next request starts it again.
                self.device_lease.note({"stopped_idle_reference": self.task_name})
                continue
            if not self.ref.holds_gpu_memory:
                continue
            try:
                if self.ref.give_back_gpu_memory() is not None and (t := self.ref.last_trim) is not None:
                    self.device_lease.note(
                        {
                            "gave_back": self.task_name,
                            "freed": t.freed,
                            "reserved_after": t.reserved,
                            "arenas": (t.slots, t.outs),
                        }
                    )
            except Exception:  # a reference that is gone or failing: the stage that needs it will say so
                pass
