"""[judge] A GPU's lease across threads and processes: exclusive for what needs the GPU alone, shared for the
rest, and room for each stage's memory.

The judge takes the lease around everything it runs on the GPU. What a result needs the GPU alone
for (the candidate's timing, the reference's baseline timing, the profile) holds it **exclusive**:
nothing else a judge runs is on the GPU meanwhile. What only needs the GPU to run on (correctness
trials, warm-ups, the reference's survey) holds it **shared**, beside other shared holds. Memory is
a separate question: before a stage runs anything on the GPU it asks for **room**, its memory
declared, and is given it while every stage's declaration fits the GPU's budget; it keeps the room
for the whole stage (what it keeps between its holds, arenas and the reference's trials, stays
counted) and takes the GPU's lock, shared or exclusive, for each piece of work inside it.

The protocol (docs/judge.md, "Exclusive timing, shared correctness"), on files beside each other in
the lock dir, shared by every judge on the machine:

- ``gpu-<id>.lock``: ``flock`` ``LOCK_EX`` for an exclusive hold, ``LOCK_SH`` for a shared one. The
  kernel orders them and drops a dead holder's lock.
- ``gpu-<id>.gate``: a turnstile (``LOCK_EX``, held briefly) every hold passes before it takes the
  lock. An exclusive hold keeps the gate while it waits for the shared holds to drain, so no new
  shared hold slips in ahead of it: timing is never starved by a stream of correctness trials.
- ``gpu-<id>.rooms/<pid>-<judge>-<id>-<bytes>-<cache bytes>``: one ticket per stage with room. A stage
  is given room when no ticket is there, or when all of them and its own fit the budget (a judge's
  reference cache counted once, however many of its stages hold room). Its waiters queue on
  ``gpu-<id>.room`` (``LOCK_EX`` while waiting), so a large stage is not starved by small ones; giving
  room back needs no lock (unlink), so a waiter always progresses; a dead process's tickets are swept.

Order, everywhere: room first, then the GPU's lock, never a hold inside a hold. ``flock`` locks belong
to an open file description: two threads of one process that each open the file exclude each other
as two processes do. Each hold and each room appends a line to ``gpu-<id>.log`` (pid, stage, mode,
when it asked, got and gave back): a record of the queue that shows no exclusive hold overlapped
another hold. Marks in ``gpu-<id>.wants`` say who asked for the GPU and has not given it back
(docs/judge.md, "Many judges on one GPU").
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOG_MAX_BYTES = 1 << 20  # the hold log starts over past this
ROOM_POLL_S = 0.02  # how often a stage waiting for room counts again

# Stages whose child runs code on the GPU. compile stays outside: it is CPU work (nvcc, ninja, Triton's parse).
GPU_STAGES = frozenset({"reference", "correctness", "benchmark", "profile_ncu", "profile_torch", "sanitize"})


def _torch_built_for_cuda() -> bool:
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    return any(lib.glob("libtorch_cuda*.so*"))  # else a CPU build of torch


def _devices_hidden() -> bool:
    return os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1")


def cuda_likely() -> bool:
    """Whether ``cuda_available`` will likely say yes, without starting the driver: torch built for CUDA, the
    driver's device files, devices visible (a guess: ``kernelfix eval`` starts its fork servers by it)."""
    return _torch_built_for_cuda() and not _devices_hidden() and os.path.exists("/dev/nvidiactl")


def cuda_available() -> bool:
    """Whether torch here can use a CUDA GPU, as ``torch.cuda.is_available()`` says, without importing
    torch into the judge's process (a second or more that only the workers need): torch's CUDA
    library must be installed and the driver must count a device."""
    return cuda_problem() is None


def cuda_problem() -> str | None:
    """Why torch here cannot use a CUDA GPU, in words (what torch sees), or None when it can."""
    import ctypes

    if not _torch_built_for_cuda():
        return f"torch {_torch_version()} here is a CPU-only build and sees no GPU"
    if _devices_hidden():
        return f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} hides every GPU from torch"
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return f"torch {_torch_version()} is built for CUDA, but no NVIDIA driver is installed here (libcuda.so.1 is missing)"
    count = ctypes.c_int(0)
    status = cuda.cuInit(0)
    if status != 0:
        return f"the NVIDIA driver does not start (cuInit error {status}): no usable GPU, or a driver older than torch's CUDA"
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return "the NVIDIA driver counts no GPU"
    return None


def _torch_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return "(version unknown)"


def visible_gpu() -> str:
    """The GPU a child uses by default: the first of CUDA_VISIBLE_DEVICES (an index or a UUID), else "0"."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return first or "0"


class DeviceLease:
    """One GPU, queued on ``LOCK_DIR/gpu-<id>.lock``: exclusive holds alone, shared holds together; and room
    for a stage's memory, within a budget (``room``)."""

    def __init__(self, lock_dir: Path, gpu: str):
        self.gpu = gpu
        lock_dir.mkdir(parents=True, exist_ok=True)
        self.path = lock_dir / f"gpu-{re.sub(r'[^A-Za-z0-9_.-]', '_', gpu)}.lock"
        self.gate = self.path.with_suffix(".gate")
        self.log = self.path.with_suffix(".log")
        # One file per hold asked for and not yet given back: who else wants the GPU's memory now.
        self.wants = self.path.with_suffix(".wants")
        self.wants.mkdir(exist_ok=True)
        # One ticket per stage given room, named with the bytes it declared; a lock file its waiters queue on.
        self.rooms = self.path.with_suffix(".rooms")
        self.rooms.mkdir(exist_ok=True)
        self.room_queue = self.path.with_suffix(".room")
        self.token = uuid.uuid4().hex[:12]  # this lease's holder (a judge): several may share a process

    @contextmanager
    def hold(self, what: str = "", *, shared: bool = False) -> Iterator[None]:
        """The GPU for the block: alone (the default: no other hold meanwhile), or ``shared`` with other
        shared holds. Never nest two holds in one thread: an exclusive hold waiting at the gate would wait
        for the outer one forever."""
        with self._marked():
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                asked = time.time()
                gate = os.open(self.gate, os.O_RDWR | os.O_CREAT, 0o666)
                try:
                    fcntl.flock(
                        gate, fcntl.LOCK_EX
                    )  # waits in line; a signal handler that raises (Ctrl-C) ends the wait
                    # Shared: waits only for an exclusive hold taken before this one. Exclusive: the shared holds
                    # drain, and none starts meanwhile (this one keeps the gate until it has the lock).
                    fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
                finally:
                    os.close(gate)  # the turnstile: the next one in line may ask
                got = time.time()
                try:
                    yield
                finally:
                    self._record(
                        {"what": what, "mode": "shared" if shared else "exclusive", "asked": asked, "got": got}
                    )
            finally:
                os.close(fd)  # releases the lock

    @contextmanager
    def room(
        self, what: str, need_bytes: int | None, budget_bytes: int | None, *, cache_bytes: int = 0
    ) -> Iterator[None]:
        """Room on the GPU for a stage's memory: admitted when no other stage has room, or when what they
        declared and ``need_bytes`` fit ``budget_bytes`` (an unknown need or budget: only alone). Of
        ``need_bytes``, ``cache_bytes`` is what the judge's reference keeps across its stages: counted
        once per judge (``token``), however many of its stages have room. Waiters queue in order, so a
        large stage is not starved by small ones. Take it before the GPU's lock, never inside a hold."""
        rid = uuid.uuid4().hex[:12]
        known = need_bytes is not None and budget_bytes is not None
        with self._marked():
            asked = time.time()
            queue = os.open(self.room_queue, os.O_RDWR | os.O_CREAT, 0o666)
            ticket = self.rooms / (
                f"{os.getpid()}-{self.token}-{rid}-{need_bytes - cache_bytes}-{cache_bytes}"
                if known
                else f"{os.getpid()}-{self.token}-{rid}-all-0"
            )
            try:
                fcntl.flock(queue, fcntl.LOCK_EX)
                while not self._fits(need_bytes - cache_bytes if known else None, cache_bytes, budget_bytes):  # type: ignore[operator]
                    time.sleep(ROOM_POLL_S)  # giving room back needs no lock: the holders leave on their own
                ticket.touch()
            finally:
                os.close(queue)
            got = time.time()
            try:
                yield
            finally:
                ticket.unlink(missing_ok=True)
                self._record({"what": what, "mode": "room", "need_bytes": need_bytes, "asked": asked, "got": got})

    def _fits(self, work: int | None, cache: int, budget: int | None) -> bool:
        tickets = self.room_tickets()
        if not tickets:
            return True
        if work is None or budget is None or any(w is None for _, w, _ in tickets):
            return False
        caches: dict[str, int] = {self.token: cache}
        for token, _, c in tickets:
            caches[token] = max(caches.get(token, 0), c)
        return sum(w for _, w, _ in tickets) + work + sum(caches.values()) <= budget  # type: ignore[misc]

    def room_tickets(self) -> list[tuple[str, int | None, int]]:
        """(judge, working bytes or None for the whole GPU, cache bytes) of each stage with room; a dead process's are swept."""
        try:
            names = os.listdir(self.rooms)
        except OSError:
            return []
        out: list[tuple[str, int | None, int]] = []
        for name in names:
            pid, token, _, work, cache = (name.split("-") + [""] * 5)[:5]
            if not pid.isdigit():
                continue
            if _alive(int(pid)):
                out.append((token, int(work) if work.isdigit() else None, int(cache) if cache.isdigit() else 0))
            else:
                (self.rooms / name).unlink(missing_ok=True)
        return out

    @contextmanager
    def _marked(self) -> Iterator[None]:
        mark = self.wants / f"{os.getpid()}-{self.token}-{uuid.uuid4().hex[:12]}"
        try:
            mark.touch()
        except OSError:  # a courtesy to the other judges, like the log
            pass
        try:
            yield
        finally:
            mark.unlink(missing_ok=True)

    def others_want(self) -> bool:
        """Whether another judge (in this process or another) has asked for this GPU and not yet given
        it back: then what this one keeps on the GPU while it does not hold it (cached trials, free
        allocator blocks) is in their way. A dead process's mark is swept."""
        try:
            marks = os.listdir(self.wants)
        except OSError:
            return False
        found = False
        for name in marks:
            pid, token, _ = (name.split("-", 2) + ["", ""])[:3]
            if token == self.token:
                continue
            if pid.isdigit() and _alive(int(pid)):
                found = True
            else:
                (self.wants / name).unlink(missing_ok=True)
        return found

    def note(self, entry: dict) -> None:
        """A line in ``gpu-<id>.memory`` (not the hold log): GPU memory a judge gave back to the others."""
        self._write(
            {"gpu": self.gpu, "pid": os.getpid(), "at": round(time.time(), 4), **entry},
            self.path.with_suffix(".memory"),
        )

    def _record(self, entry: dict) -> None:
        self._write(
            {
                "gpu": self.gpu,
                "pid": os.getpid(),
                **{k: round(v, 4) if isinstance(v, float) else v for k, v in entry.items()},
                "released": round(time.time(), 4),
            }
        )

    def _write(self, entry: dict, log: Path | None = None) -> None:
        log = log or self.log
        try:
            mode = "w" if log.exists() and log.stat().st_size > LOG_MAX_BYTES else "a"
            with open(log, mode, encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
        except OSError:  # the record is a courtesy; the lock is what matters
            pass


def exclusive_overlaps(holds: list[dict]) -> list[tuple[dict, dict]]:
    """Pairs of holds from a hold log where an exclusive one overlapped another hold (must be none); room is not a hold."""
    out = []
    spans = sorted((h for h in holds if h.get("mode") != "room"), key=lambda h: h["got"])
    for i, a in enumerate(spans):
        for b in spans[i + 1 :]:
            if b["got"] >= a["released"] - 1e-3:
                break
            if a.get("mode", "exclusive") == "exclusive" or b.get("mode", "exclusive") == "exclusive":
                out.append((a, b))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True
