"""A naive same-process harness: what a script or an RL reward loop writes first, the yardstick for
a cold ``kernelfix eval`` (bench/cold_eval.py). As KernelBench's eval does it: the task and the
candidate imported into one process, 5 correctness trials under fresh seeds against Model with
atol = rtol = 1e-4, then (on a GPU) 100 timed forwards with CUDA events after a warm-up. No
sandbox, no second process, no float64 reference, no varied inputs, no op record, no baselines.

    python3 bench/naive_harness.py TASK.py CANDIDATE.py [--device cuda|cpu]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time

T0 = time.perf_counter()


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("task")
    ap.add_argument("candidate")
    ap.add_argument("--device", default=None)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--timed", type=int, default=100)
    args = ap.parse_args()
    if args.device == "cpu":  # Triton runs in its interpreter without a GPU, as the judge runs it there
        import os

        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    task, cand = load(args.task, "task"), load(args.candidate, "candidate")
    init = task.get_init_inputs()
    torch.manual_seed(42)
    model = task.Model(*init).to(device)
    torch.manual_seed(42)
    new = cand.ModelNew(*init).to(device)
    ok = True
    with torch.no_grad():
        for trial in range(args.trials):
            torch.manual_seed(trial)
            inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
            ok &= bool(torch.allclose(model(*inputs), new(*inputs), atol=1e-4, rtol=1e-4))
        ms = None
        if device == "cuda":
            for _ in range(3):
                new(*inputs)
            torch.cuda.synchronize()
            times = []
            for _ in range(args.timed):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                new(*inputs)
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b))
            ms = statistics.median(times)
    print(json.dumps({"correct": ok, "median_ms": ms, "seconds": round(time.perf_counter() - T0, 3)}))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
