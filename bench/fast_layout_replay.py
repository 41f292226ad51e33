"""A replay session on the GPU with a fast-layout CUDA candidate in each of its 3 turns; prints every turn's build.

    python3 bench/fast_layout_replay.py [--out DIR] [--workdir DIR]

1. Warm-up, in a fresh process: builds examples/candidates/relu_cuda_fast.py through the judge's
   build hook. That makes the machine-level precompiled torch header (once per machine, reported
   on its own). Its binding TU differs from the replay's (another function name), so the session
   reuses nothing from it but that header.
2. The session: ``kernelfix optimize examples/tasks/relu.py --model
   replay:examples/replays/relu_cuda_fast.jsonl --headless --max-turns 3``, on the warm-up's cache.
   The recorded turns: an nvcc error, a wrong kernel (leaky slope), the right one.
3. Per turn: the verdict, the build's seconds and each translation unit's, and the build lines
   of the feedback the model got. Written to fast_layout_replay.md and .json under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "candidates" / "relu_cuda_fast.py"
TASK = ROOT / "examples" / "tasks" / "relu.py"
REPLAY = ROOT / "examples" / "replays" / "relu_cuda_fast.jsonl"


def warm(build_root: str) -> None:
    """(In a fresh process.) Build the example as the judge's child would; print the build records."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.zeros(1, device="cuda")
    from kernelfix.tools.compile import load_inline
    from kernelfix.tools.config import BuildOptions

    load_inline.install(Path(build_root), device, BuildOptions())
    try:
        exec(compile(EXAMPLE.read_text(), str(EXAMPLE), "exec"), {"__name__": "warm_up"})
    except load_inline.GpuRequired:
        pass  # built and linked; this machine cannot load it
    print("KF-WARM " + json.dumps([r.model_dump() for r in load_inline.records()]), flush=True)


def _units(ext: dict) -> str:
    return ", ".join(
        f"{u['source']} {'reused' if u['reused'] else format(u['seconds'], '.2f') + ' s'}{'' if u['ok'] else ' (failed)'}"
        for u in ext.get("units", [])
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warm", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--workdir", help="session and cache here (default: a temp dir)")
    args = ap.parse_args()
    if args.warm:
        warm(args.warm)
        return 0
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="kf-fast-replay-"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "KERNELFIX_CACHE": str(work / "cache"), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}

    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, __file__, "--warm", str(work / "warm-build")], env=env, capture_output=True, text=True
    )
    warm_s = time.perf_counter() - t0
    got = [ln for ln in p.stdout.splitlines() if ln.startswith("KF-WARM ")]
    if p.returncode != 0 or not got:
        print(f"warm-up failed (rc {p.returncode}):\n{p.stderr[-3000:]}", file=sys.stderr)
        return 1
    warm_records = json.loads(got[-1][len("KF-WARM ") :])
    print(
        f"warm-up {warm_s:.1f} s: "
        + "; ".join(f"{r['name']} {r['seconds']:.1f} s ({_units(r)})" for r in warm_records),
        flush=True,
    )

    session = work / "session"
    cmd = [
        sys.executable,
        "-P",
        "-m",
        "kernelfix",
        "optimize",
        str(TASK),
        "--model",
        f"replay:{REPLAY}",
        "--headless",
        "--max-turns",
        "3",
        "--session-dir",
        str(session),
    ]
    t0 = time.perf_counter()
    s = subprocess.run(cmd, env=env, capture_output=True, text=True)
    session_s = time.perf_counter() - t0
    print(s.stdout.rstrip(), flush=True)
    traj_path = session / "trajectory.json"
    if not traj_path.exists():
        print(f"no trajectory (rc {s.returncode}):\n{s.stderr[-3000:]}", file=sys.stderr)
        return 1
    traj = json.loads(traj_path.read_text())
    rows = []
    for t in traj["turns"]:
        v = t["verdict"] or {}
        exts = (v.get("compile") or {}).get("extensions") or []
        build_lines = [
            ln for ln in (v.get("feedback") or "").splitlines() if ln.startswith(("Build", "cuda.cu", "main.cpp"))
        ]
        rows.append(
            {
                "turn": t["index"],
                "category": v.get("category"),
                "build_s": sum(e["seconds"] for e in exts) if exts else None,
                "units": "; ".join(_units(e) for e in exts),
                "speedup_eager": v.get("speedup_eager"),
                "judge_stages_s": v.get("stage_seconds"),
                "feedback_build_lines": build_lines,
            }
        )
    md = [
        f"Replay session (3 fast-layout turns) on {traj.get('device') or '?'}: session {session_s:.1f} s wall, exit code {s.returncode}; "
        f"warm-up {warm_s:.1f} s ("
        + "; ".join(f"{r['name']} {r['seconds']:.1f} s: {_units(r)}" for r in warm_records)
        + ").",
        "",
        "| turn | verdict | build s | translation units | speedup vs eager |",
        "| ---: | --- | ---: | --- | ---: |",
    ]
    for r in rows:
        sp = "-" if r["speedup_eager"] is None else f"{r['speedup_eager']:.2f}x"
        bs = "-" if r["build_s"] is None else f"{r['build_s']:.2f}"
        md.append(f"| {r['turn']} | {r['category']} | {bs} | {r['units']} | {sp} |")
    md += ["", "Build lines of the feedback, per turn:"] + [
        f"- turn {r['turn']}: " + " / ".join(r["feedback_build_lines"]) for r in rows
    ]
    text = "\n".join(md) + "\n"
    print(text, flush=True)
    (out / "fast_layout_replay.md").write_text(text)
    (out / "fast_layout_replay.json").write_text(
        json.dumps(
            {"warm_s": warm_s, "warm": warm_records, "session_s": session_s, "rc": s.returncode, "rows": rows}, indent=1
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
