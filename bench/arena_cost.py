"""What a 6 GiB GPU arena costs to make and to give back (issue 33: a warm verdict's ``ref_arenas`` and ``release``).

    python3 -P bench/arena_cost.py [--gib 6] [--repeat 5]

In one process, medians of ``--repeat``, milliseconds, the GPU idle between steps: ``cuMemCreate`` and its mapping
(``Arena.create``), exporting its fd, importing and mapping that fd again (as the candidate's worker does), a fill
of every byte (the floor of writing a trial into it), and giving it back (``Arena.release``: a sync, unmap,
release). Beside them torch's allocator: a fresh block and ``empty_cache``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=6.0)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    import torch

    from kernelfix.tools.transport import Arena

    torch.cuda.init()
    size = int(a.gib * 2**30)
    rows: dict[str, list[float]] = {}

    def t(name: str, fn):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        rows.setdefault(name, []).append((time.perf_counter() - t0) * 1e3)
        return out

    for _ in range(a.repeat):
        arena = t("create", lambda: Arena.create(size, "cuda", 0))
        fd = os.dup(arena.fd)
        t("fill", lambda: arena.bytes.fill_(1))
        other = t("open (import, map)", lambda: Arena.open(arena.spec, fd))
        t("close the import", other.release)
        t("release", arena.release)
        x = t("torch.empty", lambda: torch.empty(size, dtype=torch.uint8, device="cuda"))
        del x
        t("empty_cache", torch.cuda.empty_cache)
    out = {k: round(statistics.median(v), 3) for k, v in rows.items()}
    print(json.dumps({"gib": a.gib, "gpu": torch.cuda.get_device_name(0), "ms": out}))


if __name__ == "__main__":
    main()
