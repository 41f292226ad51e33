"""Every shape the model uses, and a swap torch.compile accepts (issue 26), end to end.

    python3 -P bench/capture_shapes.py --out /tmp/kfout/capture_shapes     # on the GPU: batch 4096
    python3 -P bench/capture_shapes.py --device cpu                        # the same on the CPU, batch 8

1. `kernelfix capture --calls all` lifts model.gate out of examples/models/two_shapes.py,
   where it runs at two shapes (rows of 1000, then rows of 4096, one row fewer): a task
   whose get_input_sets() holds both, each checked to reproduce its call.
2. A session with the replay model (examples/replays/two_shapes_gate.jsonl: a Triton
   softmax whose block is fixed at 1024, right at rows of 1000 and wrong at 4096; then one
   whose block covers the row) is judged for real, at both shapes.
3. kernelfix.load_best puts the best kernel into a fresh model (checked at both captured
   calls; under torch.compile traced on the GPU, a custom operator on the CPU);
   torch._dynamo.explain counts the graph breaks of torch.compile over the swapped model,
   which is then compiled with fullgraph=True and compared with the original model.
4. The model's forward is timed before and after, eager and compiled (median of CUDA-event
   timed calls on the GPU, of the wall clock on the CPU).

Prints one line per judged turn and `capture-shapes: OK` (exit 0) when every check passed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "models" / "two_shapes.py"
REPLAY = ROOT / "examples" / "replays" / "two_shapes_gate.jsonl"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cuda", "cpu"])
    ap.add_argument("--batch", type=int, help="rows (default 4096 on cuda, 8 on cpu)")
    ap.add_argument("--out", type=Path, help="where the capture and the session go (default: a new temp dir)")
    ap.add_argument("--runs", type=int, help="timed forwards per median (default 100 on cuda, 10 on cpu)")
    args = ap.parse_args()
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: the swapped kernel runs here too
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    gpu = device == "cuda"
    if not gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    batch, runs = args.batch or (4096 if gpu else 8), args.runs or (100 if gpu else 10)

    import kernelfix
    from kernelfix.agent.agent_config import AgentConfig
    from kernelfix.agent.events import TurnJudged
    from kernelfix.agent.headless import turn_line
    from kernelfix.agent.models import make_model
    from kernelfix.agent.session import Session
    from kernelfix.capture.files import import_file
    from kernelfix.capture.output_tolerance import tolerance_for
    from kernelfix.capture.pipeline import capture
    from kernelfix.capture.summary import capture_text
    from kernelfix.tools.config import JudgeConfig

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from capture_swap import time_ms  # bench/capture_swap.py: the same forward timing

    out = args.out or Path(tempfile.mkdtemp(prefix="kernelfix-capture-shapes-"))
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    print(
        f"capture-shapes on {device} ({torch.cuda.get_device_name() if gpu else 'cpu'}), batch {batch}; files in {out}",
        flush=True,
    )

    # 1. capture every distinct call
    r = capture(
        EXAMPLE,
        "model.gate",
        out / "gate.py",
        calls="all",
        script_args=["--device", device, "--batch", str(batch)],
        force=True,
    )
    print("\n".join("  " + line for line in capture_text(r.manifest, r.files).splitlines()), flush=True)

    # 2. optimize (a replay model), judged at both shapes
    def show(event) -> None:
        if isinstance(event, TurnJudged):
            print(f"  {turn_line(event.turn, best_turn=None).plain}", flush=True)
            v = event.turn.verdict
            for s in v.input_sets if v is not None else []:
                speed = f", {s.speedup_eager:.2f}x vs eager" if s.speedup_eager is not None else ""
                print(
                    f"      set {s.index} {s.shapes}: {'right' if s.ok else 'WRONG' if s.ok is False else 'not reached'}{speed}",
                    flush=True,
                )

    session = Session.create(
        out / "session",
        task_path=out / "gate.py",
        model=make_model(f"replay:{REPLAY}", AgentConfig()),
        agent=AgentConfig(max_turns=2, shape_block=False),
        judge_config=JudgeConfig(device=device, profile=False),
        on_event=show,
    )
    outcome = session.run()
    speed = (
        f", geometric mean {outcome.best_speedup_eager:.2f}x over eager"
        if outcome.best_speedup_eager is not None
        else ""
    )
    print(
        f"  session: {'correct kernel' if outcome.success else 'NO correct kernel'} (best turn {outcome.best_turn}{speed})",
        flush=True,
    )
    if not outcome.success:
        print("capture-shapes: FAILED (no correct kernel)")
        return 1

    # 3. swap it in, compile the whole model with fullgraph=True
    example = import_file(EXAMPLE, "two_shapes")
    original, model, h = example.build(device), example.build(device), example.inputs(device, batch)
    with torch.no_grad():
        model.gate = kernelfix.load_best(out / "session", model.gate)
        from kernelfix.capture.summary import compile_path_text

        print(f"  swapped model.gate; {compile_path_text(model.gate.compile_path)}", flush=True)
        print(
            "  checks: "
            + "; ".join(
                f"set {c.input_set} vs {c.against.replace('_', ' ')} {'ok' if c.ok else 'FAILED'} ({c.output.summary()})"
                for c in model.gate.checks
            ),
            flush=True,
        )
        import torch._dynamo

        torch._dynamo.reset()
        explained = torch._dynamo.explain(model)(h)
        breaks = explained.graph_break_count
        print(
            f"  torch._dynamo.explain over the swapped model: {explained.graph_count} graph(s), {breaks} graph break(s)"
            + "".join(f"\n    break: {b.reason}" for b in explained.break_reasons[:3]),
            flush=True,
        )
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True)
        compiled_original = torch.compile(original, fullgraph=True)
        want = original(h)
        got_eager, got = model(h), compiled(h)
        tol = tolerance_for(want.dtype)
        diffs = {
            "swapped": (got_eager - want).abs().max().item(),
            "swapped + torch.compile": (got - want).abs().max().item(),
        }
        close = all(torch.allclose(x, want, atol=tol.atol, rtol=tol.rtol) for x in (got_eager, got))
        print(
            "  vs the original model: "
            + ", ".join(f"{k} max abs diff {d:.3g}" for k, d in diffs.items())
            + f" ({tol}): {'match' if close else 'MISMATCH'}; "
            f"{model.gate.fallbacks} calls fell back to the original module",
            flush=True,
        )

        # 4. the model's forward, before and after
        times = {
            "original eager": time_ms(lambda: original(h), device, runs),
            "original torch.compile": time_ms(lambda: compiled_original(h), device, runs),
            "swapped eager": time_ms(lambda: model(h), device, runs),
            "swapped torch.compile (fullgraph)": time_ms(lambda: compiled(h), device, runs),
        }
    clock = "CUDA events" if gpu else "wall clock"
    print(f"  forward ({clock}, median of {runs}): " + ", ".join(f"{k} {v:.3f} ms" for k, v in times.items()))
    print(
        f"  swapped vs original: eager {times['original eager'] / times['swapped eager']:.2f}x, "
        f"compiled {times['original torch.compile'] / times['swapped torch.compile (fullgraph)']:.2f}x"
    )
    good = close and breaks == 0 and model.gate.fallbacks == 0 and all(c.ok for c in model.gate.checks)
    print(f"capture-shapes: {'OK' if good else 'FAILED'} in {time.monotonic() - t0:.0f} s")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
