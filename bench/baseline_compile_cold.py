"""Where a cold baseline's torch.compile spends its time (issue 33: the throughput bench's cold round).

Each case runs in a fresh interpreter with empty inductor and Triton caches, as a reference worker
does the first time it meets a task: import torch, dynamo and inductor, then the compiled model's
first call (compilation, inductor's compile workers, Triton's builds) and a second call. The cases
differ in what the environment gives it: Python's bytecode (an install without .pyc files under
PYTHONDONTWRITEBYTECODE, as on the lent H100, or a bytecode folder written by an earlier run) and
inductor's compile threads (its default pool of subprocess workers, or 1: compiled in the process).

    python3 -P bench/baseline_compile_cold.py --task tests/kernelbench/level1/23_Softmax.py --out x.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time, runpy
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import torch._dynamo, torch._inductor.compile_fx
t2 = time.perf_counter()
ns = runpy.run_path(sys.argv[1])
torch.manual_seed(0)
model = ns["Model"](*ns["get_init_inputs"]()).cuda()
inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in ns["get_inputs"]()]
torch.cuda.synchronize()
t3 = time.perf_counter()
cm = torch.compile(model)
cm(*inputs)
torch.cuda.synchronize()
t4 = time.perf_counter()
cm(*inputs)
torch.cuda.synchronize()
t5 = time.perf_counter()
from torch._inductor import config as ic
print(json.dumps({"import_torch": t1 - t0, "import_inductor": t2 - t1, "inputs": t3 - t2, "first_call": t4 - t3,
                  "second_call": t5 - t4, "compile_threads": ic.compile_threads, "total": t5 - t0}))
"""


def one(task: str, *, threads: str | None, bytecode: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(
            os.environ,
            TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
            TRITON_CACHE_DIR=os.path.join(tmp, "triton"),
            PYTHONDONTWRITEBYTECODE="1",
        )
        env.pop("TORCHINDUCTOR_COMPILE_THREADS", None)
        if threads is not None:
            env["TORCHINDUCTOR_COMPILE_THREADS"] = threads
        if bytecode is not None:  # read (and, on a first run, written) there, as the fork servers' folder
            env["PYTHONPYCACHEPREFIX"] = bytecode
            env.pop("PYTHONDONTWRITEBYTECODE")
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", CHILD, task], env=env, capture_output=True, text=True, timeout=600)
        wall = time.perf_counter() - t0
    if p.returncode != 0:
        return {"error": p.stderr[-2000:], "wall": wall}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()} | {"wall": round(wall, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", action="append", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    tasks = args.task or ["tests/kernelbench/level1/88_MinGPTNewGelu.py", "tests/kernelbench/level1/23_Softmax.py"]
    results = []
    with tempfile.TemporaryDirectory() as pyc:
        one(tasks[0], threads="1", bytecode=pyc)  # writes the bytecode folder the "bytecode" cases read
        for task in tasks:
            for name, threads, bytecode in [
                ("no bytecode, pool", None, None),
                ("no bytecode, 1 thread", "1", None),
                ("bytecode, pool", None, pyc),
                ("bytecode, 1 thread", "1", pyc),
            ]:
                r = one(task, threads=threads, bytecode=bytecode) | {"task": os.path.basename(task), "case": name}
                results.append(r)
                print(json.dumps(r), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
