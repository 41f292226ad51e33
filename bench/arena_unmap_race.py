"""Shows why a GPU arena waits for queued work before it is unmapped (tools/transport/cuda_vmm.py).

    python3 -P bench/arena_unmap_race.py

Runs one scenario twice, each in a fresh process: a kernel queued behind 0.1 s of GPU work
writes an arena whose last reference then dies on the host. With the wait (as shipped), the
process's next forward runs; without it (the wait patched out), cuMemUnmap goes ahead under
the queued kernel, which faults, and the fault surfaces at the next sync, in whatever ran
next: the H100 baseline sweep saw it as "illegal memory access while running Model.forward"
in 17 of 200 KernelBench tasks.
"""

from __future__ import annotations

import subprocess
import sys

SCENARIO = r"""
import gc, sys, torch
from kernelfix.tools.transport import Arena, cuda_vmm
if sys.argv[1] == "unpatched":
    cuda_vmm._synchronize = lambda device: None
torch.cuda.init()
for _ in range(3):
    a = Arena.create(64 << 20, "cuda", 0)
    torch.cuda._sleep(200_000_000)
    a.bytes.fill_(7)
    a.release()
    gc.collect()
try:
    torch.cuda.synchronize()
    x = torch.randn(4096, 4096, device="cuda")
    print("next forward:", "ok" if torch.isfinite(x @ x).all().item() else "not finite")
except Exception as e:
    print("next forward:", type(e).__name__, str(e).splitlines()[0][:120])
"""


def main() -> int:
    for mode in ("with the wait", "unpatched"):
        p = subprocess.run(
            [sys.executable, "-P", "-c", SCENARIO, "unpatched" if mode == "unpatched" else "shipped"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        out = p.stdout.strip() or p.stderr.strip().splitlines()[-1:] or ["(nothing)"]
        print(f"{mode:14s} exit {p.returncode}: {out if isinstance(out, str) else out[0]}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
