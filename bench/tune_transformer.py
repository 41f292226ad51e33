"""`kernelfix tune` on the example transformer, end to end, with the replayed kernels (issue 35).

    python3 -P bench/tune_transformer.py                   # on the GPU: dim 128, seq 64, batch 8, top 2
    python3 -P bench/tune_transformer.py --device cpu      # the same on the CPU, at the example's own size

1. The tune itself, as `kernelfix tune examples/models/tiny_transformer.py --model replay:examples/tune
   --top K --headless -- --device D ...` runs it (the same code, in this process): the ranking, the top K
   captured and optimized (the replay model's kernels, judged for real), each swap tried in the model
   (output, forward timed in paired rounds eager and under torch.compile(fullgraph=True)), what it kept.
2. Every swap tried, kept or not, together in the model: the example transformer tuned end to end with the
   replayed kernels, its forward before and after, eager and compiled (the same measurement as 1).
3. `kernelfix.load_tuned(OUT, model)` on a fresh model: its logits against the original's within the judge's
   tolerance, torch._dynamo.explain (graphs, breaks) of the tuned model.
4. The ranking of a training step (--train: forward+backward), and, with --save-profiles DIR, the recorded
   profiles (forward, training step) for tests/fixtures/tune.

Prints each step and `tune-transformer: OK` (exit 0) when the flow ran through and the tuned model matches
(whether a swap was kept is the measurement, not the pass condition).
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "models" / "tiny_transformer.py"
REPLAYS = ROOT / "examples" / "tune"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--top", type=int, default=2)
    ap.add_argument("--dim", type=int, help="model width (default 128 on cuda, 32 on cpu)")
    ap.add_argument("--seq", type=int, help="tokens per sequence (default 64 on cuda, 8 on cpu)")
    ap.add_argument("--batch", type=int, help="sequences (default 8 on cuda, 2 on cpu)")
    ap.add_argument("--rounds", type=int, help="timing rounds (default: [tune] rounds, 20)")
    ap.add_argument("--out", type=Path, help="the tune's DIR (default: a new temp dir)")
    ap.add_argument(
        "--save-profiles", type=Path, metavar="DIR", help="write the recorded profiles (forward, training step) here"
    )
    args = ap.parse_args()
    gpu = args.device == "cuda"
    if not gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    dim, seq, batch = args.dim or (128 if gpu else 32), args.seq or (64 if gpu else 8), args.batch or (8 if gpu else 2)
    script_args = ["--device", args.device, "--dim", str(dim), "--seq", str(seq), "--batch", str(batch)]
    out = args.out or Path(tempfile.mkdtemp(prefix="kernelfix-tune-"))
    t0 = time.monotonic()

    from rich.console import Console

    import kernelfix
    from kernelfix.agent.agent_config import AgentConfig
    from kernelfix.capture.files import import_file
    from kernelfix.capture.output_tolerance import tolerance_for
    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tune.flow import Tune, TuneOptions
    from kernelfix.tune.jobs import run_headless
    from kernelfix.tune.text import summary_text, trial_text
    from kernelfix.tune.tune_config import TuneConfig

    cfg = TuneConfig(top=args.top, **({"rounds": args.rounds} if args.rounds else {}))
    print(
        f"tune-transformer on {args.device} ({torch.cuda.get_device_name() if gpu else 'cpu'}), torch {torch.__version__}, dim {dim}, "
        f"seq {seq}, batch {batch}, top {args.top}; DIR {out}",
        flush=True,
    )
    err = Console(stderr=True, highlight=False)
    opts = TuneOptions(
        script=EXAMPLE,
        out=out,
        llm=f"replay:{REPLAYS}",
        top=args.top,
        cfg=cfg,
        judge=JudgeConfig(device=args.device, profile=False),
        agent=AgentConfig(max_turns=2, shape_block=False),
        script_args=script_args,
    )
    tune = Tune(
        opts,
        say=lambda s: print(s, flush=True),
        run_sessions=lambda jobs: run_headless(jobs, out, workers=None, console=err),
    )
    report = tune.run()
    print(summary_text(report, str(out), cfg), flush=True)
    print(f"  [tune {time.monotonic() - t0:.0f} s]", flush=True)

    tried = [(m.module, m.session) for m in report.selected if m.correct and m.session]
    if len(tried) > 1:
        print(f"every swap tried, kept or not, together: {', '.join(m for m, _ in tried)}", flush=True)
        print(trial_text(tune.trials(report).trial(tried), cfg), flush=True)

    example = import_file(EXAMPLE, "tiny_transformer")
    original = example.build(args.device, dim, seq)
    model = kernelfix.load_tuned(out, example.build(args.device, dim, seq))
    ids = example.tokens(args.device, batch, seq)
    with torch.no_grad():
        want, got = original(ids), model(ids)
        tol = tolerance_for(want.dtype)
        close = torch.allclose(got, want, atol=tol.atol, rtol=tol.rtol)
        explained = torch._dynamo.explain(model)(ids)
    print(
        f"load_tuned: {len(report.kept)} swap(s) applied; logits max abs diff {(got - want).abs().max().item():.3g} vs the original ({tol}): "
        f"{'match' if close else 'MISMATCH'}; torch._dynamo.explain: {explained.graph_count} graph(s), {explained.graph_break_count} break(s)",
        flush=True,
    )

    print("ranking a training step (--train, forward+backward):", flush=True)
    train = Tune(
        TuneOptions(
            script=EXAMPLE,
            out=out / "train-rank",
            llm="(none)",
            top=args.top,
            cfg=cfg,
            judge=opts.judge,
            agent=opts.agent,
            script_args=[*script_args, "--train"],
            rank_only=True,
        ),
        say=lambda s: print(s, flush=True),
        run_sessions=lambda jobs: {},
    )
    train.run()
    if args.save_profiles:
        _save_profiles(args.save_profiles, script_args)
    good = close and explained.graph_break_count == 0 and all(m.session_status == "finished" for m in report.selected)
    print(f"tune-transformer: {'OK' if good else 'FAILED'} in {time.monotonic() - t0:.0f} s")
    return 0 if good else 1


def _save_profiles(where: Path, script_args: list[str]) -> None:
    """The profiles the ranking reads, as recorded here (3 steps each), for the ranking's tests."""
    from kernelfix.tune.model_call import run_to_model_call
    from kernelfix.tune.model_profile import profile_model

    where.mkdir(parents=True, exist_ok=True)
    for name, extra, backward in (("forward", [], False), ("train", ["--train"], True)):
        call = run_to_model_call(EXAMPLE, [*script_args, *extra], need_grad=backward)
        prof = profile_model(call, backward=backward, steps=3)
        f = where / f"tiny_transformer_{call.device.type}_{name}.json.gz"
        f.write_bytes(gzip.compress(prof.model_dump_json(exclude_defaults=True).encode()))
        print(f"  saved {f} ({len(prof.events)} events, {f.stat().st_size} bytes)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
