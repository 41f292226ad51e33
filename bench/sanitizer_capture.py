"""compute-sanitizer's raw reports for the sanitizer's defect kernels (tests/sanitizer), on the GPU.

    python3 -P bench/sanitizer_capture.py --out DIR [--cases NAME ...] [--parallel 8] [--timeout 90]
    python3 -P bench/sanitizer_capture.py drive TASK CANDIDATE --rows K [--build-only]

Writes DIR/env.txt (the sanitizer's path, version and --help, the GPU), then for each case and tool
DIR/raw/CASE.TOOL.log: compute-sanitizer run as the judge's stage runs it (tools/sanitizer/tool.py's
options, every tensor its own allocation), outside the sandbox, on the reduced input the stage would
pick first (tools/sanitizer/reduce.py), with its wall time and exit code in DIR/raw/summary.json and
one line each on stdout (what tools/sanitizer/parse.py reads from it). One more run shows why the
stage turns torch's caching allocator off: memcheck on the off-by-one read with the allocator on.
These reports are the CPU tests' fixtures (tests/fixtures/sanitizer/). ``drive`` is the process the
sanitizer watches: builds as the judge builds (-lineinfo, the build cache), one forward.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def drive(task_path: str, cand_path: str, rows: int | None, build_only: bool) -> None:
    import torch

    from kernelfix.tools.compile import load_inline
    from kernelfix.tools.sanitizer import reduce

    load_inline.install(Path(tempfile.mkdtemp(prefix="kf-san-drive-")), "cuda")
    task = _load(task_path, "task")
    torch.manual_seed(0)
    with torch.device("cuda"):
        inputs = list(task.get_inputs())
    cand = _load(cand_path, "candidate")
    if build_only:
        return
    if rows:
        inputs = reduce.cut(inputs, reduce.Plan(rows=rows, of=inputs[0].shape[0], which=[0]))
    model = cand.ModelNew(*task.get_init_inputs()).cuda()
    torch.cuda.synchronize()
    with torch.no_grad():
        model(*inputs)
    torch.cuda.synchronize()


def first_rows(task_path: Path, max_elements: int) -> int | None:
    import torch

    from kernelfix.tools.sanitizer import reduce

    task = _load(str(task_path), "task_shapes")
    with torch.device("meta"):
        inputs = list(task.get_inputs())
    plan = reduce.plans([tuple(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs], max_elements)[0]
    return plan.rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "drive":
        a = argparse.ArgumentParser()
        a.add_argument("task")
        a.add_argument("candidate")
        a.add_argument("--rows", type=int)
        a.add_argument("--build-only", action="store_true")
        args = a.parse_args(sys.argv[2:])
        return drive(args.task, args.candidate, args.rows, args.build_only)

    import sanitizer_support as sc

    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tools.sanitizer import parse, tool

    a = argparse.ArgumentParser()
    a.add_argument("--out", required=True)
    a.add_argument("--cases", nargs="*")
    a.add_argument("--parallel", type=int, default=8)
    a.add_argument("--timeout", type=float, default=90)
    args = a.parse_args()
    out = Path(args.out)
    (out / "raw").mkdir(parents=True, exist_ok=True)
    path, why = tool.find()
    if path is None:
        sys.exit(f"no compute-sanitizer: {why}")
    env_txt = [f"path: {path}", f"version: {tool.version(path)}"]
    for cmd in (
        [path, "--version"],
        [path, "--help"],
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv"],
    ):
        try:
            env_txt.append(
                f"$ {' '.join(cmd)}\n" + subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
            )
        except (OSError, subprocess.SubprocessError) as e:
            env_txt.append(f"$ {' '.join(cmd)}: {e}")
    (out / "env.txt").write_text("\n".join(env_txt))
    print(env_txt[1], flush=True)

    cases = [c for c in [*sc.cases(), sc.honest()] if not args.cases or c.name in args.cases]
    me = [sys.executable, "-P", str(Path(__file__).resolve()), "drive"]
    t0 = time.time()
    with ThreadPoolExecutor(args.parallel) as pool:  # every build first, so each sanitized run loads from the cache
        builds = list(
            pool.map(
                lambda c: subprocess.run(
                    [*me, str(c.task), str(c.path), "--build-only"], capture_output=True, text=True
                ),
                cases,
            )
        )
    for c, b in zip(cases, builds):
        if b.returncode:
            print(f"BUILD FAILED {c.name}: {b.stderr[-800:]}")
    print(f"built {len(cases)} cases in {time.time() - t0:.1f}s", flush=True)

    max_el = JudgeConfig().sanitizer_max_elements
    rows = {c.task: first_rows(c.task, max_el) for c in cases}
    runs = [(c, t, True) for c in cases for t in tool.ORDER]
    runs += [(c, "memcheck", False) for c in cases if c.name == "row_sum_oob_read_cuda"]

    def one(job) -> dict:
        c, name, no_cache = job
        suffix = "" if no_cache else ".caching"
        log = out / "raw" / f"{c.name}.{name}{suffix}.log"
        env = {**os.environ, **(tool.ENV if no_cache else {})}
        argv = [*tool.command(path, name, log), *me, str(c.task), str(c.path)] + (
            ["--rows", str(rows[c.task])] if rows[c.task] else []
        )
        t = time.time()
        try:
            p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=args.timeout)
            rc, tail = p.returncode, (p.stderr or "")[-600:]
        except subprocess.TimeoutExpired:
            rc, tail = "timeout", ""
        wall = time.time() - t
        parsed = parse.parse(log.read_text() if log.exists() else "")
        found = sorted({(r.kind, (r.frames[0].line if r.frames else None)) for r in parsed.records}, key=str)
        return {
            "case": c.name,
            "tool": name + suffix,
            "rows": rows[c.task],
            "rc": rc,
            "wall_s": round(wall, 1),
            "errors": parsed.errors,
            "records": len(parsed.records),
            "found": found,
            "messages": parsed.messages[:3],
            "stderr_tail": tail if rc not in (0, 1) else "",
        }

    t0 = time.time()
    with ThreadPoolExecutor(args.parallel) as pool:
        results = list(pool.map(one, runs))
    for r in results:
        print(
            f"{r['case']:34} {r['tool']:18} rows={r['rows']} rc={r['rc']} {r['wall_s']:5.1f}s errors={r['errors']} records={r['records']} "
            f"found={r['found']} {r['messages'] or ''}",
            flush=True,
        )
        if r["stderr_tail"]:
            print("    stderr: " + r["stderr_tail"].replace("\n", " | ")[-400:])
    print(f"{len(runs)} sanitizer runs in {time.time() - t0:.1f}s, {args.parallel} at a time")
    (out / "raw" / "summary.json").write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
