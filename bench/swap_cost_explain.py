"""Where a compiled swap's per-call cost goes (issue 35): what Dynamo checks and runs for the swap
that it does not for the kernel called directly.

    python3 -P bench/swap_cost_explain.py --out DIR                              # on the GPU: Inductor
    python3 -P bench/swap_cost_explain.py --device cpu --kernels torch --out DIR  # on the CPU: aot_eager

bench/swap_cost.py measures the added time; this says what it is made of. For each kernel (the
same sessions as swap_cost.py's) three host models `h(x) = m(x)` are compiled with
``fullgraph=True, dynamic=False`` at the short call (64 x 1024):

  kernel       m = the kernel's own module (the swap's ModelNew), called directly;
  passthrough  m = a plain nn.Module whose forward calls the kernel: what any module around it costs;
  swapped      m = kernelfix.load_best(session, original), as it ships;

and for each this writes: the guard tree Dynamo checks before every call (its guards counted by
kind, and the ones Dynamo evaluates in Python), the time of that check alone
(``guard_manager.check``), the per-call time (CUDA events, the three interleaved as in
swap_cost.py), the Python functions a call runs (cProfile, calls per call) and the torch ops it
dispatches (torch.profiler). One text file per kernel; a summary on stdout.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import re
import sys
import tempfile
import time
import timeit
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import swap_cost  # noqa: E402  (bench/ is not a package)

CALLS = 1000  # calls profiled per variant


def guard_kinds(tree: str) -> Counter:
    """The guard tree's leaves by kind (``+- ID_MATCH: ...``), GuardManager nodes left out."""
    return Counter(m.group(1) for m in re.finditer(r"\+- ([A-Z_]+):", tree))


def python_guards(tree: str) -> list[str]:
    """The guards Dynamo evaluates by calling Python: lambda guards and the shape guard function."""
    lines = [ln.strip() for ln in tree.splitlines() if "LAMBDA_GUARD" in ln]
    if "Python shape guard function" in tree or "def ___make_guard_fn" in tree:
        lines.append("(a Python guard function)")
    return lines


def explain(kind: str, session: str, device: str, out: Path) -> dict:
    import torch
    import torch.nn as nn

    import kernelfix

    Host, Passthrough = swap_cost.wrappers()
    swapped = kernelfix.load_best(session, nn.ReLU(), device=device)
    variants = {"kernel": swapped.kernel, "passthrough": Passthrough(swapped.kernel), "swapped": swapped}
    backend = "inductor" if device == "cuda" else "aot_eager"
    modes = {"compiled": dict(backend=backend)}
    if device == "cuda":
        modes["reduce-overhead"] = dict(mode="reduce-overhead")
    r, c = swap_cost.SHAPES["short"]
    x = torch.randn(r, c, device=device)
    path = getattr(swapped, "compile_path", None)
    text = [
        f"# {kind} kernel; under torch.compile: {getattr(path, 'kind', '?')} ({getattr(path, 'note', '')}); "
        f"torch {torch.__version__}, x {list(x.shape)}\n"
    ]
    summary: dict = {}
    for mode, opts in modes.items():
        torch._dynamo.reset()
        hosts = {name: Host(m) for name, m in variants.items()}
        fns = {name: torch.compile(h, fullgraph=True, dynamic=False, **opts) for name, h in hosts.items()}
        with torch.no_grad():
            trees, guard_us = {}, {}
            for name, fn in fns.items():
                trees[name], guard_us[name] = _guards(Host.forward.__code__, fn, hosts[name], x)
            med, added, _ = swap_cost.interleaved_us(fns, x, device, inner=200)
            profiles = {name: _profile(fn, x) for name, fn in fns.items()}
        for name in fns:
            kinds, py = guard_kinds(trees[name]), python_guards(trees[name])
            stats, ops = profiles[name]
            calls = sum(v[1] for v in stats.values()) / CALLS
            summary[f"{name} {mode}"] = {
                "us": med[name],
                "added": added.get(name, 0.0),
                "guard_check_us": guard_us[name],
                "guards": sum(kinds.values()),
                "python_guards": len(py),
                "python_calls": round(calls, 1),
            }
            text.append(
                f"\n## {name} {mode}: {med[name]:.2f} us a call ({added.get(name, 0.0):+.2f} vs kernel, paired), "
                f"guard check {guard_us[name]:.2f} us, {sum(kinds.values())} guards, {len(py)} in Python, "
                f"{calls:.1f} Python function calls\n"
            )
            text.append("guards by kind: " + ", ".join(f"{k} {v}" for k, v in kinds.most_common()) + "\n")
            text.extend(f"python guard: {ln}\n" for ln in py)
            text.append("torch ops per call: " + ", ".join(f"{k} x{v:g}" for k, v in sorted(ops)) + "\n")
            if name != "kernel":
                text.append(
                    f"Python calls {name} makes that kernel does not (per call):\n"
                    + _diff(profiles["kernel"][0], stats)
                )
            text.append("Python calls per call:\n" + _per_call(stats))
            if mode == "compiled":
                text.append("\nguard tree:\n" + _short(trees[name]) + "\n")
    (out / f"explain_{kind}.txt").write_text("".join(text))
    return summary


def _guards(code, fn, host, x) -> tuple[str, float]:
    """The guard tree of the cache entry ``fn``'s first call adds, and the time of its check alone (us)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    before = {id(e) for e in _debug_get_cache_entry_list(code)}
    fn(x)
    new = [e for e in _debug_get_cache_entry_list(code) if id(e) not in before]
    try:
        gm = new[0].guard_manager
        frame_locals = {"self": host, "x": x}
        assert gm.check(frame_locals), "the entry's guards fail on its own call"
        n = 20000
        return str(gm), min(timeit.repeat(lambda: gm.check(frame_locals), number=n, repeat=7)) / n * 1e6
    except Exception as e:  # noqa: BLE001 - a torch without these internals: the timings still say it
        return f"(no guard tree: {type(e).__name__}: {e})", float("nan")


def _profile(fn, x) -> tuple[dict, list]:
    """The Python functions CALLS calls run (cProfile's stats) and the torch ops 100 calls dispatch, per call."""
    import torch

    for _ in range(50):
        fn(x)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(CALLS):
        fn(x)
    prof.disable()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
        for _ in range(100):
            fn(x)
    return pstats.Stats(prof).stats, [(e.key, e.count / 100) for e in p.key_averages()]


def _where(key: tuple) -> str:
    file, line, func = key
    return (f"{file}:{line}({func})" if line else func)[-120:]


def _diff(base: dict, stats: dict) -> str:
    """Functions called more often per call than in ``base``, with the own time they add."""
    rows = []
    for key, (_, ncalls, tottime, _, _) in stats.items():
        b = base.get(key)
        more = ncalls - (b[1] if b else 0)
        if more > 0:
            rows.append((tottime - (b[2] if b else 0), more, key))
    rows.sort(key=lambda r: -r[0])
    return (
        "".join(
            f"  {more / CALLS:+7.2f} calls {own / CALLS * 1e6:+7.2f} us own  {_where(key)}\n"
            for own, more, key in rows[:40]
        )
        or "  (none)\n"
    )


def _per_call(stats: dict) -> str:
    """cProfile's functions, heaviest own time first, per call profiled."""
    rows = []
    for key, (_, ncalls, tottime, cumtime, _) in sorted(stats.items(), key=lambda kv: -kv[1][2])[:60]:
        rows.append(
            f"  {ncalls / CALLS:7.2f} calls {tottime / CALLS * 1e6:7.2f} us own {cumtime / CALLS * 1e6:7.2f} us cum  {_where(key)}\n"
        )
    return "".join(rows)


def _short(tree: str) -> str:
    """The guard tree with the source comments cut (each line's `# file:line in code`)."""
    return "\n".join(ln.split("  # ")[0][:220] for ln in tree.splitlines())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"])
    ap.add_argument("--kernels", nargs="+", choices=["triton", "cuda", "torch"])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        swap_cost.SHAPES.update(short=(8, 8), long=(512, 2048))
    kinds = args.kernels or (["triton", "cuda"] if device == "cuda" else ["torch"])
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    sessions = swap_cost.prepare(Path(tempfile.mkdtemp(prefix="kf-swap-explain-")), device, kinds)
    for kind, session in sessions.items():
        s = explain(kind, session, device, args.out)
        for name, v in s.items():
            print(
                f"{kind:7s} {name:28s} {v['us']:8.2f} us ({v['added']:+6.2f})  guard check {v['guard_check_us']:5.2f} us  "
                f"{v['guards']:3d} guards ({v['python_guards']} in Python)  {v['python_calls']:6.1f} Python calls a call",
                flush=True,
            )
    print(
        f"swap-explain: wrote {', '.join(f'explain_{k}.txt' for k in kinds)} to {args.out} in {time.monotonic() - t0:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
