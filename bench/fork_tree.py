"""A judge's two fork servers (its reference's and a Triton candidate's), started as a judge starts them: forked from one
base that imported numpy and torch once (fork_base.Base), against each started by exec and importing torch itself. Paired
rounds in alternating order; per round, the CPU both took until ready (the processes' own and their reaped children's,
from /proc) and the seconds until the later one was ready.

    python bench/fork_tree.py [--rounds 6] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kernelfix.base.cache_dir import CACHE_ENV
from kernelfix.sandbox import fork_base, scrubbed_env, zygote
from kernelfix.sandbox.spawner import import_path, spawn

KINDS = ("reference", "triton")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """utime + stime + the reaped children's, in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return sum(int(x) for x in fields[11:15]) / TICK


def start(tree: bool, cache: str, home: str) -> dict:
    env = scrubbed_env({CACHE_ENV: cache, "HOME": home, "TMPDIR": home})
    t0 = time.monotonic()
    base = fork_base.Base(sys.executable, env, import_path(), home, spawn, zygote.BASE_PRELOAD) if tree else None
    servers = [
        zygote.Zygote(sys.executable, env, import_path(), home, spawn, zygote.PRELOADS[k], (), base) for k in KINDS
    ]
    for z in servers:
        if not z.ready.wait(300) or not z.alive:
            raise SystemExit(f"a fork server did not start: {z.error}")
    ready_s = time.monotonic() - t0
    pids = [z.pid for z in servers if z.pid] + ([base.proc.pid] if base is not None else [])
    cpu = sum(cpu_s(p) for p in pids)
    for z in servers:
        z.close()
    if base is not None:
        base.close()
    deadline = time.monotonic() + 30
    while any(
        Path(f"/proc/{p}").exists() and "Z" not in Path(f"/proc/{p}/stat").read_text().split(")")[1][:3] for p in pids
    ):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return {"cpu_s": round(cpu, 3), "ready_s": round(ready_s, 3), "seconds": [z.info.get("seconds") for z in servers]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="kf-fork-tree-") as tmp:
        cache, home = os.path.join(tmp, "cache"), os.path.join(tmp, "home")
        os.makedirs(cache)
        os.makedirs(home)
        start(True, cache, home)  # bytecode and page cache warm for both
        for r in range(args.rounds):
            order = (True, False) if r % 2 == 0 else (False, True)
            got = {("tree" if t else "exec"): start(t, cache, home) for t in order}
            rows.append(got)
            print(
                f"round {r}: exec cpu {got['exec']['cpu_s']:.2f} s ready {got['exec']['ready_s']:.2f} s | "
                f"tree cpu {got['tree']['cpu_s']:.2f} s ready {got['tree']['ready_s']:.2f} s",
                flush=True,
            )
    cpu_ratio = statistics.median(r["exec"]["cpu_s"] / r["tree"]["cpu_s"] for r in rows)
    ready_ratio = statistics.median(r["exec"]["ready_s"] / r["tree"]["ready_s"] for r in rows)
    summary = {
        "cpu_count": os.cpu_count(),
        "exec_cpu_s": statistics.median(r["exec"]["cpu_s"] for r in rows),
        "tree_cpu_s": statistics.median(r["tree"]["cpu_s"] for r in rows),
        "cpu_ratio_exec_over_tree": round(cpu_ratio, 3),
        "exec_ready_s": statistics.median(r["exec"]["ready_s"] for r in rows),
        "tree_ready_s": statistics.median(r["tree"]["ready_s"] for r in rows),
        "ready_ratio_exec_over_tree": round(ready_ratio, 3),
    }
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rounds": rows}, indent=1))


if __name__ == "__main__":
    main()
