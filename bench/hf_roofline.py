"""Where the time goes after the swaps, and each hand-written kernel's distance from its roofline (bench/tune_hf.py).

- The tuned model's prefill under torch.profiler: the GPU kernels by name (ms per forward, share), and the library
  GEMMs' achieved TFLOPS (the profiler's FLOP count of aten::mm/addmm over their GPU time) against the H200's bf16 peak.
- Each kernel of examples/tune/hf/src at the model's own shapes, alone: its time (CUDA events, median of the calls),
  the bytes it must move (each input read once, each output written once), the bandwidth that makes, against a
  measured device-to-device copy and against the H200's 4.8 TB/s.
"""

from __future__ import annotations

import statistics

import torch
from hf_measure import H200_BF16_TFLOPS, H200_SPEC_TBS, SRC, build, tokens, tuned_model


def _src(name: str):
    from kernelfix.capture.files import import_file

    return import_file(SRC / f"{name}.py", f"hf_src_{name}")


def _time_ms(fn, device: torch.device, calls: int = 30) -> float:
    from kernelfix.tune.timing import call_ms

    for _ in range(3):
        fn()
    return statistics.median(call_ms(fn, device) for _ in range(calls))


def copy_tbs(device: torch.device, mib: int = 1024) -> float | None:
    """Measured device-to-device copy bandwidth (read + write) in TB/s; None on a CPU."""
    if device.type != "cuda":
        return None
    x = torch.empty(mib * 2**20 // 2, device=device, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    ms = _time_ms(lambda: y.copy_(x), device, 20)
    return 2 * x.nbytes / (ms * 1e-3) / 1e12


def kernel_table(model, ids, device: torch.device, steps: int = 3) -> dict:
    """The model's forward under torch.profiler: kernels by GPU time per forward (CPU ops' own time on a CPU)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.no_grad():
        model(ids)
        with profile(activities=acts, with_flops=True) as prof:
            for _ in range(steps):
                model(ids)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
    rows, gemms = [], []
    for e in prof.key_averages():
        if device.type == "cuda" and e.device_type == torch.autograd.DeviceType.CUDA:
            rows.append({"kernel": e.key[:120], "calls": e.count / steps, "ms": e.device_time_total / 1e3 / steps})
        elif device.type == "cpu" and e.device_type == torch.autograd.DeviceType.CPU and e.key.startswith("aten::"):
            rows.append({"kernel": e.key, "calls": e.count / steps, "ms": e.self_cpu_time_total / 1e3 / steps})
        if e.flops and e.device_type == torch.autograd.DeviceType.CPU and device.type == "cuda" and e.device_time_total:
            tflops = e.flops / (e.device_time_total * 1e-6) / 1e12
            gemms.append(
                {
                    "op": e.key,
                    "calls": e.count / steps,
                    "ms": e.device_time_total / 1e3 / steps,
                    "tflops": round(tflops, 1),
                    "of_peak": round(tflops / H200_BF16_TFLOPS, 3),
                }
            )
    total = sum(r["ms"] for r in rows) or 1.0
    rows.sort(key=lambda r: -r["ms"])
    for r in rows:
        r["share"] = round(r["ms"] / total, 4)
        r["ms"] = round(r["ms"], 4)
    return {"total_ms": round(total, 3), "kernels": rows[:25], "gemms": gemms}


def _llama_kernels(cfg, b: int, t: int, device, dtype, train: bool) -> list[tuple[str, str, object, int]]:
    """(kernel, shape, call, bytes) for the Llama's kernels at the model's shapes."""
    norm, mlp, attn = _src("rmsnorm"), _src("swiglu_mlp"), _src("rope_attention")
    m, c, i = b * t, cfg.hidden_size, cfg.intermediate_size
    h, hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    d = c // h
    e = torch.finfo(dtype).bits // 8
    rnd = lambda *s: torch.randn(*s, device=device, dtype=dtype)  # noqa: E731
    x, w = rnd(m, c), rnd(c)
    g, u = rnd(m, i), rnd(m, i)
    ql, kl, vl, cos, sin = rnd(m, h * d), rnd(m, hkv * d), rnd(m, hkv * d), rnd(1, t, d), rnd(1, t, d)
    out = [
        ("rmsnorm_fwd", f"[{m}, {c}]", lambda: norm.rmsnorm_forward(x, w, 1e-6), 2 * m * c * e + c * e + 4 * m),
        ("swiglu_fwd", f"[{m}, {i}]", lambda: mlp.swiglu(g, u), 3 * m * i * e),
        (
            "rope_qkv_fwd",
            f"q [{m}, {h}x{d}], k/v [{m}, {hkv}x{d}]",
            lambda: attn.rope_qkv(ql, kl, vl, cos, sin, b, t, h, hkv, d, False),
            2 * m * (h + 2 * hkv) * d * e + 2 * t * d * e,
        ),
    ]
    if train:
        _, x2, rstd = norm.rmsnorm_forward(x, w, 1e-6)
        q4, k4 = rnd(b, t, h, d), rnd(b, hkv, t, d)
        out += [
            ("rmsnorm_bwd", f"[{m}, {c}]", lambda: norm.rmsnorm_backward(x, x2, w, rstd), 3 * m * c * e + 4 * m),
            ("swiglu_bwd", f"[{m}, {i}]", lambda: mlp.swiglu_backward(g, g, u), 5 * m * i * e),
            (
                "rope_qkv_bwd",
                f"q [{m}, {h}x{d}], k/v [{m}, {hkv}x{d}]",
                lambda: attn.rope_qkv_backward(q4, k4, k4, k4, k4, cos, sin, b, t, h, hkv, d),
                (2 * h + 6 * hkv) * m * d * e,
            ),
        ]
    return out


def _moe_kernels(cfg, b: int, t: int, device, dtype) -> list[tuple[str, str, object, int]]:
    norm, moe = _src("rmsnorm"), _src("moe_experts")
    n, c, k, ne = (
        b * t,
        cfg.hidden_size,
        cfg.num_experts_per_tok,
        getattr(cfg, "num_experts", None) or cfg.num_local_experts,
    )
    inter = getattr(cfg, "moe_intermediate_size", None) or cfg.intermediate_size
    h, d = cfg.num_attention_heads, getattr(cfg, "head_dim", None) or c // cfg.num_attention_heads
    s, e = n * k, torch.finfo(dtype).bits // 8
    x = torch.randn(n, c, device=device, dtype=dtype)
    idx = torch.randint(0, ne, (n * k,), device=device)
    pos, _ = moe.route(idx, ne)
    wts = torch.rand(n * k, device=device, dtype=dtype)
    gu, y, qn, wq = (
        torch.randn(s, 2 * inter, device=device, dtype=dtype),
        torch.randn(s, c, device=device, dtype=dtype),
        torch.randn(n * h, d, device=device, dtype=dtype),
        torch.randn(d, device=device, dtype=dtype),
    )
    return [
        ("moe_route", f"{s} choices, {ne} experts", lambda: moe.route(idx, ne), 2 * s * 8 + s * 4),
        ("moe_gather", f"[{s}, {c}]", lambda: moe.gather(x, pos, k), 2 * s * c * e + s * 4),
        ("moe_swiglu", f"[{s}, {inter}]", lambda: moe.swiglu_halves(gu), 3 * s * inter * e),
        (
            "moe_combine",
            f"[{n}, {c}] from {k} rows each",
            lambda: moe.combine(y, pos, wts, n, k, dtype),
            (k + 1) * n * c * e + s * (4 + e),
        ),
        (
            "rmsnorm_fwd (q_norm)",
            f"[{n * h}, {d}]",
            lambda: norm.rmsnorm_forward(qn, wq, 1e-6),
            2 * n * h * d * e + 4 * n * h,
        ),
        ("rmsnorm_fwd", f"[{n}, {c}]", lambda: norm.rmsnorm_forward(x, x[0], 1e-6), 2 * n * c * e + 4 * n),
    ]


def profile(family, size, device, dtype, batch, seq, tuned_dir, swaps: str, train: bool) -> dict:
    dev = torch.device(device)
    model = tuned_model(tuned_dir, build(family, size, device, dtype), swaps)
    ids = tokens(family, size, batch, seq, device)
    out: dict = {"after_swaps": kernel_table(model, ids, dev)}
    bw = copy_tbs(dev)
    out["copy_tbs"] = None if bw is None else round(bw, 3)
    cfg = model.config
    specs = (
        _llama_kernels(cfg, batch, seq, dev, dtype, train)
        if family == "llama"
        else _moe_kernels(cfg, batch, seq, dev, dtype)
    )
    rows = []
    for name, shape, fn, nbytes in specs:
        ms = _time_ms(fn, dev, 30 if dev.type == "cuda" else 2)
        tbs = nbytes / (ms * 1e-3) / 1e12
        rows.append(
            {
                "kernel": name,
                "shape": shape,
                "ms": round(ms, 4),
                "bytes": nbytes,
                "tbs": round(tbs, 3),
                "of_copy": None if bw is None else round(tbs / bw, 3),
                "of_spec": round(tbs / H200_SPEC_TBS, 3),
            }
        )
    out["roofline"] = rows
    return out
