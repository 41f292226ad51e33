"""What the GPU machine does with transformers models at realistic size: versions, grouped GEMMs by dtype,
the Llama's prefill and generate() times, its kernels by time, a training step with and without Liger Kernel,
and the mixture of experts' prefill. A probe: its figures decide what tune's proof targets.

    python3 -P bench/hf_probe.py [--skip-liger] [--skip-moe]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "models"))
from hf_decoder import build_model, make_inputs  # noqa: E402


def cuda_ms(fn, reps: int = 10, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b))
    return out


def summary(xs: list[float]) -> str:
    s = sorted(xs)
    return (
        f"median {statistics.median(s):.3f} ms (p10 {s[len(s) // 10]:.3f}, p90 {s[(9 * len(s)) // 10]:.3f}, n={len(s)})"
    )


def grouped_mm_probe() -> None:
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        x = torch.randn(64, 128, device="cuda", dtype=dtype)
        w = torch.randn(4, 128, 256, device="cuda", dtype=dtype)
        offs = torch.tensor([16, 32, 48, 64], device="cuda", dtype=torch.int32)
        for name, f in (
            ("torch._grouped_mm", getattr(torch, "_grouped_mm", None)),
            ("F.grouped_mm", getattr(torch.nn.functional, "grouped_mm", None)),
        ):
            if f is None:
                print(f"grouped_mm {name} {dtype}: absent")
                continue
            try:
                o = f(x, w, offs=offs)
                ref = torch.cat([x[16 * i : 16 * (i + 1)].float() @ w[i].float() for i in range(4)])
                print(f"grouped_mm {name} {dtype}: ok, max err {float((o.float() - ref).abs().max()):.3g}")
            except Exception as e:
                print(f"grouped_mm {name} {dtype}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")


def top_kernels(fn, n: int = 25) -> None:
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        fn()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=n, max_name_column_width=70))


def llama(args) -> None:
    model = build_model("llama", "realistic", device="cuda", dtype=torch.bfloat16).eval()
    ids = make_inputs("llama", "realistic", 8, 1024, "cuda")
    n = sum(p.numel() for p in model.parameters())
    print(f"llama: {n / 1e6:.0f}M parameters, batch 8 x 1024, bf16, attention {model.config._attn_implementation}")
    with torch.no_grad():
        print("prefill eager:", summary(cuda_ms(lambda: model(ids), reps=20)))
        top_kernels(lambda: model(ids))
        short = ids[:, :128]
        t0 = time.perf_counter()
        out = model.generate(short, max_new_tokens=64, do_sample=False)
        torch.cuda.synchronize()
        print(f"generate 64 tokens (warm-up): {time.perf_counter() - t0:.3f} s")
        gen = cuda_ms(
            lambda: model.generate(short, max_new_tokens=64, do_sample=False, min_new_tokens=64), reps=3, warmup=1
        )
        print("generate 64 tokens, batch 8, prompt 128:", summary(gen), out.shape)
    if args.skip_liger:
        return
    model.train()
    opt_free = [p for p in model.parameters()]

    def step(m):
        out = m(ids, labels=ids)
        out.loss.backward()
        for p in opt_free:
            p.grad = None

    print("train step original:", summary(cuda_ms(lambda: step(model), reps=10)))
    del model
    torch.cuda.empty_cache()
    from liger_kernel.transformers import apply_liger_kernel_to_llama

    apply_liger_kernel_to_llama()
    model = build_model("llama", "realistic", device="cuda", dtype=torch.bfloat16).train()
    opt_free = [p for p in model.parameters()]
    print("train step liger:", summary(cuda_ms(lambda: step(model), reps=10)))


def moe(args) -> None:
    model = build_model("qwen3_moe", "realistic", device="cuda", dtype=torch.bfloat16).eval()
    ids = make_inputs("qwen3_moe", "realistic", 8, 1024, "cuda")
    n = sum(p.numel() for p in model.parameters())
    print(
        f"qwen3_moe: {n / 1e6:.0f}M parameters, experts implementation {getattr(model.config, '_experts_implementation', None)}"
    )
    with torch.no_grad():
        print("prefill eager:", summary(cuda_ms(lambda: model(ids), reps=10)))
        top_kernels(lambda: model(ids), n=15)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--skip-liger", action="store_true")
    p.add_argument("--skip-moe", action="store_true")
    args = p.parse_args()
    import transformers
    import triton

    print(
        "torch",
        torch.__version__,
        "transformers",
        transformers.__version__,
        "triton",
        triton.__version__,
        torch.cuda.get_device_name(0),
        torch.cuda.device_count(),
        "GPUs",
    )
    grouped_mm_probe()
    llama(args)
    if not args.skip_moe:
        moe(args)


if __name__ == "__main__":
    main()
