"""[workers] What both workers do inside their sandboxed process: load modules, seed, build models, serve.

The CUDA entry points the clock relies on (synchronize, events) are bound here
before any candidate code is imported, so replacing the Python wrappers later
changes nothing for the judge's own code.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelfix.sandbox.channel import ChildChannel, RequestSocket
from kernelfix.tools.timing.clock import Cuda
from kernelfix.tools.transport.protocol import BadRequest, Exit, Hello, Phase, Reply, Request, WorkerError, parse

# Bound before the candidate exists.
_exit = os._exit

PHASE = "start"


class TaskProblem(Exception):
    """The task's own code failed (import, get_inputs, Model): never the candidate's fault."""


class TooLarge(Exception):
    """The task cannot fit this machine (its sizes and the limit in the message): the machine's verdict."""


class Worker:
    """The channel, the request socket and the current phase (which a failure report names)."""

    def __init__(self) -> None:
        self.chan = ChildChannel.open()  # first: the token is on stdin, which the candidate must never read
        self.spec: dict[str, Any] = json.loads(Path(sys.argv[1]).read_text())
        Path(sys.argv[1]).unlink(missing_ok=True)  # nothing of the judge's plan stays on disk
        self.requests: RequestSocket | None = None
        self.say(Hello(pid=os.getpid(), stage=self.spec.get("stage")))

    def say(self, msg: Reply, id: int | None = None) -> None:
        """One of the protocol's messages to the judge; ``id``: the request it answers."""
        wire = msg.wire()
        if id is not None:
            wire["id"] = id
        self.chan.send(wire.pop("type"), **wire)

    def phase(self, name: str, **extra: Any) -> None:
        global PHASE
        PHASE = name
        self.say(Phase(phase=name, **extra))

    def serve(self, handlers: dict[type[Request], Callable[[Any, list[int]], None]]) -> None:
        """Answer requests, each parsed as its message, until ``exit`` or EOF. A handler's exception (a
        request that is not its message's, too: the judge's own bug) ends the worker (a CUDA fault poisons
        the process's context: nothing after it is trustworthy)."""
        if self.requests is None:
            self.requests = self.chan.requests()
        by_kind = {cls.KIND: (cls, handler) for cls, handler in handlers.items()}
        while True:
            got = self.requests.recv()
            if got is None:
                return
            req, fds = got
            kind = str(req.get("type"))
            if kind == Exit.KIND:
                return
            if kind not in by_kind:
                rid = req.get("id")
                self.say(BadRequest(got=kind[:200]), rid if isinstance(rid, int) else None)
                continue
            cls, handler = by_kind[kind]
            handler(parse(req, cls), fds)

    def run(self, body: Callable[["Worker"], None]) -> None:
        code = 0
        try:
            body(self)
        except BaseException as e:  # SystemExit from the candidate included
            code = 3
            self.report(e)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        # No interpreter teardown: candidate atexit hooks and destructors do not run after the verdict.
        _exit(code)

    def report(self, e: BaseException) -> None:
        from kernelfix.tools.compile import GpuRequired

        kind = "exception"
        if isinstance(e, GpuRequired):
            kind = "gpu_required"
        elif isinstance(e, TaskProblem):
            kind = "task"
        elif isinstance(e, TooLarge):
            kind = "too_large"
        elif type(e).__name__ == "NoModelNew":
            kind = "no_model_new"
        elif isinstance(e, SystemExit):
            kind = "exit"
        extra: dict[str, Any] = {}
        if _is_oom(e):
            extra["memory"] = gpu_memory()
        self.say(
            WorkerError(
                kind=kind,
                phase=PHASE,
                exc_type=type(e).__name__,
                classes=[c.__name__ for c in type(e).__mro__],
                message=str(e)[-12000:],
                traceback=traceback.format_exc()[-8000:],
                **extra,
            )
        )


def _is_oom(e: BaseException) -> bool:
    return "OutOfMemoryError" in [c.__name__ for c in type(e).__mro__] or "out of memory" in str(e)


def gpu_memory() -> dict[str, int] | None:
    """This process's allocator state and the device's free memory: an OOM report says whose memory ran out."""
    try:
        import torch

        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
        free, total = torch.cuda.mem_get_info()
        return {
            "free": int(free),
            "total": int(total),
            "allocated": int(torch.cuda.memory_allocated()),
            "reserved": int(torch.cuda.memory_reserved()),
            "peak": int(torch.cuda.max_memory_allocated()),
        }
    except Exception:
        return None


def load_module(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # triton's @jit and dataclasses look the module up by name
    spec.loader.exec_module(mod)
    return mod


def load_task(w: Worker, path: str):
    w.phase("load_task")
    try:
        task = load_module(path, "kernelfix_task")
    except Exception as e:
        raise TaskProblem(f"{type(e).__name__} while importing the task: {e}") from e
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(task, n)]
    if missing:
        raise TaskProblem(f"task lacks {', '.join(missing)}")
    return task


def seed_all(seed: int) -> None:
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)  # seeds every CUDA device as well
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:
        pass


def to_device(obj: Any, device: str) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    return obj


def tensors_in(obj: Any) -> list:
    """The tensors of a nested output or input list (lists, tuples, dict values), in order."""
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in tensors_in(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in tensors_in(o)]
    return []


def build_model(cls, task, seed: int, device: str):
    """``cls(*get_init_inputs())`` under the init seed, on ``device``: Model and ModelNew get the same weights."""
    seed_all(seed)
    init_inputs = task.get_init_inputs()
    seed_all(seed)
    model = cls(*init_inputs)
    if hasattr(model, "to"):
        model = model.to(device)
    return model


def sync(device: str) -> None:
    if device.startswith("cuda"):
        Cuda.sync()


def short(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:200]}" if msg else type(e).__name__
