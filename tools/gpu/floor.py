"""[judge] The task's floor: the least time any kernel can take on this GPU, from the bytes it must move and
the FLOPs it must do, and how far eager PyTorch and the best kernel so far are from it.

The first prompt gives the floor (the bytes in and out at peak DRAM bandwidth, the reference's
matmul/conv FLOPs at the peak for the task's precision) and eager's time as a multiple of it; each
later turn says how far the best kernel is (prompts/blocks.py says both). The peak for a float32 task is the
better of the CUDA cores' FP32 rate and a third of TF32's: three TF32 products keep float32's
accuracy (plain TF32 fails the judge's precision check), and they are what a float32 matmul should
use. Measured on the H100 (``bench/fp32_gemm.py``, docs/feedback.md): Triton's tf32x3 is the fastest
float32 product the judge accepts (55 TFLOP/s at 4096-8192, ahead of FP32 FMAs at 43-44 and cuBLAS
FP32 at 51-53), a third of this bound: the floor is what the tensor cores allow, not what today's
compilers reach.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class TaskFloor(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_bytes: int
    output_bytes: int
    flops: float | None = None  # matmul/conv FLOPs of one forward
    gpu: str | None = None
    dram_gbps: float | None = None  # peak
    peak_tflops: float | None = None  # for the task's precision
    precision: str | None = None  # which peak that is, in words
    eager_ms: float | None = None
    compile_ms: float | None = None

    @property
    def memory_us(self) -> float | None:
        if not self.dram_gbps:
            return None
        return (self.input_bytes + self.output_bytes) / (self.dram_gbps * 1e9) * 1e6

    @property
    def compute_us(self) -> float | None:
        if not self.flops or not self.peak_tflops:
            return None
        return self.flops / (self.peak_tflops * 1e12) * 1e6

    @property
    def floor_us(self) -> float | None:
        parts = [x for x in (self.memory_us, self.compute_us) if x is not None]
        return max(parts) if parts else None


def peak_for(spec, dtypes: list[str]) -> tuple[float | None, str | None]:
    """The compute peak (TFLOP/s) that bounds a task of these dtypes, and its name."""
    if spec is None:
        return None, None
    peaks = spec.peak_tflops
    if "float16" in dtypes and peaks.get("fp16"):
        return peaks["fp16"], "fp16 tensor cores"
    if "bfloat16" in dtypes and peaks.get("bf16"):
        return peaks["bf16"], "bf16 tensor cores"
    fp32, tf32 = peaks.get("fp32"), peaks.get("tf32")
    if tf32 and (not fp32 or tf32 / 3 > fp32):
        return tf32 / 3, "float32 as three TF32 tensor-core products"
    return fp32, "FP32 CUDA cores" if fp32 else None


def build(
    *,
    input_bytes: int,
    output_bytes: int,
    flops: float | None,
    dtypes: list[str],
    gpu_props: dict,
    eager_ms: float | None = None,
    compile_ms: float | None = None,
) -> TaskFloor:
    """The floor from what the reference worker reported (sizes, FLOPs, dtypes, the GPU's numbers)."""
    spec = None
    if gpu_props:
        from kernelfix.tools.gpu import specs as gpu_specs

        spec = gpu_specs.measured(gpu_props)
    peak, precision = peak_for(spec, dtypes)
    return TaskFloor(
        input_bytes=input_bytes,
        output_bytes=output_bytes,
        flops=flops or None,
        gpu=spec.name if spec else None,
        dram_gbps=spec.dram_gbps if spec else None,
        peak_tflops=peak,
        precision=precision,
        eager_ms=eager_ms,
        compile_ms=compile_ms,
    )
