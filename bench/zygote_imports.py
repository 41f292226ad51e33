"""Where the fork server's start goes on this machine: each preload's import timed, whether it made
later forks refuse CUDA, and which torch.cuda calls it made (with the first caller's frame); then
each kind of fork server (zygote.PRELOADS: the reference's, a Triton or a CUDA candidate's, all)
started for real, one at a time, and the reference's and a Triton candidate's side by side, as a
judge starts them: the seconds until each said it was ready.

    python3 -P bench/zygote_imports.py        # as the workers' environment has it (no bytecode written)

Found with it (docs/judge.md): torch.utils.cpp_extension calls torch.cuda.is_available() at import.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

sys.dont_write_bytecode = os.environ.get("PYTHONDONTWRITEBYTECODE", "1") != ""
t_start = time.monotonic()
import numpy  # noqa: E402,F401
import torch  # noqa: E402

from kernelfix.sandbox import fork_cuda, zygote  # noqa: E402

calls: list[tuple[str, str]] = []


def watch(mod, name: str) -> None:
    f = getattr(mod, name, None)
    if f is None:
        return

    def wrapped(*a, **k):
        calls.append((name, traceback.format_stack(limit=4)[0].strip()))
        return f(*a, **k)

    setattr(mod, name, wrapped)


for n in ("_cuda_getDeviceCount", "_cuda_init"):
    watch(torch._C, n)
for n in ("device_count", "is_available", "_lazy_init", "get_device_capability", "get_device_properties"):
    watch(torch.cuda, n)
print(f"numpy + torch: {time.monotonic() - t_start:.3f} s")
for name in [*zygote.PRELOAD[2:], "torch._dynamo"]:  # dynamo: no longer preloaded, its cost for the record
    n0 = len(calls)
    t0 = time.monotonic()
    __import__(name)
    dt = time.monotonic() - t0
    made = calls[n0:]
    print(
        f"import {name:45s} {dt:6.3f} s  forks poisoned after it: {fork_cuda.fork_poisoned()}  torch.cuda calls: {[c[0] for c in made]}"
    )
    if made:
        print(f"    first caller: {made[0][1]}")
print(f"total {time.monotonic() - t_start:.3f} s")


def fork_servers(kinds: list[str]) -> dict[str, float]:
    """Start a fork server of each kind at once (fresh ones: their own environment key) and wait for each."""
    from kernelfix.sandbox import scrubbed_env
    from kernelfix.sandbox.process import start_fork_server

    env = scrubbed_env({"KERNELFIX_BENCH_RUN": str(time.monotonic())})  # a key no earlier fork server has
    t0 = time.monotonic()
    for kind in kinds:
        start_fork_server(env, kind)
    out = {}
    for kind in kinds:
        z = zygote._zygotes[zygote.key(sys.executable, env, kind)]
        z.ready.wait(300)
        out[kind] = round(time.monotonic() - t0, 3)
        print(
            f"  fork server {kind:9s} ready after {out[kind]:6.3f} s (its own count {z.info.get('seconds')} s; error {z.error})",
            flush=True,
        )
    return out


print("fork servers, one at a time:")
for kind in ("reference", "triton", "cuda", "all"):
    fork_servers([kind])
print("the reference's and a Triton candidate's, side by side (as a judge starts them):")
fork_servers(["reference", "triton"])
zygote.shutdown()
