"""A GPU's lease across threads and processes: exclusive for what needs the GPU alone, shared for the rest.

The judge takes the lease around every stage that runs on the GPU. What a result needs the GPU
alone for (the candidate's timing, the reference's baseline timing, the profile) holds it
**exclusive**: nothing else a judge runs is on the GPU meanwhile. What only needs room on it
(correctness trials, warm-ups, the reference's survey) holds it **shared**, beside other shared
holders, while their declared memory fits the GPU's budget.

The protocol (docs/judge.md, "Exclusive timing, shared correctness"), on three files beside each
other in the lock dir, shared by every judge on the machine:

- ``gpu-<id>.lock``: ``flock`` ``LOCK_EX`` for an exclusive hold, ``LOCK_SH`` for a shared one. The
  kernel orders them and drops a dead holder's lock.
- ``gpu-<id>.gate``: a turnstile (``LOCK_EX``, held briefly) every hold passes before it takes the
  lock. An exclusive hold keeps the gate while it waits for the shared holders to drain, so no new
  shared hold slips in ahead of it: timing is never starved by a stream of correctness runs. A shared
  hold keeps it while it waits for room, so a large one is not starved by small ones either.
- ``gpu-<id>.shared/<pid>-<lease>-<hold>-<bytes>``: one file per shared hold, the bytes it declared.
  A shared hold is admitted when none is held, or when the declared bytes of those held and its own
  fit the budget. Giving a hold back needs no gate (unlink, unlock), so a waiter always progresses; a
  dead process's files are swept by whoever counts.

``flock`` locks belong to an open file description: two threads of one process that each open the
file exclude each other as two processes do. Each hold appends a line to ``gpu-<id>.log`` (pid,
stage, mode, bytes, when it asked, got and gave back the GPU): a record of the queue that shows no
exclusive hold overlapped another hold. Marks in ``gpu-<id>.wants`` say who asked for the GPU and has
not given it back (docs/judge.md, "Many judges on one GPU").
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
ROOM_POLL_S = 0.02  # how often a shared hold waiting for room counts again

# Stages whose child runs code on the GPU. compile stays outside: it is CPU work (nvcc, ninja, Triton's parse).
GPU_STAGES = frozenset({"reference", "correctness", "benchmark", "profile_ncu", "profile_torch"})


def cuda_available() -> bool:
    """Whether torch here can use a CUDA GPU, as ``torch.cuda.is_available()`` says, without importing
    torch into the judge's process (a second or more that only the workers need): torch's CUDA
    library must be installed and the driver must count a device."""
    import ctypes
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    if not any(lib.glob("libtorch_cuda*.so*")):
        return False  # a CPU build of torch
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        count = ctypes.c_int(0)
        return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0
    except OSError:
        return False


def visible_gpu() -> str:
    """The GPU a child uses by default: the first of CUDA_VISIBLE_DEVICES (an index or a UUID), else "0"."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return first or "0"


class DeviceLease:
    """One GPU, queued on ``LOCK_DIR/gpu-<id>.lock``: exclusive holds alone, shared holds within a memory budget."""

    def __init__(self, lock_dir: Path, gpu: str):
        self.gpu = gpu
        lock_dir.mkdir(parents=True, exist_ok=True)
        self.path = lock_dir / f"gpu-{re.sub(r'[^A-Za-z0-9_.-]', '_', gpu)}.lock"
        self.gate = self.path.with_suffix(".gate")
        self.log = self.path.with_suffix(".log")
        # One file per hold asked for and not yet given back: who else wants the GPU's memory now.
        self.wants = self.path.with_suffix(".wants")
        self.wants.mkdir(exist_ok=True)
        # One file per shared hold, named with the bytes it declared: what the shared holders may use.
        self.shared_dir = self.path.with_suffix(".shared")
        self.shared_dir.mkdir(exist_ok=True)
        self.token = uuid.uuid4().hex[:12]  # this lease's holder (a judge): several may share a process

    @contextmanager
    def hold(self, what: str = "", *, shared: bool = False, need_bytes: int | None = None, budget_bytes: int | None = None) -> Iterator[None]:
        """The GPU for the block: alone (the default), or ``shared`` with other shared holds while
        their ``need_bytes`` and this one's fit ``budget_bytes``. A shared hold whose need or budget is
        unknown (None) is admitted only when no other shared hold is held. Never nest two holds in one
        thread: an exclusive hold waiting at the gate would wait for the outer one forever."""
        hold_id = uuid.uuid4().hex[:12]
        mark = self.wants / f"{os.getpid()}-{self.token}-{hold_id}"
        try:
            mark.touch()
        except OSError:  # a courtesy to the other judges, like the log
            pass
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        ticket: Path | None = None
        try:
            asked = time.time()
            gate = os.open(self.gate, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(gate, fcntl.LOCK_EX)  # waits in line; a signal handler that raises (Ctrl-C) ends the wait
                if shared:
                    need = self._wait_for_room(need_bytes, budget_bytes)
                    fcntl.flock(fd, fcntl.LOCK_SH)  # waits only for an exclusive hold taken before this one
                    ticket = self.shared_dir / f"{os.getpid()}-{self.token}-{hold_id}-{'all' if need is None else need}"
                    ticket.touch()
                else:
                    fcntl.flock(fd, fcntl.LOCK_EX)  # the shared holds drain; none starts meanwhile (the gate)
            finally:
                os.close(gate)  # the turnstile: the next one in line may ask
            got = time.time()
            try:
                yield
            finally:
                self._record(what, asked, got, "shared" if shared else "exclusive", need_bytes)
        finally:
            if ticket is not None:
                ticket.unlink(missing_ok=True)  # before the unlock: a waiter that counts now sees the room
            os.close(fd)  # releases the lock
            mark.unlink(missing_ok=True)

    def _wait_for_room(self, need_bytes: int | None, budget_bytes: int | None) -> int | None:
        """Hold the gate until this shared hold fits beside the shared holds there are (or there are none);
        the bytes it declares. An unknown need or budget counts as the whole GPU: such a hold shares with nobody."""
        need = need_bytes if need_bytes is not None and budget_bytes is not None else None
        while True:
            held = self.shared_bytes()
            if not held:
                return need
            if need is not None and None not in held and sum(held) + need <= (budget_bytes or 0):  # type: ignore[arg-type]
                return need
            time.sleep(ROOM_POLL_S)

    def shared_bytes(self) -> list[int | None]:
        """The bytes each live shared hold declared (None: the whole GPU); a dead process's are swept."""
        try:
            names = os.listdir(self.shared_dir)
        except OSError:
            return []
        out: list[int | None] = []
        for name in names:
            pid, _, _, nbytes = (name.split("-") + ["", "", "", ""])[:4]
            if not pid.isdigit():
                continue
            if _alive(int(pid)):
                out.append(int(nbytes) if nbytes.isdigit() else None)
            else:
                (self.shared_dir / name).unlink(missing_ok=True)
        return out

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
        self._write({"gpu": self.gpu, "pid": os.getpid(), "at": round(time.time(), 4), **entry}, self.path.with_suffix(".memory"))

    def _record(self, what: str, asked: float, got: float, mode: str, need_bytes: int | None) -> None:
        entry = {"gpu": self.gpu, "pid": os.getpid(), "what": what, "mode": mode, "asked": round(asked, 4), "got": round(got, 4),
                 "released": round(time.time(), 4)}
        if mode == "shared":
            entry["need_bytes"] = need_bytes
        self._write(entry)

    def _write(self, entry: dict, log: Path | None = None) -> None:
        log = log or self.log
        try:
            mode = "w" if log.exists() and log.stat().st_size > LOG_MAX_BYTES else "a"
            with open(log, mode, encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
        except OSError:  # the record is a courtesy; the lock is what matters
            pass


def exclusive_overlaps(holds: list[dict]) -> list[tuple[dict, dict]]:
    """Pairs of holds from a hold log where an exclusive one overlapped another hold (must be none)."""
    out = []
    spans = sorted(holds, key=lambda h: h["got"])
    for i, a in enumerate(spans):
        for b in spans[i + 1:]:
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
