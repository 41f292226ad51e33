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

from kernelfix.sandbox import Isolation, Limits, scrubbed_env
from kernelfix.sandbox.probes import for_gpu
from kernelfix.tools.cache_dir import CACHE_ENV, INDUCTOR_CACHE, TRITON_CACHE, cache_root, compiler_caches, judge_cache, lock_root
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
    cache = cache_root()
    compiler_cache = judge_cache() if role == "reference" else cache
    extra = {
        CACHE_ENV: str(cache),  # the child's HOME is its own tmp dir; the build cache is shared
        "HOME": str(workdir / "tmp"),
        "TMPDIR": str(workdir / "tmp"),
        "TORCH_EXTENSIONS_DIR": str(workdir / "build"),
        "TRITON_CACHE_DIR": str(compiler_cache / TRITON_CACHE),
        "TORCHINDUCTOR_CACHE_DIR": str(compiler_cache / INDUCTOR_CACHE),
    }
    for d in ("tmp", "build"):
        own_dir(workdir / d)
    if device == "cpu":
        extra["TRITON_INTERPRET"] = "1"
        extra["CUDA_VISIBLE_DEVICES"] = ""
    elif gpu is not None:
        extra["CUDA_VISIBLE_DEVICES"] = gpu
    return scrubbed_env(extra)


def isolation(
    role: Role, config: JudgeConfig, *, workdir: Path, private: Path, siblings: list[Path], credentials: list[str], device: str
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
    iso = base.model_copy(update={"writable": [*writable, *base.writable], "hidden": [*hidden, *credentials, *base.hidden]})
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
