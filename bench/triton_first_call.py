"""What a fresh candidate worker's first call of a cached Triton kernel costs, and what doing things ahead takes off.

    python3 -P bench/triton_first_call.py --out OUT.json [--candidate C.py] [--numel N] [--repeat 2]

Runs on the GPU (docs/service.md quotes it: where a warm verdict's ``correctness.cand_forward_first`` goes). Each
case is a fresh process, as each verdict's candidate worker is: torch and Triton imported and CUDA up (what a
standby worker has before its candidate arrives: ``torch.cuda.current_stream()``, as ``Cuda.bind``), then what is
done ahead, then the candidate's first forward and a second one on a 1-D float32 input of ``--numel`` elements
(default 19_ReLU's 4096 x 393216: 6 GiB in, 6 GiB out). Cases, each adding to the last:

- ``none``: nothing ahead (before issue 33's work);
- ``key``: Triton's ``triton_key()`` (the fork servers compute it: tools/workers/candidate/ahead.py);
- ``driver``: and Triton's driver, target and backend key (the standby worker: ``triton_driver_ahead``);
- ``alloc``: and an output-sized tensor allocated and freed first (not something the judge does: it shows what
  the first call's ``torch.empty_like`` pays the driver for fresh memory);
- ``recorder``: ``driver``'s, with both calls under the judge's op recorder (``OpRecorder.run``, as a trial's
  forward runs): what the recorder adds to a first call;
- ``profile``: ``recorder``'s, the first call under cProfile (its 30 costliest functions by cumulative time printed).

A first process compiles the kernel into the cache directory the others read (a cached build, as in the bench
``serve-latency``). Prints each case's median first call, its ahead steps and the second call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ("none", "key", "driver", "alloc", "recorder", "profile")

CHILD = r"""
import importlib.util, json, sys, time
t = time.perf_counter
case, path, numel = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = {}
t0 = t(); import torch, triton, triton.language, triton.compiler; s["import"] = t() - t0
t0 = t(); torch.cuda.current_stream(); torch.cuda.synchronize(); s["cuda_up"] = t() - t0
from kernelfix.tools.workers.candidate import ahead
if case in ("key", "driver", "alloc", "recorder", "profile"):
    t0 = t(); ahead.triton_key_ahead(); s["ahead_key"] = t() - t0
if case in ("driver", "alloc", "recorder", "profile"):
    t0 = t(); ok = ahead.triton_driver_ahead(); s["ahead_driver"] = t() - t0; s["driver_ok"] = ok
spec = importlib.util.spec_from_file_location("cand", path); mod = importlib.util.module_from_spec(spec)
t0 = t(); spec.loader.exec_module(mod); model = mod.ModelNew().cuda(); s["candidate_import"] = t() - t0
x = torch.randn(numel, device="cuda"); torch.cuda.synchronize()
if case == "alloc":
    t0 = t(); y = torch.empty_like(x); del y; torch.cuda.synchronize(); s["ahead_alloc"] = t() - t0
call = model
if case in ("recorder", "profile"):
    from kernelfix.tools.workers.candidate.recorder import OpRecorder
    rec = OpRecorder(); call = lambda x: rec.run(model, x)
if case == "profile":  # the first call under cProfile: where its time goes, function by function (printed to stderr)
    import cProfile, io, pstats
    prof = cProfile.Profile()
    t0 = t(); prof.enable(); y = call(x); torch.cuda.synchronize(); prof.disable(); s["first_call"] = t() - t0
    buf = io.StringIO(); pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(45); sys.stderr.write(buf.getvalue())
else:
    t0 = t(); y = call(x); torch.cuda.synchronize(); s["first_call"] = t() - t0
del y
t0 = t(); y = call(x); torch.cuda.synchronize(); s["second_call"] = t() - t0
print(json.dumps(s))
"""


def one(case: str, candidate: str, numel: int, env: dict[str, str]) -> dict:
    # -P: run from the repo root, the source tree's kernelfix/ must not shadow the installed package
    out = subprocess.run(
        [sys.executable, "-P", "-c", CHILD, case, candidate, str(numel)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if out.returncode != 0:
        raise SystemExit(f"{case}: exit {out.returncode}\n{out.stderr[-3000:]}")
    if case == "profile":
        print(out.stderr[-6000:], flush=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--candidate", default=str(ROOT / "bench" / "candidates" / "relu_triton.py"))
    ap.add_argument("--numel", type=int, default=4096 * 393216)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="kf-triton-first-call-")
    # Each case is a fresh interpreter: its imports' bytecode kept apart (an install without .pyc files under
    # PYTHONDONTWRITEBYTECODE imports torch from source, ten seconds a case), as the judge's fork servers keep theirs.
    env = {
        **os.environ,
        "TRITON_CACHE_DIR": cache,
        "PYTHONPYCACHEPREFIX": tempfile.mkdtemp(prefix="kf-first-call-pyc-"),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    compiled = one("none", a.candidate, a.numel, env)  # fills the cache: every case after reads it
    rows = {c: [one(c, a.candidate, a.numel, env) for _ in range(a.repeat)] for c in CASES}
    import torch

    summary = {}
    for c, rs in rows.items():
        summary[c] = {k: round(statistics.median(r[k] for r in rs), 4) for k in rs[0] if isinstance(rs[0][k], float)}
    result = {
        "candidate": Path(a.candidate).name,
        "numel": a.numel,
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "compile_run": compiled,
        "summary": summary,
        "rows": rows,
    }
    Path(a.out).write_text(json.dumps(result, indent=1))
    print(
        f"{result['candidate']} first call in a fresh process on {result['gpu']} (median of {a.repeat}; kernel cached; seconds)"
    )
    for c in CASES:
        s = summary[c]
        ahead = {k[6:]: v for k, v in s.items() if k.startswith("ahead_")}
        print(
            f"  {c:7s} first call {s['first_call']:.4f}  second {s['second_call']:.4f}  ahead {ahead}  cuda_up {s['cuda_up']:.3f}"
        )
    print(f"  the compiling run's first call: {compiled['first_call']:.3f} s")


if __name__ == "__main__":
    main()
