"""The blocks of the system and task prompts, rendered from the judge's data: the measured compile times
(compile/times.py), the NVRTC note where NVRTC works, the GPU's numbers (gpu/specs.py), the task's floor
(gpu/floor.py) and the shapes of a task with input sets."""

from __future__ import annotations

from kernelfix.tools.compile import nvrtc, times
from kernelfix.tools.gpu.floor import TaskFloor
from kernelfix.tools.gpu.specs import KB, MB, GpuSpec
from kernelfix.tools.task_size import size_text

_PROMPT_ROWS: list[tuple[str, times.Layout]] = [
    ("a `.cu` that includes torch headers (load_inline's usual layout)", "cu_torch"),
    ("a `.cu` with CUDA headers only", "cu_plain"),
    ("the binding in `cpp_sources` with `#include <torch/extension.h>` first (precompiled)", "host_pch"),
]


def build_times_block(object_cache: bool = True) -> str:
    """The measured compile times the system prompt quotes, one line per layout, each with its basis."""
    refs = [(text, layout, times.reference(layout)) for text, layout in _PROMPT_ROWS]
    bases = {r.basis for _, _, r in refs if r}
    lines = ["Measured compile time of one translation unit (an extension's `.cu` and binding compile in parallel):"]
    for text, layout, r in refs:
        if r is None:
            continue
        reuse = "; reused, not recompiled, while it stays unchanged" if layout == "host_pch" and object_cache else ""
        basis = f" ({r.basis})" if len(bases) > 1 else ""
        lines.append(f"- {text}: {r.seconds:g} s{basis}{reuse}")
    if len(bases) == 1:
        lines.append(f"({bases.pop()}.)")
    return "\n".join(lines)


def nvrtc_line(device: str) -> str:
    """The system prompt's note on NVRTC, only where :func:`available`."""
    if not nvrtc.available(device):
        return ""
    return (
        "- A single kernel with no C++ wrapper can also be compiled by NVRTC in well under a second: "
        '`k = torch.cuda._compile_kernel(src, "name")` for an `extern "C" __global__` kernel in `src`, launched in `forward` '
        "as `k(grid=(gx, 1, 1), block=(bx, 1, 1), args=[...])` on the current stream; tensors pass as pointers, "
        "Python ints as 32-bit `int`, Python floats as `double`."
    )


def _size(n: int) -> str:
    if n >= MB:
        return f"{n / MB:g} MB"
    return f"{n / KB:g} KB" if n >= KB else f"{n} B"


def gpu_block(spec: GpuSpec) -> str:
    """A compact block for the system prompt."""
    tc = [f"{p} {spec.peak_tflops[p]:g}" for p in ("tf32", "fp16", "bf16") if p in spec.peak_tflops]
    peaks = []
    if "fp32" in spec.peak_tflops:
        peaks.append(f"fp32 {spec.peak_tflops['fp32']:g} (CUDA cores)")
    if tc:
        peaks.append(", ".join(tc) + " (tensor cores)")
    lines = [
        f"GPU: {spec.name}: {spec.sms} SMs, DRAM {f'{spec.dram_gbps:g}' if spec.dram_gbps else '?'} GB/s, "
        f"L2 {_size(spec.l2_bytes) if spec.l2_bytes else '?'}",
        "Peak dense TFLOP/s: " + ("; ".join(peaks) if peaks else "unknown"),
        f"Per SM: {_size(spec.smem_per_sm_bytes) if spec.smem_per_sm_bytes else '?'} shared memory "
        f"({_size(spec.smem_per_block_bytes) if spec.smem_per_block_bytes else '?'} per block, opt-in), "
        f"{spec.regs_per_sm} registers ({spec.max_regs_per_thread} per thread), {spec.max_threads_per_sm} threads",
    ]
    ridges = [f"{label} {r:.0f}" for label, p in (("fp32", "fp32"), ("fp16 tensor", "fp16")) if (r := spec.ridge(p))]
    if ridges:
        lines.append("Ridge point (FLOP per DRAM byte; below it a kernel is memory-bound): " + ", ".join(ridges))
    return "\n".join(lines)


def floor_text(f: TaskFloor) -> str:
    """The floor, for the first prompt (a paragraph; empty when nothing is known)."""
    floor = f.floor_us
    moved = size_text(f.input_bytes + f.output_bytes)
    parts = [f"This task reads {size_text(f.input_bytes)} and writes {size_text(f.output_bytes)}"]
    if f.memory_us is not None:
        parts[0] += f": {moved} at the {f.gpu or 'GPU'}'s peak {f.dram_gbps:,.0f} GB/s is {f.memory_us:,.1f} us"
    if f.flops:
        line = f"It does {f.flops / 1e9:,.4g} GFLOP of matmul/conv work"
        if f.compute_us is not None:
            line += f": at {f.peak_tflops:,.0f} TFLOP/s ({f.precision}) that is {f.compute_us:,.1f} us"
        parts.append(line)
    if floor is not None:
        bound = "memory" if f.compute_us is None or (f.memory_us or 0) >= f.compute_us else "compute"
        parts.append(f"No kernel can beat the larger of these: the floor is {floor:,.1f} us ({bound}-bound)")
        if f.eager_ms:
            parts.append(
                f"Eager PyTorch takes {f.eager_ms * 1e3:,.1f} us, {f.eager_ms * 1e3 / floor:.1f}x the floor"
                + (f"; torch.compile {f.compile_ms * 1e3:,.1f} us" if f.compile_ms else "")
            )
    return ". ".join(parts) + "."


def floor_distance(f: TaskFloor, best_ms: float | None) -> str:
    """How far a kernel of ``best_ms`` is from the floor, for a later turn."""
    floor = f.floor_us
    if floor is None or not best_ms:
        return ""
    return f"The best kernel so far takes {best_ms * 1e3:,.1f} us, {best_ms * 1e3 / floor:.1f}x the floor of {floor:,.1f} us."


def input_sets_block(shapes: list[str] | None) -> str | None:
    """What the first prompt says of the sets: the kernel must serve every shape, ranked by the geometric mean."""
    if not shapes:
        return None
    rows = "\n".join(f"  set {k}: {s}" for k, s in enumerate(shapes, start=1))
    return (
        f"The model calls this module at {len(shapes)} input shapes (the task's get_input_sets()). Your kernel is judged "
        f"at every one (a wrong output at any shape fails it) and timed at each; the geometric mean of the speedups ranks it. "
        f"Do not hard-code sizes or block widths that fit only one of them:\n{rows}"
    )
