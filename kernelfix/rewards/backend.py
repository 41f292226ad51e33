"""Where a reward's verdicts come from: warm judges in this process (a ``JudgePool``), or a
``kernelfix serve`` by URL (``JudgeClient``). Both judge a batch concurrently and keep each
task's judge warm between calls."""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from kernelfix.library.judge_pool import JudgePool, JudgeRequest, Outcome, gpu_slots


class Backend(Protocol):
    def judge(self, requests: Sequence[JudgeRequest]) -> list[Outcome]: ...

    def close(self) -> None: ...


class InProcess:
    """Judges in this process, on this machine's GPUs (``gpus``: None for every visible one)."""

    def __init__(
        self,
        *,
        config: Any = None,
        device: str | None = None,
        gpus: Sequence[str] | None = None,
        per_gpu: int = 2,
        judges_per_gpu: int = 8,
        pool: JudgePool | None = None,
    ):
        """``pool``: judge with this one (its settings stand) rather than make one."""
        if pool is not None:
            self.pool = pool
            return
        from kernelfix.library.api import judge_config
        from kernelfix.tools.judge import resolve_device

        cfg = judge_config(config, device=device)
        resolved, _ = resolve_device(cfg.device)
        cfg = cfg.model_copy(update={"device": resolved})
        # No bound on the queue: a trainer waits for its rewards rather than being told to come back.
        self.pool = JudgePool(
            cfg, gpus=gpu_slots(gpus, resolved), per_gpu=per_gpu, queue=None, judges_per_gpu=judges_per_gpu
        )

    def judge(self, requests: Sequence[JudgeRequest]) -> list[Outcome]:
        return self.pool.judge(requests)

    def close(self) -> None:
        self.pool.close()


class Remote:
    """Judges on a ``kernelfix serve`` (the token: ``token``, ``token_file``, $KERNELFIX_TOKEN or the default file)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        token_file: str | os.PathLike[str] | None = None,
        **client_options: Any,
    ):
        from kernelfix.serve.client import JudgeClient

        self.client = JudgeClient(url, token=token, token_file=token_file, **client_options)

    def judge(self, requests: Sequence[JudgeRequest]) -> list[Outcome]:
        return self.client.evaluate_requests(requests)

    def close(self) -> None:
        self.client.close()


def make_backend(url: str | None = None, **options: Any) -> Backend:
    """A ``Remote`` for a URL (options: token, token_file), else an ``InProcess`` judge (config, device, gpus, per_gpu)."""
    options = {k: v for k, v in options.items() if v is not None}
    if not url:
        return InProcess(**options)
    local = sorted(set(options) - {"token", "token_file"})
    if local:
        raise ValueError(
            f"{', '.join(local)}: settings of the judge in this process; a server judges with its own (kernelfix serve's flags)"
        )
    return Remote(url, **options)


_shared: dict[str, Backend] = {}
_shared_lock = threading.Lock()


def shared_backend(settings: Mapping[str, Any]) -> Backend:
    """One backend per distinct settings in this process, kept for its life (a function-style reward,
    verl's, is called afresh for every sample: its judges must outlive the call)."""
    key = repr(sorted(settings.items()))
    with _shared_lock:
        if key not in _shared:
            _shared[key] = make_backend(**settings)
        return _shared[key]


@atexit.register
def _close_shared() -> None:
    for backend in _shared.values():
        try:
            backend.close()
        except Exception:
            pass
    _shared.clear()
