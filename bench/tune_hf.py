"""`kernelfix tune` on transformers models with hand-written replayed kernels: the H200 proof, one script.

    python3 -P bench/tune_hf.py                                  # the GPU: Llama, then Qwen3-MoE, realistic size, bf16
    python3 -P bench/tune_hf.py --family llama --parts tune prefill
    python3 -P bench/tune_hf.py --quick                          # a CPU smoke run of every part at tiny size

For each model (examples/models/hf_decoder.py: a Llama of hidden 2048, 16 layers, 16 heads, 4 KV heads, intermediate
5632, batch 8 x 1024; a Qwen3-MoE of the same width, 16 experts, top 2), the parts, each in a process of its own with
its own time bound (a failure is printed and the next part runs):

  tune        `kernelfix tune examples/models/hf_decoder.py --model replay:examples/tune/hf --top K --out DIR --device D
              --headless --config DIR/kernelfix.toml -- --family F --size realistic --dtype bfloat16 --device cuda
              --mode no-grad`, the CLI as a user runs it; the config allows the vendor's GEMMs and attention
  prefill     on fresh models, kernelfix.load_tuned: the prefill's logits against the original's, and its forward
              timed eager and under torch.compile(fullgraph=True), original and tuned, in paired rounds (CUDA events)
  generate    a greedy generate() of 64 tokens from the same prompt, original and tuned alternating: time, tokens
  profile     where the time goes after the swaps (torch.profiler), the library GEMMs' TFLOPS, and each hand-written
              kernel alone at the model's shapes against the measured copy bandwidth and the H200's 4.8 TB/s
  train-tune  (Llama) the same tune with --backward on the script's training step (--mode train)
  train       (Llama) a training step, model(ids, labels=ids).loss.backward(): original, the --backward tune's
              model, and Liger Kernel's apply_liger_kernel_to_llama() (when liger-kernel is installed)

Results accumulate in OUT/tune_hf.json (a later call adds its parts; the tune itself resumes where it stopped) and
print as a table. No figure is written anywhere else: docs/tune.md takes them from a run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # hf_measure, hf_roofline (python -P leaves this folder out)

ROOT = Path(__file__).resolve().parent.parent
REPLAYS = ROOT / "examples" / "tune" / "hf"
FAMILIES = ("llama", "qwen3_moe")
PARTS = ("tune", "prefill", "generate", "profile", "train-tune", "train")
TRAIN_PARTS = ("train-tune", "train")
BUDGET_S = {
    "tune": 330,
    "prefill": 100,
    "generate": 60,
    "profile": 45,
    "train-tune": 380,
    "train": 120,
}  # one device call of 10 min
QUICK_BUDGET_S = {"tune": 600, "prefill": 300, "generate": 240, "profile": 240, "train-tune": 600, "train": 300}


def settings(a: argparse.Namespace) -> dict:
    quick = a.quick
    return dict(
        device="cpu" if quick else "cuda",
        size="tiny" if quick else "realistic",
        dtype="float32" if quick else "bfloat16",
        batch=2 if quick else 8,
        seq=16 if quick else 1024,
        new_tokens=a.new_tokens or (8 if quick else 64),
        rounds=a.rounds or (3 if quick else 20),
        round_ms=5.0 if quick else 50.0,
        reps=2 if quick else 5,
        top=a.top,
        tune_rounds=3 if quick else a.tune_rounds,
    )


def script_args(family: str, s: dict, mode: str) -> list[str]:
    return ["--family", family, "--size", s["size"], "--dtype", s["dtype"], "--device", s["device"], "--mode", mode]


def write_config(out: Path, s: dict) -> Path:
    """The tune's kernelfix.toml: the vendor's GEMMs and attention allowed (as tune allows them), one replayed turn."""
    from kernelfix.tools.legality.allowlist import LIBRARY_GEMM_ATTENTION

    ops = ", ".join(json.dumps(o) for o in LIBRARY_GEMM_ATTENTION)
    cfg = out / "kernelfix.toml"
    cfg.write_text(
        f"[judge]\nextra_allowed_ops = [{ops}]\nprofile = false\n\n[agent]\nmax_turns = 1\n\n[tune]\nrounds = {s['tune_rounds']}\n"
        'trials = "together"  # every correct swap at once first: one compile of the 16-layer model\n'
    )
    return cfg


def tune_command(family: str, s: dict, out: Path, backward: bool) -> list[str]:
    d = out / family / ("tune-train" if backward else "tune")
    cmd = [
        sys.executable,
        "-P",
        "-m",
        "kernelfix",
        "tune",
        str(ROOT / "examples" / "models" / "hf_decoder.py"),
        "--model",
        f"replay:{REPLAYS}",
        "--top",
        str(s["top"]),
        "--out",
        str(d),
        "--device",
        s["device"],
        "--headless",
        "--config",
        str(out / "kernelfix.toml"),
    ]
    return [
        *cmd,
        *(["--backward"] if backward else []),
        "--",
        *script_args(family, s, "train" if backward else "no-grad"),
    ]


def run_tune(family: str, s: dict, out: Path, backward: bool, budget: float) -> dict:
    cmd = tune_command(family, s, out, backward)
    shown = " ".join(Path(c).name if c == sys.executable else c for c in cmd)
    print(f"  $ {shown}", flush=True)
    t0 = time.monotonic()
    env = {**os.environ, **({"TRITON_INTERPRET": "1"} if s["device"] == "cpu" else {})}
    try:
        rc = subprocess.run(cmd, cwd=ROOT, env=env, timeout=budget).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    res = {"command": shown, "rc": rc, "seconds": round(time.monotonic() - t0, 1)}
    report = Path(cmd[cmd.index("--out") + 1]) / "report.json"
    if report.is_file():
        res.update(summarize_report(json.loads(report.read_text())))
    return res


def summarize_report(r: dict) -> dict:
    """What the table needs from report.json: the tuned modules, their sessions and swaps, what was kept together."""

    def speed(trial, mode):
        c = (trial or {}).get(mode) or {}
        return {k: c.get(k) for k in ("speedup", "speedup_low", "speedup_high")} | {
            "before_ms": (c.get("before") or {}).get("median_ms"),
            "after_ms": (c.get("after") or {}).get("median_ms"),
        }

    tuned = [
        {
            "module": m["module"],
            "class": m.get("module_class"),
            "share": m.get("share"),
            "status": m.get("session_status"),
            "correct": m.get("correct"),
            "kept": (m.get("swap") or {}).get("kept"),
            "reason": (m.get("swap") or {}).get("reason"),
            "eager": speed(m.get("swap"), "eager"),
            "compiled": speed(m.get("swap"), "compiled"),
        }
        for m in r.get("modules", [])
        if m.get("selected")
    ]
    comb = r.get("combined")
    return {
        "kept": [k["module"] for k in r.get("kept", [])],
        "tuned": tuned,
        "notes": r.get("notes", []),
        "combined": None
        if not comb
        else {
            "modules": comb.get("modules"),
            "kept": comb.get("kept"),
            "eager": speed(comb, "eager"),
            "compiled": speed(comb, "compiled"),
        },
    }


def run_measure(part: str, family: str, a: argparse.Namespace, budget: float) -> dict:
    """A measurement part in its own process (a CUDA fault or a hang there costs that part only)."""
    res_file = Path(a.out) / family / f"{part}.json"
    res_file.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-P",
        __file__,
        "--run-part",
        part,
        "--family",
        family,
        "--out",
        str(a.out),
        "--swaps",
        a.swaps,
        *(["--quick"] if a.quick else []),
        *([f"--rounds={a.rounds}"] if a.rounds else []),
        *([f"--new-tokens={a.new_tokens}"] if a.new_tokens else []),
    ]
    env = {**os.environ, "CUBLAS_WORKSPACE_CONFIG": ":4096:8", **({"TRITON_INTERPRET": "1"} if a.quick else {})}
    t0 = time.monotonic()
    try:
        rc = subprocess.run(cmd, cwd=ROOT, env=env, timeout=budget).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    res = json.loads(res_file.read_text()) if res_file.is_file() else {}
    return {**res, "rc": rc, "seconds": round(time.monotonic() - t0, 1)}


def child(a: argparse.Namespace) -> int:
    """--run-part: one measurement, its result as JSON in OUT/<family>/<part>.json."""
    import hf_measure as m
    import hf_roofline
    import torch

    s = settings(a)
    dtype = getattr(torch, s["dtype"])
    out = Path(a.out) / a.family
    tuned, tuned_train = out / "tune", out / "tune-train"
    common = (a.family, s["size"], s["device"], dtype, s["batch"], s["seq"])
    try:
        if a.run_part == "prefill":
            res = m.prefill(*common, tuned, a.swaps, s["rounds"], s["round_ms"])
        elif a.run_part == "generate":
            res = m.generate(*common, s["new_tokens"], tuned, a.swaps, s["reps"])
        elif a.run_part == "profile":
            res = hf_roofline.profile(*common, tuned, a.swaps, train=a.family == "llama")
        else:
            res = m.train(*common, tuned_train, a.swaps, s["rounds"], s["round_ms"])
    except Exception as e:
        traceback.print_exc()
        res = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
    (out / f"{a.run_part}.json").write_text(json.dumps(res, indent=1, default=str))
    return 0 if "error" not in res else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument(
        "--out", default="/tmp/kfout/tune_hf", help="tunes, part results, tune_hf.json (default /tmp/kfout/tune_hf)"
    )
    ap.add_argument("--top", type=int, default=4, help="kernelfix tune --top (default 4)")
    ap.add_argument(
        "--tune-rounds", type=int, default=20, help="[tune] rounds of the tune's keep decision (default 20)"
    )
    ap.add_argument("--rounds", type=int, help="paired rounds of this bench's timings (default 20; 3 with --quick)")
    ap.add_argument("--new-tokens", type=int, help="generate()'s new tokens (default 64; 8 with --quick)")
    ap.add_argument(
        "--budget", type=float, help="seconds each part may take (default per part: tune 570, prefill 420, ...)"
    )
    ap.add_argument(
        "--budgets",
        default=os.environ.get("TUNE_HF_BUDGETS", ""),
        help="per-part seconds, e.g. tune=250,prefill=70 (env TUNE_HF_BUDGETS): fits the parts into a shorter device call",
    )
    ap.add_argument(
        "--swaps",
        choices=["kept", "correct"],
        default="kept",
        help="the tuned model: kept, as kernelfix.load_tuned applies the tune (default); correct: every session's correct kernel, kept or not",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="CPU, tiny models, float32, Triton's interpreter: the whole script end to end",
    )
    ap.add_argument("--run-part", choices=PARTS, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.run_part:
        a.family = a.family if isinstance(a.family, str) else a.family[0]
        return child(a)
    import torch

    s = settings(a)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write_config(out, s)
    results_file = out / "tune_hf.json"
    results = json.loads(results_file.read_text()) if results_file.is_file() else {}
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() and not a.quick else "cpu"
    results["setup"] = {"device": gpu, "torch": torch.__version__, "swaps": a.swaps, **s}
    print(
        f"tune-hf on {gpu}, torch {torch.__version__}: {s['size']} {s['dtype']}, batch {s['batch']} x {s['seq']}; OUT {out}",
        flush=True,
    )
    t_all = time.monotonic()
    for family in a.family:
        fam = results.setdefault(family, {})
        for part in a.parts:
            if family != "llama" and part in TRAIN_PARTS:
                continue
            budgets = dict((k, float(v)) for k, v in (x.split("=") for x in a.budgets.split(",") if x))
            budget = budgets.get(part) or a.budget or (QUICK_BUDGET_S if a.quick else BUDGET_S)[part]
            print(f"=== {family} {part} (at most {budget:.0f} s)", flush=True)
            try:
                if part in ("tune", "train-tune"):
                    fam[part] = run_tune(family, s, out, part == "train-tune", budget)
                else:
                    fam[part] = run_measure(part, family, a, budget)
            except Exception as e:  # the bench's own failure: printed, and the next part goes on
                traceback.print_exc()
                fam[part] = {"error": f"{type(e).__name__}: {e}"}
            results_file.write_text(json.dumps(results, indent=1, default=str))
            print(f"--- {family} {part}: {status(fam[part])}", flush=True)
    from hf_table import table

    print(table(results), flush=True)
    print(f"tune-hf: {results_file} in {time.monotonic() - t_all:.0f} s")
    return 0


def status(r: dict) -> str:
    if r.get("error"):
        return f"FAILED: {r['error']}"
    if r.get("rc") not in (0, 1, None):  # tune exits 1 when it kept nothing: a result, not a failure
        return f"ended with {r['rc']} after {r.get('seconds')} s"
    return f"done in {r.get('seconds')} s"


if __name__ == "__main__":
    sys.exit(main())
