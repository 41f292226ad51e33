"""Compile times of CUDA candidates: stock ``load_inline`` against kernelfix's build, side by side.

    python3 bench/compile_bench.py [--out DIR] [--jobs N] [--candidates a,b] [--levers NAME] [--no-levers]

Every build runs in a fresh process through the same hook the judge's child
installs (``kernelfix.tools.build.install``), so the only difference between
"stock" and "kernelfix" is the build options (stock = ``BuildOptions.stock()``:
torch's own ninja build, only redirected into a fresh directory). CUDA is
initialized before the candidate is imported, as in the judge. Phases:

1. setup: one kernelfix build that also makes the machine-level artifacts
   (the precompiled torch header for the binding TU), timed on its own;
2. stock cold: each candidate in a fresh build directory (``--jobs`` at once);
3. kernelfix cold: each candidate never built before: fresh build directory and
   a fresh cache that holds only the setup's precompiled header (``--jobs`` at once);
4. kernelfix warm: the identical candidate again, new process, new build directory;
5. next turn: the candidate with its CUDA source edited (a comment), on the
   cache of phase 3: the binding TU comes from the object cache;
6. levers: one candidate cold with each lever alone (``--levers``, default the first).

Each built extension runs once on the GPU: its output must equal the stock
build's bit for bit and match the PyTorch reference (allclose 1e-2). Writes
compile_bench.json and compile_bench.md under ``--out`` (default $OUT) and
prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
CANDIDATES = HERE / "compile_candidates"
STOCK = {"cache": False, "object_cache": False, "host_pch": False, "split_nvcc": False, "local_arch": False}
ALL = {"cache": True, "object_cache": True, "host_pch": True, "split_nvcc": True, "local_arch": False}  # kernelfix's defaults
LEVERS = {
    "local arch only": {**STOCK, "local_arch": True},
    "host PCH only": {**STOCK, "host_pch": True},
    "split nvcc only": {**STOCK, "split_nvcc": True},
    "kernelfix defaults": ALL,
    "defaults + local arch": {**ALL, "local_arch": True},
}


# --------------------------------------------------------------------------- worker (one build, fresh process)


def worker(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    os.environ["KERNELFIX_CACHE"] = spec["cache"]
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.zeros(1, device="cuda")  # the judge's child has CUDA up before the candidate is imported
    import torch.utils.cpp_extension as ce

    from kernelfix.tools import build
    from kernelfix.tools.config import BuildOptions

    build.install(Path(spec["build_root"]), device, BuildOptions(**spec["options"]))
    calls: list[float] = []
    patched = ce.load_inline

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return patched(*a, **k)
        finally:
            calls.append(time.perf_counter() - t0)

    ce.load_inline = timed
    source = Path(spec["candidate"]).read_text()
    if spec.get("edit"):
        source = source.replace('cuda_source = r"""', 'cuda_source = r"""\n// edited: next turn', 1)
    result: dict = {"error": None, "gpu_required": False}
    import resource

    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    namespace: dict = {"__name__": "bench_candidate"}
    try:
        exec(compile(source, spec["candidate"], "exec"), namespace)
    except build.GpuRequired as e:  # a machine without a GPU: built and linked, not run
        result["gpu_required"] = True
        result["note"] = str(e)[:300]
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {str(e)[-3000:]}"
    result["import_s"] = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds the compilers used: what limits a batch of builds sharing the cores
    result["compiler_cpu_s"] = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    result["load_inline_s"] = sum(calls)
    result["records"] = [r.model_dump() for r in build.records()]
    if result["error"] is None and device == "cuda":
        result.update(_run_once(namespace, spec["output"]))
    print("KF-RESULT " + json.dumps(result), flush=True)


def _run_once(ns: dict, output: str) -> dict:
    import torch

    init = ns["get_init_inputs"]()
    torch.manual_seed(0)
    ref = ns["Model"](*init).cuda()
    torch.manual_seed(0)
    new = ns["ModelNew"](*init).cuda()
    torch.manual_seed(1)
    inputs = [t.cuda() for t in ns["get_inputs"]()]
    with torch.no_grad():
        expected = ref(*inputs)
        got = new(*inputs)
    torch.cuda.synchronize()
    torch.save(got.cpu(), output)
    err = (got - expected).abs().max().item()
    return {"max_abs_err": err, "matches_torch": bool(torch.allclose(got, expected, atol=1e-2, rtol=1e-2))}


# --------------------------------------------------------------------------- driver


def _run_worker(work: Path, tag: str, candidate: Path, options: dict, cache: Path, edit: bool = False) -> dict:
    d = work / tag
    d.mkdir(parents=True, exist_ok=True)
    spec = {
        "candidate": str(candidate),
        "options": options,
        "cache": str(cache),
        "build_root": str(d / "build"),
        "output": str(d / "out.pt"),
        "edit": edit,
    }
    (d / "spec.json").write_text(json.dumps(spec))
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", str(d / "spec.json")], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (d / "log.txt").write_text(p.stdout[-20000:] + "\n--- stderr ---\n" + p.stderr[-20000:])
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("KF-RESULT ")]
    if not lines:
        return {"error": f"worker died (rc {p.returncode}): {p.stderr.strip()[-800:]}", "process_s": wall, "output": None}
    r = json.loads(lines[-1][len("KF-RESULT ") :])
    r["process_s"] = wall
    r["output"] = spec["output"] if Path(spec["output"]).exists() else None
    return r


def _fresh_cache(work: Path, tag: str, pch_from: Path | None) -> Path:
    """A cache with nothing in it but (optionally) the setup's precompiled headers."""
    c = work / "caches" / tag
    (c / "build").mkdir(parents=True, exist_ok=True)
    if pch_from is not None and (pch_from / "build" / "pch").exists():
        (c / "build" / "pch").symlink_to(pch_from / "build" / "pch")
    return c


def _same(a: str | None, b: str | None) -> bool | None:
    if not a or not b:
        return None
    import torch

    return bool(torch.equal(torch.load(a), torch.load(b)))


def _nvcc_steps(r: dict) -> str:
    notes = [n for rec in r.get("records", []) for n in rec.get("notes", []) if "nvcc steps" in n]
    return notes[0].split("nvcc steps: ", 1)[-1] if notes else ""


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="where the JSON and markdown go (default $OUT)")
    ap.add_argument("--jobs", type=int, default=5, help="builds at once in the cold phases (default 5)")
    ap.add_argument("--candidates", help="comma-separated candidate names (default: all in bench/compile_candidates)")
    ap.add_argument("--candidate-dir", default=str(CANDIDATES), help=argparse.SUPPRESS)  # for testing the driver
    ap.add_argument("--levers", help="candidate for the lever breakdown (default: the first)")
    ap.add_argument("--no-levers", action="store_true", help="skip the lever breakdown")
    ap.add_argument("--workdir", help="keep builds here (default: a temp dir)")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return 0

    import torch

    cdir = Path(args.candidate_dir)
    names = args.candidates.split(",") if args.candidates else sorted(p.stem for p in cdir.glob("*.py"))
    cands = {n: cdir / f"{n}.py" for n in names}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="kf-compile-bench-"))
    info = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "jobs": args.jobs,
    }
    try:
        info["nvcc"] = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    except OSError:
        info["nvcc"] = None
    print(json.dumps(info), flush=True)
    t_all = time.perf_counter()
    report: dict = {"info": info, "phases": {}}

    def phase(name: str, fn):
        t0 = time.perf_counter()
        r = fn()
        report["phases"][name] = round(time.perf_counter() - t0, 1)
        print(f"== {name}: {report['phases'][name]} s", flush=True)
        return r

    def parallel(jobs: list[tuple]) -> list[dict]:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            return list(pool.map(lambda j: _run_worker(*j), jobs))

    first = names[0]
    setup_cache = work / "caches" / "setup"
    setup = phase("setup", lambda: _run_worker(work, "setup", cands[first], ALL, setup_cache))
    stock = dict(zip(names, phase("stock cold", lambda: parallel([(work, f"stock-{n}", cands[n], STOCK, _fresh_cache(work, f"stock-{n}", None)) for n in names]))))
    kf_caches = {n: _fresh_cache(work, f"kf-{n}", setup_cache) for n in names}
    cold = dict(zip(names, phase("kernelfix cold", lambda: parallel([(work, f"kf-{n}", cands[n], ALL, kf_caches[n]) for n in names]))))
    warm = phase("kernelfix warm", lambda: {n: _run_worker(work, f"warm-{n}", cands[n], ALL, kf_caches[n]) for n in names})
    turn = phase("next turn", lambda: dict(zip(names, parallel([(work, f"turn-{n}", cands[n], ALL, kf_caches[n], True) for n in names]))))
    levers: dict = {}
    if not args.no_levers:
        lc = args.levers or first
        levers = dict(
            zip(LEVERS, phase("levers", lambda: parallel([(work, f"lever-{i}", cands[lc], opts, _fresh_cache(work, f"lever-{i}", setup_cache)) for i, opts in enumerate(LEVERS.values())])))
        )
        levers = {"candidate": lc, "stock": stock[lc], **levers}

    rows = []
    for n in names:
        s, c, w, t = stock[n], cold[n], warm[n], turn[n]
        ratio = s["load_inline_s"] / c["load_inline_s"] if s.get("load_inline_s") and c.get("load_inline_s") else None
        rows.append(
            {
                "candidate": n,
                "stock_s": s.get("load_inline_s"),
                "kernelfix_cold_s": c.get("load_inline_s"),
                "stock_cpu_s": s.get("compiler_cpu_s"),
                "kernelfix_cold_cpu_s": c.get("compiler_cpu_s"),
                "ratio": ratio,
                "kernelfix_warm_s": w.get("load_inline_s"),
                "warm_cached": bool(w.get("records")) and all(r["cached"] for r in w["records"]),
                "next_turn_s": t.get("load_inline_s"),
                "next_turn_objects_reused": sum(r.get("objects_reused", 0) for r in t.get("records", [])),
                "same_output_as_stock": _same(s.get("output"), c.get("output")),
                "warm_same_output": _same(s.get("output"), w.get("output")),
                "matches_torch": (s.get("matches_torch"), c.get("matches_torch"), w.get("matches_torch")),
                "errors": {k: v.get("error") for k, v in (("stock", s), ("cold", c), ("warm", w), ("turn", t)) if v.get("error")},
                "nvcc_steps": _nvcc_steps(c),
            }
        )
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    warms = [r["kernelfix_warm_s"] for r in rows if r["kernelfix_warm_s"] is not None]
    summary = {
        "median_ratio": statistics.median(ratios) if ratios else None,
        "median_stock_s": statistics.median([r["stock_s"] for r in rows if r["stock_s"]]) if rows else None,
        "median_kernelfix_cold_s": statistics.median([r["kernelfix_cold_s"] for r in rows if r["kernelfix_cold_s"]]) if rows else None,
        "max_warm_s": max(warms) if warms else None,
        "setup_s": setup.get("load_inline_s"),
        "total_s": round(time.perf_counter() - t_all, 1),
    }
    report.update(rows=rows, summary=summary, levers=levers, setup=setup, raw={"stock": stock, "cold": cold, "warm": warm, "turn": turn})

    md = [
        f"GPU {info['gpu']}, {info['cpus']} CPUs, torch {info['torch']} (CUDA {info['cuda']}), {info['nvcc']}; {args.jobs} builds at once in the cold phases.",
        "",
        "| candidate | stock cold s (CPU s) | kernelfix cold s (CPU s) | ratio | kernelfix warm s | next turn s (TUs reused) | output = stock | matches torch (stock/cold/warm) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for r in rows:
        mt = "/".join("-" if m is None else ("yes" if m else "NO") for m in r["matches_torch"])
        same = {True: "yes", False: "NO", None: "-"}[r["same_output_as_stock"]]
        md.append(
            f"| {r['candidate']} | {_fmt(r['stock_s'])} ({_fmt(r['stock_cpu_s'], 0)}) | {_fmt(r['kernelfix_cold_s'])} ({_fmt(r['kernelfix_cold_cpu_s'], 0)}) | {_fmt(r['ratio'], 2)}x | "
            f"{_fmt(r['kernelfix_warm_s'], 3)}{'' if r['warm_cached'] else ' (not cached!)'} | {_fmt(r['next_turn_s'])} ({r['next_turn_objects_reused']}) | {same} | {mt} |"
        )
    md += [
        "",
        f"Median: stock {_fmt(summary['median_stock_s'])} s, kernelfix cold {_fmt(summary['median_kernelfix_cold_s'])} s, "
        f"ratio {_fmt(summary['median_ratio'], 2)}x; slowest warm rebuild {_fmt(summary['max_warm_s'], 3)} s. "
        f"One-time setup (first kernelfix build on this machine, incl. the torch-header PCH): {_fmt(summary['setup_s'])} s.",
    ]
    if levers:
        md += ["", f"Levers, each alone, candidate {levers['candidate']} (cold; {len(LEVERS) } builds at once):", "", "| build | load_inline s | compiler CPU s | notes |", "| --- | ---: | ---: | --- |"]
        for k in ("stock", *LEVERS):
            v = levers[k]
            notes = "; ".join(n for rec in v.get("records", []) for n in rec.get("notes", []))
            md.append(f"| {k} | {_fmt(v.get('load_inline_s'))} | {_fmt(v.get('compiler_cpu_s'), 0)} | {notes or ''}{(' ERROR ' + v['error'][:200]) if v.get('error') else ''} |")
    errors = [(r["candidate"], r["errors"]) for r in rows if r["errors"]]
    if errors:
        md += ["", "Errors:"] + [f"- {c}: {json.dumps(e)[:1500]}" for c, e in errors]
    table = "\n".join(md) + "\n"
    print(table, flush=True)
    (out / "compile_bench.md").write_text(table)
    (out / "compile_bench.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
