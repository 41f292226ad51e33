"""[judge] What each of the judge's workers may see, write and use: environment, isolation, limits.

The reference worker writes only the judge's private directory and its own
compiler caches (torch.compile of the reference: Inductor's and Triton's, under
``judge/`` in the cache root), which no candidate can write or even read: a
poisoned cache entry cannot slow a later baseline. A candidate's worker writes
only its evaluation's ``build``, ``tmp``, ``out`` and ``handoff`` directories and
the candidates' compiler caches, and sees neither the judge's private
directory, nor other evaluations', nor the judge's caches, nor credentials.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from kernelfix.base.cache_dir import (
    CACHE_ENV,
    INDUCTOR_CACHE,
    TRITON_CACHE,
    cache_root,
    compiler_caches,
    judge_cache,
    lock_root,
)
from kernelfix.sandbox import Isolation, Limits, scrubbed_env
from kernelfix.sandbox.probes import for_gpu
from kernelfix.tools.config import JudgeConfig

Role = Literal["reference", "candidate"]
CANDIDATE_DIRS = ("build", "tmp", "out", "handoff")  # the only parts of an evaluation's dir its candidate may write


def own_dir(path: Path) -> Path:
    """``path`` as a real directory: whatever candidate code left there (a symlink, a FIFO) is removed first."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    path.mkdir(parents=True, exist_ok=True)
    return path


def env(role: Role, workdir: Path, device: str, gpu: str | None) -> dict[str, str]:
    compiler_cache = judge_cache() if role == "reference" else cache_root()
    own = {  # each worker's own paths (sandbox.zygote.LATE_ENV: read when used, so a fork server serves every worker)
        "HOME": str(workdir / "tmp"),  # the child's HOME is its own tmp dir; the build cache is shared
        "TMPDIR": str(workdir / "tmp"),
        "TORCH_EXTENSIONS_DIR": str(workdir / "build"),
        "TRITON_CACHE_DIR": str(compiler_cache / TRITON_CACHE),
        "TORCHINDUCTOR_CACHE_DIR": str(compiler_cache / INDUCTOR_CACHE),
    }
    for d in ("tmp", "build"):
        own_dir(workdir / d)
    return scrubbed_env({**_shared_env(device, gpu), **own})


def _shared_env(device: str, gpu: str | None) -> dict[str, str]:
    """What every worker of a judge on ``device`` has alike: with the scrubbed environment, what keys its fork server."""
    extra = {CACHE_ENV: str(cache_root())}
    if device == "cpu":
        extra["TRITON_INTERPRET"] = "1"
        extra["CUDA_VISIBLE_DEVICES"] = ""
    elif gpu is not None:
        extra["CUDA_VISIBLE_DEVICES"] = gpu
    return extra


def fork_server_kinds(
    config: JudgeConfig, candidate_code: str | None, device: str, gpu: str | None = None
) -> list[tuple[str, dict[str, str]]]:
    """The fork servers (kind, environment) a judge with ``config`` on ``device`` forks its reference's worker from,
    and, given its source, a candidate's: the ones ``Reference`` and ``CandidateRun`` will ask for (the environment
    outside each worker's own paths is what picks a fork server)."""
    from kernelfix.sandbox.zygote import kind_for_candidate

    if not config.fork_server:
        return []
    shared = scrubbed_env(_shared_env(device, gpu))
    kinds = [("reference", shared)]
    if candidate_code is not None:
        kinds.append((kind_for_candidate(candidate_code), shared))
    return kinds


def start_fork_servers(config: JudgeConfig, candidate_code: str | None, gpu: str | None = None) -> list[str]:
    """Start now the fork servers a judge with ``config`` (its task's overrides applied) will fork its workers from,
    so their imports (numpy and torch: 3 s on the H100's host) overlap the caller's own (``kernelfix eval``: the judge's
    modules, pydantic's models, rich). The device is the config's, else a GPU's where one is likely (torch built for
    CUDA, a driver's device files, devices visible); a guess that proves wrong costs an unused fork server, never a
    wrong worker: each worker picks its fork server by its own environment. The kinds started."""
    from kernelfix.sandbox.process import start_fork_server
    from kernelfix.tools.gpu.lease import cuda_likely

    device = config.device or ("cuda" if cuda_likely() else "cpu")
    started = []
    for kind, shared in fork_server_kinds(config, candidate_code, device, gpu):
        start_fork_server(shared, kind)
        started.append(kind)
    return started


def isolation(
    role: Role,
    config: JudgeConfig,
    *,
    workdir: Path,
    private: Path,
    siblings: list[Path],
    credentials: list[str],
    device: str,
) -> tuple[Isolation, str | None]:
    """The layers for one worker, and a note when the GPU needed some turned off on this machine."""
    base = config.sandbox
    if role == "reference":
        writable = [str(workdir), str(judge_cache())]
        hidden: list[str] = []
    else:
        # Other evaluations' dirs too: a sibling's candidate or logs are not this one's to read.
        writable = [str(workdir / d) for d in CANDIDATE_DIRS] + [str(p) for p in compiler_caches()]
        hidden = [str(private), *map(str, siblings), str(judge_cache()), *_lock_dir_unless_shared(writable)]
    iso = base.model_copy(
        update={"writable": [*writable, *base.writable], "hidden": [*hidden, *credentials, *base.hidden]}
    )
    note = None
    if device == "cuda":
        # The record lives where no candidate can write (judge_cache is hidden from them): a forged
        # one could turn their sandbox's layers off.
        iso, note = for_gpu(iso, record_dir=judge_cache() / "sandbox")
    return iso, note


def _lock_dir_unless_shared(writable: list[str]) -> list[str]:
    """The GPU lease's lock dir, hidden from candidates: read-only is not enough, since ``flock`` needs no
    write access, and a candidate that held the lock or the room queue would stall every other judge's
    GPU work until it was killed. Left visible (read-only) where $KERNELFIX_LOCKS names a directory a
    candidate's own dirs are under."""
    locks = lock_root().resolve()
    if any(Path(w).resolve().is_relative_to(locks) for w in writable):
        return []
    return [str(locks)]


def memory_limit(config: JudgeConfig) -> int:
    if config.memory_limit_gb is not None:
        return int(config.memory_limit_gb * 2**30)
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 16 << 30
    return int(min(total * 3 // 4, 64 << 30))


def limits(config: JudgeConfig, wall_s: float) -> Limits:
    return Limits(
        wall_s=wall_s,
        memory_bytes=memory_limit(config),
        max_processes=config.max_processes,
        output_limit_bytes=int(config.output_limit_mb * 2**20),
    )
