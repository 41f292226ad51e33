"""Compile times of CUDA candidates: the 5 bench candidates as written and in the fast layout,
through stock ``load_inline`` and through kernelfix, side by side in one run.

    python3 bench/compile_bench.py [--out DIR] [--jobs N] [--cores-per-build N] [--candidates a,b]
                                   [--levers NAME] [--workdir DIR]

``bench/compile_candidates/`` holds the candidates as written (torch headers in the
``.cu``); ``bench/compile_candidates_fast/`` the same kernels in the fast layout
(``.cu`` with CUDA headers only, launcher on raw pointers, torch wrapper in
``cpp_sources``, ``no_implicit_headers=True``). Every build runs in a fresh process
through the hook the judge's child installs (``kernelfix.tools.compile.load_inline.install``), so
"stock" and "kernelfix" differ only in build options (stock = ``BuildOptions.stock()``:
torch's own ninja, only redirected into a fresh directory). CUDA is initialized before
the candidate is imported, as in the judge.

Fair core budget: the ``--jobs`` builds of a phase run at once, each pinned to its own
``--cores-per-build`` cores (default: the CPUs this process may use divided by the
jobs; 3 each for 5 builds on 16 cores) with ``sched_setaffinity``, which ninja, nvcc
and gcc inherit, and ``MAX_JOBS`` set to the same number. Phases run one after another:

1. setup: one kernelfix build of the first fast candidate, which makes the machine-level
   precompiled torch header (timed on its own; the cold phases start from it);
2. as written, stock; 3. as written, kernelfix cold (fresh build directory, and a cache
   holding only the setup's precompiled header);
4. fast layout, stock; 5. fast layout, kernelfix cold;
6. fast layout, next turn: the ``.cu`` edited (a comment), on phase 5's cache (the
   binding TU is reused); 7. fast layout, warm: the identical candidate again;
8. with ``--levers NAME``: one as-written candidate cold with each lever alone.

Each built extension runs once on the GPU: its output must equal the as-written stock
build's bit for bit and match the PyTorch reference (allclose 1e-2). Writes
compile_bench.json and compile_bench.md under ``--out`` (default $OUT) and prints the table.
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
FAST_CANDIDATES = HERE / "compile_candidates_fast"
STOCK = {"cache": False, "object_cache": False, "host_pch": False, "split_nvcc": False, "local_arch": False}
ALL = {
    "cache": True,
    "object_cache": True,
    "host_pch": True,
    "split_nvcc": True,
    "local_arch": False,
}  # kernelfix's defaults
LEVERS = {
    "local arch only": {**STOCK, "local_arch": True},
    "host PCH only": {**STOCK, "host_pch": True},
    "split nvcc only": {**STOCK, "split_nvcc": True},
    "kernelfix defaults": ALL,
    "defaults + local arch": {**ALL, "local_arch": True},
}
GOAL_S, GOAL_RATIO = 5.0, 10.0  # issue 17: the fast layout's median cold build at most 5 s, at least 10x stock


# --------------------------------------------------------------------------- worker (one build, fresh process)


def worker(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    os.environ["KERNELFIX_CACHE"] = spec["cache"]
    if spec.get("cpus"):  # this build's core budget; the compilers it starts inherit it
        os.sched_setaffinity(0, spec["cpus"])
        os.environ["MAX_JOBS"] = str(len(spec["cpus"]))
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.zeros(1, device="cuda")  # the judge's child has CUDA up before the candidate is imported
    import torch.utils.cpp_extension as ce

    from kernelfix.tools.compile import load_inline
    from kernelfix.tools.config import BuildOptions

    load_inline.install(Path(spec["build_root"]), device, BuildOptions(**spec["options"]))
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
    except load_inline.GpuRequired as e:  # a machine without a GPU: built and linked, not run
        result["gpu_required"] = True
        result["note"] = str(e)[:300]
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {str(e)[-3000:]}"
    result["import_s"] = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds the compilers used: what limits a batch of builds sharing the cores
    result["compiler_cpu_s"] = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    result["load_inline_s"] = sum(calls)
    result["records"] = [r.model_dump() for r in load_inline.records()]
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


def _run_worker(
    work: Path, tag: str, candidate: Path, options: dict, cache: Path, edit: bool = False, cpus: list[int] | None = None
) -> dict:
    d = work / tag
    d.mkdir(parents=True, exist_ok=True)
    spec = {
        "candidate": str(candidate),
        "options": options,
        "cache": str(cache),
        "build_root": str(d / "build"),
        "output": str(d / "out.pt"),
        "edit": edit,
        "cpus": cpus,
    }
    (d / "spec.json").write_text(json.dumps(spec))
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker", str(d / "spec.json")],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    (d / "log.txt").write_text(p.stdout[-20000:] + "\n--- stderr ---\n" + p.stderr[-20000:])
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("KF-RESULT ")]
    if not lines:
        return {
            "error": f"worker died (rc {p.returncode}): {p.stderr.strip()[-800:]}",
            "process_s": wall,
            "output": None,
        }
    r = json.loads(lines[-1][len("KF-RESULT ") :])
    r["process_s"] = wall
    r["output"] = spec["output"] if Path(spec["output"]).exists() else None
    r["cpus"] = len(cpus) if cpus else None
    return r


def _fresh_cache(work: Path, tag: str, pch_from: Path | None) -> Path:
    """A cache with nothing in it but (optionally) the setup's precompiled headers."""
    c = work / "caches" / tag
    (c / "build").mkdir(parents=True, exist_ok=True)
    if pch_from is not None and (pch_from / "build" / "pch").exists():
        (c / "build" / "pch").symlink_to(pch_from / "build" / "pch")
    return c


def core_slices(n: int, per: int | None = None) -> list[list[int] | None]:
    """Disjoint core sets for ``n`` concurrent builds: ``per`` each (default: an even share). None: no pinning."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    per = per or (len(cores) // n if n else 0)
    if not cores or per < 1 or per * n > len(cores):
        return [None] * n
    return [cores[i * per : (i + 1) * per] for i in range(n)]


def _same(a: str | None, b: str | None) -> bool | None:
    if not a or not b:
        return None
    import torch

    return bool(torch.equal(torch.load(a), torch.load(b)))


def _units(r: dict) -> str:
    """Per translation unit: seconds, or 'reused'."""
    parts = []
    for rec in r.get("records", []):
        for u in rec.get("units", []):
            parts.append(f"{u['source']} {'reused' if u['reused'] else format(u['seconds'], '.1f')}")
    return ", ".join(parts)


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _median(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


# Columns of the main table: (phase key, header).
COLUMNS = [
    ("written_stock", "as written, stock"),
    ("written_kf", "as written, kernelfix"),
    ("fast_stock", "fast layout, stock"),
    ("fast_kf", "fast layout, kernelfix"),
    ("fast_turn", "fast, next turn"),
    ("fast_warm", "fast, warm"),
]


def summarize(names: list[str], runs: dict[str, dict[str, dict]]) -> tuple[list[dict], dict]:
    """Rows per candidate and the medians; outputs compared with the as-written stock build's."""
    rows = []
    for n in names:
        ref = runs["written_stock"][n]
        row: dict = {"candidate": n}
        for key, _ in COLUMNS:
            r = runs[key][n]
            row[f"{key}_s"] = r.get("load_inline_s")
            row[f"{key}_cpu_s"] = r.get("compiler_cpu_s")
        differ = [k for k, _ in COLUMNS[1:] if _same(ref.get("output"), runs[k][n].get("output")) is False]
        compared = [k for k, _ in COLUMNS[1:] if _same(ref.get("output"), runs[k][n].get("output")) is not None]
        row["bit_identical"] = None if not compared else not differ
        row["differ"] = differ
        row["matches_torch"] = {k: runs[k][n].get("matches_torch") for k, _ in COLUMNS}
        row["fast_units"] = _units(runs["fast_kf"][n])
        row["fast_turn_units"] = _units(runs["fast_turn"][n])
        row["warm_cached"] = bool(runs["fast_warm"][n].get("records")) and all(
            x["cached"] for x in runs["fast_warm"][n]["records"]
        )
        row["errors"] = {k: runs[k][n]["error"] for k, _ in COLUMNS if runs[k][n].get("error")}
        ws, fk = row["written_stock_s"], row["fast_kf_s"]
        row["ratio"] = ws / fk if ws and fk else None
        rows.append(row)
    med = {f"{k}_s": _median([r[f"{k}_s"] for r in rows]) for k, _ in COLUMNS}
    ratio = med["written_stock_s"] / med["fast_kf_s"] if med["written_stock_s"] and med["fast_kf_s"] else None
    goal = None if ratio is None else (med["fast_kf_s"] <= GOAL_S and ratio >= GOAL_RATIO)
    return rows, {**med, "median_ratio": ratio, "goal_met": goal}


def markdown(info: dict, rows: list[dict], summary: dict, levers: dict) -> str:
    yes = {True: "yes", False: "NO", None: "-"}
    md = [
        f"GPU {info['gpu']}, {info['cpus']} CPUs, torch {info['torch']} (CUDA {info['cuda']}), {info['nvcc']}; "
        f"{info['jobs']} builds at once per phase, each pinned to {info['cores_per_build'] or 'all'} cores.",
        "",
        "Cold builds, `load_inline` wall seconds (compiler CPU seconds):",
        "",
        "| candidate | "
        + " | ".join(h for _, h in COLUMNS)
        + " | stock as written / fast kernelfix | fast layout units: cold; next turn | output bit-identical to as-written stock | matches torch |",
        "| --- | " + " | ".join("---:" for _ in COLUMNS) + " | ---: | --- | --- | --- |",
    ]
    for r in rows:
        cells = [f"{_fmt(r[f'{k}_s'], 3 if k == 'fast_warm' else 1)} ({_fmt(r[f'{k}_cpu_s'], 0)})" for k, _ in COLUMNS]
        if not r["warm_cached"]:
            cells[-1] += " not cached!"
        mt = "/".join("-" if m is None else ("yes" if m else "NO") for m in r["matches_torch"].values())
        ident = yes[r["bit_identical"]] + (f" (differ: {', '.join(r['differ'])})" if r["differ"] else "")
        md.append(
            f"| {r['candidate']} | "
            + " | ".join(cells)
            + f" | {_fmt(r['ratio'], 1)}x | {r['fast_units']}; {r['fast_turn_units']} | {ident} | {mt} |"
        )
    goal = {True: "met", False: "NOT met", None: "not measured"}[summary["goal_met"]]
    md += [
        "",
        "Medians: "
        + ", ".join(f"{h} {_fmt(summary[f'{k}_s'], 3 if k == 'fast_warm' else 1)} s" for k, h in COLUMNS)
        + ".",
        f"Fast layout through kernelfix: median {_fmt(summary['fast_kf_s'], 2)} s cold, {_fmt(summary['median_ratio'], 1)}x the as-written stock median "
        f"(goal: at most {GOAL_S:g} s and at least {GOAL_RATIO:g}x: {goal}). "
        f"One-time setup (first build on the machine, incl. the precompiled torch header): {_fmt(info.get('setup_s'))} s.",
    ]
    if levers:
        md += [
            "",
            f"Levers, each alone, candidate {levers['candidate']} as written (cold):",
            "",
            "| build | load_inline s | compiler CPU s | notes |",
            "| --- | ---: | ---: | --- |",
        ]
        for k in ("stock", *LEVERS):
            v = levers[k]
            notes = "; ".join(n for rec in v.get("records", []) for n in rec.get("notes", []))
            md.append(
                f"| {k} | {_fmt(v.get('load_inline_s'))} | {_fmt(v.get('compiler_cpu_s'), 0)} | {notes}{(' ERROR ' + v['error'][:200]) if v.get('error') else ''} |"
            )
    errors = [(r["candidate"], r["errors"]) for r in rows if r["errors"]]
    if errors:
        md += ["", "Errors:"] + [f"- {c}: {json.dumps(e)[:1500]}" for c, e in errors]
    return "\n".join(md) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="where the JSON and markdown go (default $OUT)")
    ap.add_argument("--jobs", type=int, default=5, help="builds at once in a phase (default 5)")
    ap.add_argument(
        "--cores-per-build", type=int, help="cores each build is pinned to (default: the usable CPUs / jobs)"
    )
    ap.add_argument("--candidates", help="comma-separated candidate names (default: all in bench/compile_candidates)")
    ap.add_argument("--candidate-dir", default=str(CANDIDATES), help=argparse.SUPPRESS)  # for testing the driver
    ap.add_argument("--fast-dir", default=str(FAST_CANDIDATES), help=argparse.SUPPRESS)
    ap.add_argument("--levers", help="also time each lever alone on this as-written candidate")
    ap.add_argument("--workdir", help="keep builds here (default: a temp dir)")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return 0

    import torch

    cdir, fdir = Path(args.candidate_dir), Path(args.fast_dir)
    names = args.candidates.split(",") if args.candidates else sorted(p.stem for p in cdir.glob("*.py"))
    written = {n: cdir / f"{n}.py" for n in names}
    fast = {n: fdir / f"{n}.py" for n in names}
    missing = [str(p) for p in [*written.values(), *fast.values()] if not p.is_file()]
    if missing:
        ap.error(f"missing candidates: {', '.join(missing)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="kf-compile-bench-"))
    slices = core_slices(args.jobs, args.cores_per_build)
    info = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": sys.version.split()[0],
        "jobs": args.jobs,
        "cores_per_build": len(slices[0]) if slices and slices[0] else None,
    }
    try:
        info["nvcc"] = (
            subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
        )
    except (OSError, IndexError):
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
        """Run the jobs ``args.jobs`` at a time, the i-th of each batch on the i-th core slice."""
        results: list[dict] = []
        for i in range(0, len(jobs), max(1, args.jobs)):
            batch = jobs[i : i + max(1, args.jobs)]
            with ThreadPoolExecutor(max_workers=len(batch)) as pool:
                results += list(pool.map(lambda jc: _run_worker(*jc[0], cpus=jc[1]), zip(batch, slices)))
        return results

    def cold(tag: str, cands: dict[str, Path], options: dict, pch_from: Path | None) -> dict[str, dict]:
        jobs = [(work, f"{tag}-{n}", cands[n], options, _fresh_cache(work, f"{tag}-{n}", pch_from)) for n in names]
        return dict(zip(names, parallel(jobs)))

    setup_cache = work / "caches" / "setup"
    setup = phase("setup", lambda: _run_worker(work, "setup", fast[names[0]], ALL, setup_cache, cpus=slices[0]))
    info["setup_s"] = setup.get("load_inline_s")
    runs: dict[str, dict[str, dict]] = {}
    runs["written_stock"] = phase("as written, stock", lambda: cold("written-stock", written, STOCK, None))
    runs["written_kf"] = phase("as written, kernelfix cold", lambda: cold("written-kf", written, ALL, setup_cache))
    runs["fast_stock"] = phase("fast layout, stock", lambda: cold("fast-stock", fast, STOCK, None))
    runs["fast_kf"] = phase("fast layout, kernelfix cold", lambda: cold("fast-kf", fast, ALL, setup_cache))
    kf_caches = {n: work / "caches" / f"fast-kf-{n}" for n in names}
    runs["fast_turn"] = phase(
        "fast layout, next turn",
        lambda: dict(zip(names, parallel([(work, f"fast-turn-{n}", fast[n], ALL, kf_caches[n], True) for n in names]))),
    )
    runs["fast_warm"] = phase(
        "fast layout, warm",
        lambda: dict(zip(names, parallel([(work, f"fast-warm-{n}", fast[n], ALL, kf_caches[n]) for n in names]))),
    )
    levers: dict = {}
    if args.levers:
        lc = args.levers
        jobs = [
            (work, f"lever-{i}", written[lc], opts, _fresh_cache(work, f"lever-{i}", setup_cache))
            for i, opts in enumerate(LEVERS.values())
        ]
        levers = {
            "candidate": lc,
            "stock": runs["written_stock"][lc],
            **dict(zip(LEVERS, phase("levers", lambda: parallel(jobs)))),
        }

    rows, summary = summarize(names, runs)
    summary["total_s"] = round(time.perf_counter() - t_all, 1)
    report.update(rows=rows, summary=summary, levers=levers, setup=setup, raw=runs)
    table = markdown(info, rows, summary, levers)
    print(table, flush=True)
    (out / "compile_bench.md").write_text(table)
    (out / "compile_bench.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
