"""The measurements of bench/tune_hf.py, one function per part, each run in a process of its own.

Every timing pairs the models it compares in rounds (kernelfix.tune.timing.paired_rounds: each round runs every model
the same number of calls, in rotating order, and keeps each one's median call; CUDA events on a GPU) and reports the
median over the rounds with its p10-p90, as `kernelfix tune` reports its trials (kernelfix.tune.decide.compare).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
HF = ROOT / "examples" / "models" / "hf_decoder.py"
SRC = ROOT / "examples" / "tune" / "hf" / "src"
H200_SPEC_TBS = 4.8  # HBM3e, NVIDIA's H200 datasheet
H200_BF16_TFLOPS = 989.0  # dense bf16 tensor-core peak, NVIDIA's H200 datasheet


def hf():
    sys.path.insert(0, str(HF.parent))
    import hf_decoder

    return hf_decoder


def build(family: str, size: str, device: str, dtype: torch.dtype):
    return hf().build_model(family, size, device=device, dtype=dtype).eval()


def tokens(family: str, size: str, batch: int, seq: int, device: str) -> torch.Tensor:
    return hf().make_inputs(family, size, batch, seq, device)


def swapped(model) -> list:
    """The CapturedKernel modules load_tuned put into the model."""
    from kernelfix.capture.captured_kernel import CapturedKernel

    return [m for m in model.modules() if isinstance(m, CapturedKernel)]


def tuned_model(tune_dir, model, swaps: str):
    """The model with the tune's swaps: ``kept`` as kernelfix.load_tuned applies them (what a user gets); ``correct``:
    every session's correct kernel, kept or not (load_best into each tuned module), as bench/tune_transformer.py's
    second step measures them together."""
    import kernelfix

    if swaps == "kept":
        return kernelfix.load_tuned(tune_dir, model)
    from kernelfix.tune.swaps import relative

    report = json.loads((Path(tune_dir) / "report.json").read_text())
    for m in report.get("modules", []):
        if not (m.get("selected") and m.get("correct") and m.get("session")):
            continue
        parent, _, attr = relative(m["module"], report["model_name"]).rpartition(".")
        owner = model.get_submodule(parent) if parent else model
        setattr(owner, attr, kernelfix.load_best(m["session"], getattr(owner, attr)))
    return model


def comparison(before: list[float], after: list[float], calls: int, mode: str = "eager") -> dict:
    from kernelfix.tune.decide import compare
    from kernelfix.tune.tune_config import TuneConfig

    return compare(mode, before, after, calls, TuneConfig()).model_dump(exclude_none=True)


def compile_warm(model, call, notes: list[str], label: str):
    """torch.compile(model, fullgraph=True) called once; without fullgraph when that fails (noted), as tune compiles."""
    c = torch.compile(model, fullgraph=True)
    try:
        call(c)
        return c
    except Exception as e:
        notes.append(
            f"{label}: fullgraph=True failed ({type(e).__name__}: {str(e).splitlines()[0][:200]}); compiled without it"
        )
        c = torch.compile(model)
        call(c)
        return c


def prefill(family, size, device, dtype, batch, seq, tuned_dir, swaps, rounds, round_ms) -> dict:
    """The model's forward (the prefill: batch x seq tokens, no grad): original and tuned, eager and compiled."""
    from kernelfix.capture.output_tolerance import tolerance_for
    from kernelfix.tune.timing import paired_rounds

    dev = torch.device(device)
    original = build(family, size, device, dtype)
    tuned = tuned_model(tuned_dir, build(family, size, device, dtype), swaps)
    ids = tokens(family, size, batch, seq, device)
    out: dict = {"swaps": len(swapped(tuned)), "notes": []}
    with torch.no_grad():
        want, got = original(ids).logits, tuned(ids).logits
        tol = tolerance_for(want.dtype)
        out["logits_max_abs_diff"] = (got.float() - want.float()).abs().max().item()
        out["logits_match"] = bool(torch.allclose(got.float(), want.float(), atol=tol.atol, rtol=tol.rtol))
        t0 = time.monotonic()
        c_orig = compile_warm(original, lambda c: c(ids), out["notes"], "original")
        try:
            c_tuned = compile_warm(tuned, lambda c: c(ids), out["notes"], "tuned")
            out["compiled_logits_max_abs_diff"] = (c_tuned(ids).logits.float() - want.float()).abs().max().item()
        except Exception as e:  # the eager timing still stands; the compiled row says why it is missing
            c_tuned = None
            out["compiled_error"] = (
                f"the tuned model does not compile: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
            )
        out["compile_s"] = round(time.monotonic() - t0, 1)
        fns = [lambda: original(ids), lambda: tuned(ids), lambda: c_orig(ids)]
        if c_tuned is not None:
            fns.append(lambda: c_tuned(ids))
        times, calls = paired_rounds(fns, dev, rounds=rounds, round_ms=round_ms)
    out["eager"] = comparison(times[0], times[1], calls)
    if c_tuned is not None:
        out["compiled"] = comparison(times[2], times[3], calls, "compiled")
    else:
        out["compiled_original"] = comparison(times[2], times[2], calls, "compiled")["before"]
    out["tuned_eager_vs_compiled_original"] = comparison(times[2], times[1], calls)
    return out


def generate(family, size, device, dtype, batch, seq, new_tokens, tuned_dir, swaps, reps) -> dict:
    """A greedy generate() of new_tokens from a batch x seq prompt, original and tuned, alternating; the tokens compared."""
    from kernelfix.tune.timing import call_ms

    dev = torch.device(device)
    original = build(family, size, device, dtype)
    tuned = tuned_model(tuned_dir, build(family, size, device, dtype), swaps)
    ids = tokens(family, size, batch, seq, device)
    calls = []
    for k in swapped(tuned):
        k.kernel.register_forward_hook(lambda *a: calls.append(1))
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    res: dict[str, list] = {"original": [], "tuned": []}
    toks = {}
    torch.use_deterministic_algorithms(
        True, warn_only=True
    )  # (CUBLAS_WORKSPACE_CONFIG set by the bench before CUDA starts)
    with torch.no_grad():
        for name, m in (("original", original), ("tuned", tuned)):
            toks[name] = m.generate(ids, **kw)  # warm-up, and the tokens
        again = original.generate(ids, **kw)  # the control: is the original's own generate() the same twice?
        calls.clear()
        for r in range(reps):
            for name, m in (
                (("original", original), ("tuned", tuned)) if r % 2 == 0 else (("tuned", tuned), ("original", original))
            ):
                res[name].append(call_ms(lambda m=m: m.generate(ids, **kw), dev))
    same = bool(torch.equal(toks["original"], toks["tuned"]))
    return {
        "tokens_identical": same,
        "original_repeats_itself": bool(torch.equal(toks["original"], again)),
        "new_tokens": int(toks["tuned"].shape[1] - ids.shape[1]),
        "kernel_calls_per_generate": len(calls) / max(1, reps),
        "fallbacks": sum(k.fallbacks for k in swapped(tuned)),
        "first_difference": None if same else int((toks["original"] != toks["tuned"]).nonzero()[0, 1].item()),
        **comparison(res["original"], res["tuned"], 1),
    }


def train(family, size, device, dtype, batch, seq, tuned_dir, swaps, rounds, round_ms) -> dict:
    """A training step (forward with labels, the model's own loss, backward): original against the model tuned with
    --backward (paired rounds), then Liger Kernel's patched model alone (patching is global to transformers' classes,
    so it comes last, in the same process, timed the same way)."""
    from kernelfix.tune.decide import stats
    from kernelfix.tune.timing import paired_rounds

    dev = torch.device(device)
    ids = tokens(family, size, batch, seq, device)

    def step(m):
        def run():
            m.zero_grad(set_to_none=True)
            loss = m(ids, labels=ids).loss
            loss.backward()
            return loss

        return run

    original = build(family, size, device, dtype).train()
    models = {"original": original}
    out: dict = {"notes": []}
    if tuned_dir is not None and (Path(tuned_dir) / "report.json").is_file():
        models["tuned"] = tuned_model(tuned_dir, build(family, size, device, dtype).train(), swaps)
        out["swaps"] = len(swapped(models["tuned"]))
        la, lb = step(original)().item(), step(models["tuned"])().item()
        out["loss"] = {"original": la, "tuned": lb}
    else:
        out["notes"].append(f"no tune with --backward in {tuned_dir}: the original and Liger only")
    names = list(models)
    times, calls = paired_rounds([step(models[n]) for n in names], dev, rounds=rounds, round_ms=round_ms)
    out["original"] = stats(times[0], calls).model_dump()
    if "tuned" in models:
        out["tuned"] = comparison(times[0], times[1], calls)
    del models
    try:
        from liger_kernel.transformers import apply_liger_kernel_to_llama
    except ImportError as e:
        out["notes"].append(f"liger-kernel not installed ({e}): no Liger row")
        return out
    apply_liger_kernel_to_llama()
    liger = build(family, size, device, dtype).train()
    out["loss"] = {**out.get("loss", {}), "liger": step(liger)().item()}
    (lt,), lcalls = paired_rounds([step(liger)], dev, rounds=rounds, round_ms=round_ms)
    out["liger"] = stats(lt, lcalls).model_dump()
    out["liger"]["speedup_vs_original_median"] = round(statistics.median(times[0]) / statistics.median(lt), 4)
    return out
