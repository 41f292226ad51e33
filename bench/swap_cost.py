"""What a swap costs per call, above the kernel's own time (issue 35), eager and compiled.

    python3 -P bench/swap_cost.py                                 # on the GPU
    python3 -P bench/swap_cost.py --old /tmp/oldkf                # and the landed kernelfix, in a process of its own
    python3 -P bench/swap_cost.py --device cpu --kernels torch    # a smoke run on the CPU (wall clock)

A user's script runs a ReLU module at two shapes: a short call (64 x 1024, launch-bound: what a
call costs on the host is what it costs) and a long one (4096 x 8192, 128 MiB each way, where
the GPU's time hides the host's). `kernelfix capture --calls all` lifts it into a task, and a
session's best.py is written for each kernel (no model is run here, the kernels are given):

- triton: examples/candidates/relu_triton.py (one @triton.jit kernel);
- cuda: examples/candidates/relu_cuda_fast.py (load_inline, the fast layout);
- torch: the same in torch ops (the CPU smoke run; not a kernel the judge would pass).

For each, in one process, the same call is timed on a host model `h(x) = m(x)` where `m` is
  kernel        the kernel's own module, called directly (the baseline: eager, best.py imported as the
                judge ran it; compiled, the swap's own ModelNew),
  kernel-fg-off the same compiled without fullgraph (compiled modes): what fullgraph=True itself costs,
  passthrough   a plain nn.Module whose forward calls the kernel: what any module around it costs,
  swapped       kernelfix.load_best(session, original): the swap as it ships,
  custom_op     kernelfix.load_best(..., trace=False): the compiled path through the opaque operator,
eager, under torch.compile(fullgraph=True) and under torch.compile(mode="reduce-overhead", fullgraph=True)
(CUDA graphs), every variant of a mode compiled with the same options (without fullgraph where the kernel's
own module breaks the graph: the landed kernelfix's pybind extension). Each number is the median over 31 repetitions of the mean time of 200 back-to-back calls
between CUDA events (on the CPU the minimum, by the wall clock), the variants of one mode timed in the
same repetitions in rotating order, the garbage collector off; "added" is the median over the
repetitions of the variant's time minus the kernel's in that repetition (same process, same mode), with
its 95% confidence interval (order statistics of the paired differences): an interval that holds 0 is
an added cost this run cannot tell from none. With --old, the landed kernelfix (installed at that
path) is timed the same way in a process of its own, on a capture and sessions it writes itself (its
kernel baseline measured there too). bench/swap_cost_explain.py says what the compiled difference is
made of (guards, Python calls, ops).

Prints a table per kernel, the added cost per short call with its interval, and `swap-cost: OK` when
the swapped model matched the kernel's output in every mode (and, for the goal, the added eager cost is
at most 5 us per call; compiled, "none measurable" when every interval holds 0).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPES = {"short": (64, 1024), "long": (4096, 8192)}  # on the CPU: 8 x 8 and 512 x 2048
SCRIPT = """
import sys
import torch
import torch.nn as nn

class Act(nn.Module):
    def forward(self, x):
        return torch.relu(x)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = Act()
    def forward(self, xs):
        return [self.act(x) for x in xs]

device, shapes = sys.argv[1], [tuple(map(int, s.split("x"))) for s in sys.argv[2:]]
model = Net()
with torch.no_grad():
    model([torch.randn(*s, device=device) for s in shapes])
"""
# ModelNew takes the captured weights' path, as a captured task's does (the ReLU has none).
TAKES_WEIGHTS = """

class ModelNew(nn.Module):
    def __init__(self, weights=None):
        super().__init__()

    def forward(self, x):
        return {call}
"""
TORCH_KERNEL = """
import torch
import torch.nn as nn
""" + TAKES_WEIGHTS.format(call="torch.clamp_min(x, 0.0)")


def kernel_source(kind: str) -> str:
    if kind == "torch":
        return TORCH_KERNEL
    name, call = {"triton": ("relu_triton.py", None), "cuda": ("relu_cuda_fast.py", "relu_ext.relu_cuda(x)")}[kind]
    text = (ROOT / "examples" / "candidates" / name).read_text()
    head = text[: text.index("class ModelNew")]
    if kind == "triton":  # the example's forward, with the weights argument
        body = text[text.index("    def forward") :]
        return (
            head
            + "\n\nclass ModelNew(nn.Module):\n    def __init__(self, weights=None):\n        super().__init__()\n\n"
            + body
        )
    return head + TAKES_WEIGHTS.format(call=call)


def prepare(work: Path, device: str, kinds: list[str]) -> dict[str, str]:
    """The capture and one session per kernel; their folders by kind."""
    from kernelfix.agent.agent_config import AgentConfig
    from kernelfix.agent.session_dir import SessionDir
    from kernelfix.capture.pipeline import capture
    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tools.task import Task

    script = work / "user.py"
    script.write_text(SCRIPT)
    task = work / "act.py"
    shapes = [f"{r}x{c}" for r, c in SHAPES.values()]
    capture(script, "model.act", task, calls="all", script_args=[device, *shapes], force=True)
    sessions = {}
    for kind in kinds:
        d = work / f"session_{kind}"
        SessionDir.create(
            d, task=Task.load(task), model="replay:none", agent=AgentConfig(), judge=JudgeConfig(device=device)
        )
        (d / "best.py").write_text(kernel_source(kind))
        sessions[kind] = str(d)
    return sessions


def per_call_us(fn, x, device: str, inner: int = 200) -> float:
    """One repetition: the mean time of ``inner`` back-to-back calls (CUDA events on the GPU, the wall clock on the CPU)."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn(x)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1e3 / inner
    t0 = time.perf_counter()
    for _ in range(inner):
        fn(x)
    return (time.perf_counter() - t0) * 1e6 / inner


def interleaved_us(
    fns: dict, x, device: str, inner: int, reps: int = 31
) -> tuple[dict[str, float], dict[str, float], dict[str, tuple[float, float]]]:
    """Every variant timed in the same repetitions, their order rotating, so that drift (clocks, the host's
    neighbours) falls on all alike: per variant the median, its median paired difference from the first
    variant (the kernel) over the repetitions, and that median's 95% confidence interval (on the GPU). The
    garbage collector is off while they run (what lived before, frozen), so that no collection lands on one
    variant's time."""
    import gc

    names = list(fns)
    for fn in fns.values():
        for _ in range(20):
            fn(x)
    samples: dict[str, list[float]] = {n: [] for n in names}
    enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        for r in range(reps):
            for n in names[r % len(names) :] + names[: r % len(names)]:
                samples[n].append(per_call_us(fns[n], x, device, inner))
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()
    # The CPU box is shared: its minimum is the call's cost, its median mostly the neighbours'.
    pick = statistics.median if device == "cuda" else min
    base = names[0]
    if device == "cuda":
        diffs = {n: [a - b for a, b in zip(samples[n], samples[base])] for n in names[1:]}
        added = {n: statistics.median(d) for n, d in diffs.items()}
        ci = {n: median_ci(d) for n, d in diffs.items()}
    else:  # paired differences carry the neighbours' noise twice: the minima's difference instead
        added = {n: min(samples[n]) - min(samples[base]) for n in names[1:]}
        ci = {}
    return {n: pick(v) for n, v in samples.items()}, added, ci


def median_ci(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval of the median: the order statistics k and n-k+1 (1-based) of
    the sorted values, k the largest with P(Binomial(n, 1/2) < k) <= (1 - level) / 2."""
    from math import comb

    v = sorted(values)
    n = len(v)
    k, below = 0, 0.0
    while True:
        p = comb(n, k) / 2**n
        if below + p > (1 - level) / 2:
            break
        below += p
        k += 1
    k = max(k, 1)
    return v[k - 1], v[n - k]


def wrappers():
    """The modules a swap is measured inside: ``Host`` (a model around a kernel, as a user's model holds one) and
    ``Passthrough`` (a plain module around the kernel: what any module level costs a call). Shared with
    swap_cost_explain.py, so both measure the same wrappers."""
    import torch.nn as nn

    class Host(nn.Module):
        def __init__(self, m: nn.Module):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x)

    class Passthrough(nn.Module):
        def __init__(self, kernel: nn.Module):
            super().__init__()
            self.kernel = kernel

        def forward(self, x):
            return self.kernel(x)

    return Host, Passthrough


def measure(sessions: dict[str, str], device: str, label: str) -> dict:
    """Every kernel's times in this process, as {kind: {"variant mode shape": us}} plus the paths taken."""
    import torch
    import torch.nn as nn

    import kernelfix

    Host, Passthrough = wrappers()

    has_trace = "trace" in inspect.signature(kernelfix.load_best).parameters
    backend = "inductor" if device == "cuda" else "aot_eager"
    # dynamic=False: each shape its own static graph, for the kernel as for the swap (whose guards fix shapes anyway)
    modes = {"eager": None, "compiled": dict(backend=backend, dynamic=False)}
    if device == "cuda":
        modes["reduce-overhead"] = dict(mode="reduce-overhead", dynamic=False)
    out: dict = {"label": label, "kernels": {}}
    for kind, session in sessions.items():
        t0 = time.monotonic()
        swapped = kernelfix.load_best(
            session, nn.ReLU(), device=device
        )  # the original: the user's ReLU, for other shapes
        load_s = time.monotonic() - t0
        plain = plain_kernel(session, device)
        variants = {"kernel": plain, "passthrough": Passthrough(plain), "swapped": swapped}
        if has_trace:
            variants["custom_op"] = kernelfix.load_best(session, nn.ReLU(), device=device, trace=False)
        path = getattr(swapped, "compile_path", None)
        # Every variant of a compiled mode is compiled alike: fullgraph=True costs each compiled call a few us of
        # Dynamo's own (its wrapper reads a config value and sets and resets its fullgraph bookkeeping around the
        # frame: torch 2.13's compile_wrapper), once per call of the whole compiled model, whatever it holds; a
        # kernel baseline without it and a swap with it would put that on the swap. Where the kernel's own module cannot compile whole (the landed kernelfix's extension: pybind
        # calls, a graph break), every variant compiles without fullgraph. "kernel-fg-off": the kernel compiled
        # without fullgraph beside the rest, what fullgraph itself costs a call.
        fullgraph = path is not None and path.kind == "traced"
        row: dict = {
            "load_s": round(load_s, 2),
            "fullgraph": fullgraph,
            "path": path.model_dump(exclude={"checks"})
            if path is not None
            else {"kind": "custom_op", "op": swapped.op_name},
        }
        times, added, ci, ok = {}, {}, {}, True
        for mode, opts in modes.items():
            torch._dynamo.reset()
            fns = {}
            for name, m in list(variants.items()) + (
                [("kernel-fg-off", plain)] if opts is not None and fullgraph else []
            ):
                if mode == "eager" and name == "custom_op":
                    continue  # eager never takes the operator now
                if mode != "eager" and name in ("kernel", "passthrough", "kernel-fg-off"):
                    # Compiled, the kernel is the swap's own ModelNew: for a CUDA extension its functions are then
                    # the C++ operators load_best registered (with the landed kernelfix, pybind calls).
                    m = Passthrough(swapped.kernel) if name == "passthrough" else swapped.kernel
                host = Host(m)
                fns[name] = (
                    host
                    if opts is None
                    else torch.compile(host, **opts, fullgraph=fullgraph and name != "kernel-fg-off")
                )
            for shape, (r, c) in SHAPES.items():
                x = torch.randn(r, c, device=device)
                with torch.no_grad():
                    for fn in fns.values():
                        ok &= bool(torch.equal(fn(x), torch.relu(x)))
                    med, diff, interval = interleaved_us(fns, x, device, inner=200 if shape == "short" else 20)
                for name in fns:
                    times[f"{name} {mode} {shape}"] = med[name]
                    if name in diff:
                        added[f"{name} {mode} {shape}"] = diff[name]
                    if name in interval:
                        ci[f"{name} {mode} {shape}"] = interval[name]
        row["times"], row["added"], row["ci"], row["ok"] = times, added, ci, ok
        row["fallbacks"] = swapped.fallbacks
        out["kernels"][kind] = row
    return out


def plain_kernel(session: str, device: str):
    """The session's ModelNew as the judge ran it: best.py imported as it is (its extension's pybind functions)."""
    from kernelfix.capture.files import import_file
    from kernelfix.capture.swap import SessionKernel

    sk = SessionKernel(session)
    task = import_file(sk.store.task_path, "swap_cost_task")
    return import_file(sk.best, "swap_cost_best").ModelNew(*task.get_init_inputs()).to(device)


def report(results: list[dict]) -> bool:
    ok = True
    for res in results:
        for kind, row in res["kernels"].items():
            t = row["times"]
            path = row["path"]
            print(
                f"\n{res['label']}: {kind} kernel, loaded in {row['load_s']} s; compiled with fullgraph={row.get('fullgraph')}; under torch.compile: {path.get('kind')}"
                + (f" ({', '.join(path.get('kernels') or [])})" if path.get("kernels") else "")
                + (f" [{path.get('note')}]" if path.get("note") else "")
            )
            modes = sorted({k.split()[1] for k in t}, key=["eager", "compiled", "reduce-overhead"].index)
            print(
                f"  {'us per call':<26}"
                + "".join(f"{s + ' ' + str(SHAPES[s][0]) + 'x' + str(SHAPES[s][1]):>24}" for s in SHAPES)
            )
            for mode in modes:
                base = {s: t.get(f"kernel {mode} {s}") for s in SHAPES}
                for name in ("kernel", "kernel-fg-off", "passthrough", "swapped", "custom_op"):
                    if f"{name} {mode} short" not in t:
                        continue
                    cells = []
                    for s in SHAPES:
                        v = t[f"{name} {mode} {s}"]
                        d = row.get("added", {}).get(f"{name} {mode} {s}", v - base[s])  # paired, where measured so
                        cells.append(
                            f"{v:9.2f}" + ("" if name == "kernel" else f" ({d:+7.2f}, {(base[s] + d) / base[s]:4.2f}x)")
                        )
                    print(f"  {name + ' ' + mode:<26}" + "".join(f"{c:>24}" for c in cells))
            ok &= row["ok"]
            if not row["ok"]:
                print("  MISMATCH: the swapped model's output differs from torch.relu")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"])
    ap.add_argument(
        "--kernels",
        nargs="+",
        choices=["triton", "cuda", "torch"],
        help="default: triton cuda on the GPU, torch on the CPU",
    )
    ap.add_argument(
        "--old", type=Path, help="an install of the landed kernelfix (pip --target): timed in a process of its own"
    )
    ap.add_argument("--json", type=Path, help="write the raw numbers here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # sessions JSON: time them in this process and print JSON
    args = ap.parse_args()
    if args.worker:
        spec = json.loads(args.worker)
        SHAPES.update({k: tuple(v) for k, v in spec["shapes"].items()})
        # Its own capture and sessions, written by the kernelfix under test (the two versions' session files differ).
        sessions = prepare(Path(spec["work"]), spec["device"], spec["kinds"])
        print("RESULT " + json.dumps(measure(sessions, spec["device"], spec["label"])))
        return 0
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        SHAPES.update(short=(8, 8), long=(512, 2048))
    kinds = args.kernels or (["triton", "cuda"] if device == "cuda" else ["torch"])
    work = Path(tempfile.mkdtemp(prefix="kf-swap-cost-"))
    t0 = time.monotonic()
    print(
        f"swap-cost on {device} ({torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}, torch {torch.__version__}); files in {work}",
        flush=True,
    )
    sessions = prepare(work, device, kinds)
    results = []
    if args.old:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(args.old), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
            ),
        }
        (work / "landed").mkdir()
        spec = json.dumps(
            {
                "work": str(work / "landed"),
                "kinds": kinds,
                "device": device,
                "label": "landed kernelfix",
                "shapes": SHAPES,
            }
        )
        run = subprocess.run(
            [sys.executable, "-P", __file__, "--worker", spec], capture_output=True, text=True, env=env, timeout=900
        )
        line = next((ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            print(f"the landed kernelfix's run failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
        else:
            results.append(json.loads(line[7:]))
    results.append(measure(sessions, device, "this kernelfix"))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    good = report(results)
    new = results[-1]["kernels"]
    eager_added = {k: r["added"]["swapped eager short"] for k, r in new.items()}
    print("\nadded per swapped call, short calls (this kernelfix), median paired difference [95% interval]:")
    unresolved = []
    for kind, r in new.items():
        cells = []
        for mode in ("eager", "compiled", "reduce-overhead"):
            key = f"swapped {mode} short"
            if key not in r["added"]:
                continue
            lo_hi = r.get("ci", {}).get(key)
            cells.append(
                f"{mode} {r['added'][key]:+.2f} us" + (f" [{lo_hi[0]:+.2f}, {lo_hi[1]:+.2f}]" if lo_hi else "")
            )
            if mode != "eager" and lo_hi and lo_hi[0] > 0:
                unresolved.append(f"{kind} {mode}")
        floor = r.get("ci", {}).get("passthrough compiled short")
        print(
            f"  {kind}: "
            + ", ".join(cells)
            + (
                f"; a plain module around the kernel, compiled: {r['added']['passthrough compiled short']:+.2f} us [{floor[0]:+.2f}, {floor[1]:+.2f}]"
                if floor
                else ""
            )
        )
    met = all(v <= 5.0 for v in eager_added.values())
    if new and all(r.get("ci") for r in new.values()):
        print(
            "compiled: "
            + (
                "none measurable (every interval holds 0)"
                if not unresolved
                else "measurable in " + ", ".join(unresolved)
            )
        )
    print(
        f"swap-cost: {'OK' if good else 'FAILED'}{'' if met else ' (eager added cost above the 5 us goal)'} in {time.monotonic() - t0:.0f} s"
    )
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
