"""Warm judges for many tasks on many GPUs, behind one bounded queue: what ``kernelfix serve``
and the in-process RL rewards judge with.

Each GPU is a slot: ``per_gpu`` worker threads and up to ``judges_per_gpu`` warm judges (one
per task source, name and backward flag), kept least-recently-used, each pinned to its GPU
(``Judge(gpu=...)``: its reference and candidate workers are processes that see that GPU
alone, and the device lease queues their timed stages). A request goes to a GPU whose judge
for its task is warm and that has a free thread, else to the least loaded GPU (which warms a
judge for it). Admission is all or nothing per submission: while the requests admitted and not
finished would pass ``capacity + queue``, ``submit`` raises ``Busy`` and nothing was taken, so
a caller is told at once and no request is lost. Judging happens in the slots' threads; the
caller gets futures.
"""

from __future__ import annotations

import collections
import logging
import math
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from hashlib import sha1
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelfix.library.api import Judge
from kernelfix.library.sources import CandidateKind, task_from_text, task_name
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.task import TaskError
from kernelfix.tools.verdict import Verdict

log = logging.getLogger("kernelfix.serve")

__all__ = ["Busy", "JudgePool", "JudgeRequest", "Outcome", "PoolStats", "TooMany", "gpu_slots"]


class JudgeRequest(BaseModel):
    """One candidate for one task, both as source text. The server's ``POST /v1/evaluate`` body."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field(min_length=1, description="the task's source: Model, get_inputs, get_init_inputs")
    candidate: str = Field(
        description="the candidate's source (defines ModelNew), or a model's reply holding it in a ```python block"
    )
    backward: bool | None = Field(
        None, description="judge the backward pass too; None: as the server's config, else the task's BACKWARD"
    )
    profile: bool | None = Field(
        None, description="Nsight Compute profile of a correct, legal kernel; None: as the server's config (off)"
    )
    sanitize: bool | None = Field(
        None,
        description="compute-sanitizer on a wrong or crashing CUDA/Triton kernel, for the cause (Verdict.sanitizer); it never changes the "
        "category or the speedup; false: skipped (what a reward wants); None: as the server's config (on, unless --no-sanitize)",
    )
    task_name: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$",
        description="the task's name in the verdict and for [judge.tasks.NAME] overrides; None: task_<sha1 prefix>",
    )
    kind: CandidateKind = Field(
        "auto", description="code, reply, or auto: a reply when it holds a complete fenced block"
    )


class Failure(BaseModel):
    """A request the judge could not give a verdict on, with the HTTP status the server answers."""

    code: Literal["task_error", "internal"]
    status: int
    message: str


class Outcome(BaseModel):
    verdict: Verdict | None = None
    error: Failure | None = None
    gpu: str | None = None  # the slot that judged it
    seconds: float = 0.0


class SlotStats(BaseModel):
    gpu: str | None
    running: int
    queued: int
    judges: list[str]  # warm judges' task names, least recently used first


class PoolStats(BaseModel):
    device: str
    capacity: int  # evaluations at once: per_gpu x GPUs
    queue: int | None  # more may wait; None: no bound
    pending: int  # admitted, not finished (running + queued)
    served: int
    rejected: int
    mean_seconds: float | None  # per verdict, recent ones weighing most
    slots: list[SlotStats]


class Busy(Exception):
    """Every GPU's threads and the queue are full: try again after ``retry_after_s``."""

    def __init__(self, retry_after_s: int, pending: int, limit: int):
        self.retry_after_s = retry_after_s
        super().__init__(
            f"the judge is busy ({pending} requests admitted, at most {limit}): retry after {retry_after_s} s"
        )


class TooMany(Exception):
    """A submission larger than the pool can ever admit at once."""


@dataclass(eq=False)
class _Entry:
    """A slot's judge for one task: made by the first request that runs, shared by the rest."""

    name: str
    users: int = 0  # requests routed to it and not finished: never evicted while above 0
    judge: Judge | None = None
    error: TaskError | None = None  # the task is unusable: said again at once to later requests
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(eq=False)
class _Slot:
    index: int
    gpu: str | None
    executor: ThreadPoolExecutor
    load: int = 0  # admitted here, not finished
    running: int = 0
    judges: collections.OrderedDict = field(default_factory=collections.OrderedDict)  # key -> _Entry, LRU first


Key = tuple[str, str, bool | None]
MakeJudge = Callable[[JudgeRequest, str | None, Path], Judge]


class JudgePool:
    """``gpus``: one slot per entry, as CUDA_VISIBLE_DEVICES names the GPU (None: the judge's
    default, the only choice on the CPU). ``queue``: requests that may wait beyond the threads
    (None: no bound, for a caller in process that waits anyway). ``keep_files``: keep each
    evaluation's logs (a server drops them; a client cannot read them). ``standby``: candidate workers each
    warm judge keeps started ahead (``Judge(standby=)``: a warm verdict skips the worker's start)."""

    def __init__(
        self,
        config: JudgeConfig,
        *,
        gpus: Sequence[str | None] = (None,),
        per_gpu: int = 2,
        queue: int | None = 64,
        judges_per_gpu: int = 4,
        keep_files: bool = False,
        standby: int = 0,
        make_judge: MakeJudge | None = None,
    ):
        if per_gpu < 1 or judges_per_gpu < 1 or (queue is not None and queue < 0) or not gpus:
            raise ValueError(
                "per_gpu and judges_per_gpu must be at least 1, queue at least 0, and there must be a GPU slot"
            )
        self.config = config
        self.per_gpu = per_gpu
        self.queue = queue
        self.judges_per_gpu = judges_per_gpu
        self.keep_files = keep_files
        self.standby = standby
        self._make = make_judge or self._default_judge
        self.root = Path(tempfile.mkdtemp(prefix="kernelfix-pool-"))  # the tasks' source files
        self.slots = [
            _Slot(i, g, ThreadPoolExecutor(per_gpu, thread_name_prefix=f"kernelfix-judge-{g if g is not None else i}"))
            for i, g in enumerate(gpus)
        ]
        self._lock = threading.Lock()
        self._served = self._rejected = 0
        self._mean_s: float | None = None
        self._closed = False

    @property
    def capacity(self) -> int:
        return self.per_gpu * len(self.slots)

    @property
    def limit(self) -> int | None:
        return None if self.queue is None else self.capacity + self.queue

    # ------------------------------------------------------------------ admission and routing

    def submit(self, requests: Sequence[JudgeRequest]) -> list[Future[Outcome]]:
        """Admit every request or none: their futures, in order. ``Busy`` when they do not fit now,
        ``TooMany`` when they never would."""
        n = len(requests)
        limit = self.limit
        if limit is not None and n > limit:
            raise TooMany(
                f"{n} requests at once, and this judge admits at most {limit} ({self.capacity} running, {self.queue} queued): split them"
            )
        routed = []
        with self._lock:
            if self._closed:
                raise RuntimeError("the judge pool is closed")
            pending = sum(s.load for s in self.slots)
            if limit is not None and pending + n > limit:
                self._rejected += n
                raise Busy(self._retry_after(pending + n - limit), pending, limit)
            for req in requests:
                key = self._key(req)
                slot = self._route(key)
                entry = slot.judges.get(key)
                if entry is None:
                    entry = slot.judges[key] = _Entry(name=key[1])
                slot.judges.move_to_end(key)
                entry.users += 1
                slot.load += 1
                routed.append((slot, entry, req))
        return [slot.executor.submit(self._run, slot, entry, req) for slot, entry, req in routed]

    def judge(self, requests: Sequence[JudgeRequest]) -> list[Outcome]:
        """Submit and wait: the outcomes in order (for a caller in process; ``Busy`` as ``submit``)."""
        return [f.result() for f in self.submit(requests)]

    @staticmethod
    def _key(req: JudgeRequest) -> Key:
        return (sha1(req.task.encode()).hexdigest(), task_name(req.task, req.task_name), req.backward)

    def _route(self, key: Key) -> _Slot:
        """A GPU whose judge for the task is warm and that has a free thread; else the least loaded
        (where the task is warm first, then the first GPU)."""
        warm = [s for s in self.slots if key in s.judges and s.load < self.per_gpu]
        if warm:
            return min(warm, key=lambda s: (s.load, s.index))
        return min(self.slots, key=lambda s: (s.load, key not in s.judges, s.index))

    def _retry_after(self, excess: int) -> int:
        """Seconds until about ``excess`` requests have finished, at the recent time per verdict."""
        per = self._mean_s if self._mean_s is not None else 10.0
        return max(1, min(600, math.ceil(per * max(1, excess) / self.capacity)))

    # ------------------------------------------------------------------ judging, in a slot's thread

    def _run(self, slot: _Slot, entry: _Entry, req: JudgeRequest) -> Outcome:
        t0 = time.monotonic()
        with self._lock:
            slot.running += 1
        try:
            judge = self._judge_for(entry, req, slot)
            # Always text: a request's candidate is never a path on this machine.
            verdict = judge.evaluate_text(req.candidate, kind=req.kind, profile=req.profile, sanitize=req.sanitize)
            return Outcome(verdict=verdict, gpu=slot.gpu, seconds=round(time.monotonic() - t0, 3))
        except TaskError as e:  # the task's own fault, said of the text the client sent, without this machine's paths
            written = re.escape(str(self.root)) + r"/\S*?/" + re.escape(task_name(req.task, req.task_name)) + r"\.py"
            message = re.sub(written, repr(req.task_name) if req.task_name else "(sent as text)", str(e))
            message = re.sub(re.escape(str(self.root)) + r"/\S*/", "", message)
            return Outcome(
                error=Failure(code="task_error", status=422, message=message),
                gpu=slot.gpu,
                seconds=round(time.monotonic() - t0, 3),
            )
        except Exception as e:  # the judge's own bug or a broken machine: this request fails, the pool goes on
            log.exception("judging a request failed")
            return Outcome(error=Failure(code="internal", status=500, message=f"{type(e).__name__}: {e}"), gpu=slot.gpu)
        finally:
            seconds = time.monotonic() - t0
            with self._lock:
                slot.running -= 1
                slot.load -= 1
                entry.users -= 1
                self._served += 1
                self._mean_s = seconds if self._mean_s is None else 0.8 * self._mean_s + 0.2 * seconds
                stale = self._evict(slot)
            for judge in stale:
                judge.close()

    def _judge_for(self, entry: _Entry, req: JudgeRequest, slot: _Slot) -> Judge:
        with entry.lock:  # one request makes it; the others of its task wait for it
            if entry.error is not None:
                raise entry.error
            if entry.judge is None:
                try:
                    entry.judge = self._make(
                        req, slot.gpu, self.root / f"gpu{slot.index}"
                    )  # each slot its own task files
                except TaskError as e:
                    entry.error = e
                    raise
            return entry.judge

    def _default_judge(self, req: JudgeRequest, gpu: str | None, root: Path) -> Judge:
        task = task_from_text(req.task, req.task_name, root / sha1(req.task.encode()).hexdigest()[:16])
        return Judge(
            task, config=self.config, backward=req.backward, gpu=gpu, keep_files=self.keep_files, standby=self.standby
        )

    def _evict(self, slot: _Slot) -> list[Judge]:
        """Idle judges past the slot's bound, least recently used first (under the lock; closed by the caller)."""
        out = []
        while len(slot.judges) > self.judges_per_gpu:
            key = next((k for k, e in slot.judges.items() if e.users == 0), None)
            if key is None:
                break  # every judge is in use: the bound waits for one to finish
            entry = slot.judges.pop(key)
            if entry.judge is not None:
                out.append(entry.judge)
        return out

    # ------------------------------------------------------------------ state and end

    def stats(self) -> PoolStats:
        with self._lock:
            slots = [
                SlotStats(
                    gpu=s.gpu, running=s.running, queued=s.load - s.running, judges=[e.name for e in s.judges.values()]
                )
                for s in self.slots
            ]
            return PoolStats(
                device=self.config.device or "auto",
                capacity=self.capacity,
                queue=self.queue,
                pending=sum(s.load for s in self.slots),
                served=self._served,
                rejected=self._rejected,
                mean_seconds=round(self._mean_s, 3) if self._mean_s is not None else None,
                slots=slots,
            )

    def close(self) -> None:
        """Finish what was admitted, then end every judge's workers."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for slot in self.slots:
            slot.executor.shutdown(wait=True)
        for slot in self.slots:
            for entry in slot.judges.values():
                if entry.judge is not None:
                    entry.judge.close()
            slot.judges.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "JudgePool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def gpu_slots(gpus: str | Sequence[str] | None, device: str) -> list[str | None]:
    """The pool's slots: the GPUs named ("0,1", or a list), or with None / "all" every visible GPU; on the
    CPU one slot, unless GPUs are named (then the routing is the same as on a GPU machine, for tests).
    ValueError when a GPU is wanted and none is visible, or a name repeats."""
    if gpus is None or gpus == "all":
        if device != "cuda":
            return [None]
        from kernelfix.tools.gpu.visible import visible_gpus

        found = visible_gpus()
        if not found:
            raise ValueError("judging on cuda, but no GPU is visible here (CUDA_VISIBLE_DEVICES, or torch sees none)")
        return list(found)
    names = [g.strip() for g in (gpus.split(",") if isinstance(gpus, str) else gpus) if str(g).strip()]
    if not names or len(set(names)) != len(names):
        raise ValueError(f"GPUs {gpus!r}: 'all' or distinct names as CUDA_VISIBLE_DEVICES gives them (0,1)")
    return [str(g) for g in names]
