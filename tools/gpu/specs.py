"""[judge] What the GPU can do: datasheet numbers for the common NVIDIA GPUs, (prompts/blocks.py shows them to the model).

    spec = measured(props) or lookup(torch.cuda.get_device_name())
    text = render(spec)  # name, SMs, DRAM GB/s, peak TFLOP/s, L2, shared memory, registers, ridge point

Peaks are dense (no 2:4 sparsity) at the boost clock, as NVIDIA's datasheets give them: fp64 and fp32 on the
CUDA cores (fp64 without the tensor cores' DMMA; where a datasheet gives none, the architecture's 1/64 of fp32
from its whitepaper: Ada and GA10x), tf32/fp16/bf16 on the tensor cores (fp16 and bf16 with fp32 accumulation). A precision a
GPU lacks (TF32 and BF16 on Volta) is left out of ``peak_tflops``. Per-SM limits are the CUDA C++
Programming Guide's table for the compute capability. ``measured`` lets the driver's numbers win
(a MIG slice, a clocked-down part) and scales the peaks by the SMs actually present.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

__all__ = ["GpuSpec", "TABLE", "lookup", "measured"]

KB = 1024
MB = 1024 * 1024

# Where the numbers come from.
_CUDA_GUIDE = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#features-and-technical-specifications"
_H100_DS = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_HOPPER_WP = "https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper"
_HOPPER_TUNING = "https://docs.nvidia.com/cuda/hopper-tuning-guide/index.html"
_H200_DS = "https://www.nvidia.com/en-us/data-center/h200/"
_A100_DS = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
_AMPERE_WP = "https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/nvidia-ampere-architecture-whitepaper.pdf"
_AMPERE_TUNING = "https://docs.nvidia.com/cuda/ampere-tuning-guide/index.html"
_ADA_WP = "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"
_L40S_DS = "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413"
_L4_DS = "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet"
_A10_DS = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf"
_G5 = "https://aws.amazon.com/ec2/instance-types/g5/"
_V100_DS = "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
_VOLTA_WP = "https://images.nvidia.com/content/volta-architecture/pdf/volta-architecture-whitepaper.pdf"


class GpuSpec(BaseModel):
    name: str
    sms: int
    dram_gbps: float  # GB/s (1e9 bytes), peak
    peak_tflops: dict[str, float] = Field(
        default_factory=dict
    )  # fp64/fp32 (CUDA cores), tf32/fp16/bf16 (tensor cores, dense)
    l2_bytes: int
    smem_per_sm_bytes: int
    smem_per_block_bytes: int  # the opt-in maximum for one block (dynamic shared memory)
    regs_per_sm: int = 65536
    regs_per_block: int = 65536
    max_regs_per_thread: int = 255
    max_threads_per_sm: int = 2048
    source: str = ""  # the documents the numbers come from
    patterns: list[list[str]] = Field(default_factory=list, exclude=True)  # name tokens that identify it (lookup)

    def fp64_rate(self) -> str | None:
        """FP64's rate against FP32 in words ("half", "1/64 of"), from the peaks; None where either is unknown."""
        fp64, fp32 = self.peak_tflops.get("fp64"), self.peak_tflops.get("fp32")
        if not fp64 or not fp32:
            return None
        ratio = fp32 / fp64
        return "half" if abs(ratio - 2) < 0.3 else f"1/{ratio:.0f} of"

    def ridge(self, precision: str) -> float | None:
        """FLOP per DRAM byte above which work at this precision stops being memory-bound."""
        peak = self.peak_tflops.get(precision)
        return peak * 1e12 / (self.dram_gbps * 1e9) if peak and self.dram_gbps else None


def _sm90(**kw: Any) -> GpuSpec:  # Hopper, compute capability 9.0
    base = dict(smem_per_sm_bytes=228 * KB, smem_per_block_bytes=227 * KB, max_threads_per_sm=2048)
    return GpuSpec(**{**base, **kw})


def _sm80(**kw: Any) -> GpuSpec:  # A100, compute capability 8.0
    base = dict(smem_per_sm_bytes=164 * KB, smem_per_block_bytes=163 * KB, max_threads_per_sm=2048)
    return GpuSpec(**{**base, **kw})


def _sm86_89(**kw: Any) -> GpuSpec:  # GA10x (8.6) and Ada (8.9)
    base = dict(smem_per_sm_bytes=100 * KB, smem_per_block_bytes=99 * KB, max_threads_per_sm=1536)
    return GpuSpec(**{**base, **kw})


def _sm70(**kw: Any) -> GpuSpec:  # Volta, compute capability 7.0
    base = dict(smem_per_sm_bytes=96 * KB, smem_per_block_bytes=96 * KB, max_threads_per_sm=2048)
    return GpuSpec(**{**base, **kw})


TABLE: list[GpuSpec] = [
    _sm90(
        name="NVIDIA H100 SXM5 80GB",
        sms=132,
        dram_gbps=3350.0,
        l2_bytes=50 * MB,
        peak_tflops={"fp64": 33.5, "fp32": 66.9, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4},
        patterns=[["h100"], ["h100", "sxm"], ["h100", "sxm5"], ["h100", "hbm3"], ["h100", "80gb", "hbm3"]],
        source=f"H100 SXM datasheet {_H100_DS}; Hopper whitepaper {_HOPPER_WP}; {_HOPPER_TUNING}; {_CUDA_GUIDE}",
    ),
    _sm90(
        name="NVIDIA H100 PCIe 80GB",
        sms=114,
        dram_gbps=2000.0,
        l2_bytes=50 * MB,
        peak_tflops={"fp64": 25.6, "fp32": 51.2, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0},
        patterns=[["h100", "pcie"]],
        source=f"H100 PCIe datasheet {_H100_DS}; Hopper whitepaper {_HOPPER_WP}; {_CUDA_GUIDE}",
    ),
    _sm90(
        name="NVIDIA H100 NVL 94GB",
        sms=132,
        dram_gbps=3900.0,
        l2_bytes=50 * MB,
        peak_tflops={"fp64": 30.0, "fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5},
        patterns=[["h100", "nvl"]],
        source=f"H100 NVL datasheet {_H100_DS}; {_CUDA_GUIDE}",
    ),
    _sm90(
        name="NVIDIA H200 SXM 141GB",
        sms=132,
        dram_gbps=4800.0,
        l2_bytes=60 * MB,
        peak_tflops={"fp64": 33.5, "fp32": 66.9, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4},
        patterns=[["h200"]],
        source=f"H200 datasheet {_H200_DS} (L2 as the driver reports it: the datasheet gives none); {_CUDA_GUIDE}",
    ),
    _sm80(
        name="NVIDIA A100 SXM4 80GB",
        sms=108,
        dram_gbps=2039.0,
        l2_bytes=40 * MB,
        peak_tflops={"fp64": 9.7, "fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
        patterns=[["a100", "80gb"], ["a100", "sxm4", "80gb"]],
        source=f"A100 datasheet {_A100_DS}; Ampere whitepaper {_AMPERE_WP}; {_AMPERE_TUNING}; {_CUDA_GUIDE}",
    ),
    _sm80(
        name="NVIDIA A100 PCIe 80GB",
        sms=108,
        dram_gbps=1935.0,
        l2_bytes=40 * MB,
        peak_tflops={"fp64": 9.7, "fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
        patterns=[["a100", "80gb", "pcie"]],
        source=f"A100 datasheet {_A100_DS}; Ampere whitepaper {_AMPERE_WP}; {_CUDA_GUIDE}",
    ),
    _sm80(
        name="NVIDIA A100 SXM4 40GB",
        sms=108,
        dram_gbps=1555.0,
        l2_bytes=40 * MB,
        peak_tflops={"fp64": 9.7, "fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
        patterns=[["a100"], ["a100", "40gb"], ["a100", "sxm4", "40gb"]],
        source=f"A100 datasheet {_A100_DS}; Ampere whitepaper {_AMPERE_WP}; {_AMPERE_TUNING}; {_CUDA_GUIDE}",
    ),
    _sm86_89(
        name="NVIDIA L40S",
        sms=142,
        dram_gbps=864.0,
        l2_bytes=96 * MB,
        peak_tflops={"fp64": 1.43, "fp32": 91.6, "tf32": 183.0, "fp16": 362.05, "bf16": 362.05},
        patterns=[["l40s"]],
        source=f"L40S datasheet {_L40S_DS}; Ada whitepaper {_ADA_WP} (L2 of the AD102 chip); {_CUDA_GUIDE}",
    ),
    _sm86_89(
        name="NVIDIA L4",
        sms=58,
        dram_gbps=300.0,
        l2_bytes=48 * MB,
        peak_tflops={"fp64": 0.47, "fp32": 30.3, "tf32": 60.0, "fp16": 121.0, "bf16": 121.0},
        patterns=[["l4"]],
        source=f"L4 datasheet {_L4_DS}; Ada whitepaper {_ADA_WP}; {_CUDA_GUIDE}",
    ),
    _sm86_89(
        name="NVIDIA A10G",
        sms=80,
        dram_gbps=600.0,
        l2_bytes=6 * MB,
        peak_tflops={"fp64": 0.55, "fp32": 35.0, "tf32": 70.0, "fp16": 140.0, "bf16": 140.0},
        patterns=[["a10g"]],
        source=(
            f"no NVIDIA datasheet for the A10G (AWS's part, {_G5}): the A10 datasheet's per-SM rates {_A10_DS} "
            f"scaled to 80 SMs at 1710 MHz; Ampere whitepaper {_AMPERE_WP}; {_CUDA_GUIDE}"
        ),
    ),
    _sm86_89(
        name="NVIDIA GeForce RTX 4090",
        sms=128,
        dram_gbps=1008.0,
        l2_bytes=72 * MB,
        peak_tflops={"fp64": 1.29, "fp32": 82.6, "tf32": 82.6, "fp16": 165.2, "bf16": 165.2},
        patterns=[["4090"], ["rtx", "4090"]],
        source=f"Ada whitepaper {_ADA_WP} (tensor rates with fp32 accumulation); {_CUDA_GUIDE}",
    ),
    _sm70(
        name="NVIDIA V100 SXM2",
        sms=80,
        dram_gbps=900.0,
        l2_bytes=6 * MB,
        peak_tflops={"fp64": 7.8, "fp32": 15.7, "fp16": 125.0},
        patterns=[["v100"], ["v100", "sxm2"]],
        source=f"V100 datasheet {_V100_DS}; Volta whitepaper {_VOLTA_WP}; {_CUDA_GUIDE}",
    ),
    _sm70(
        name="NVIDIA V100 PCIe",
        sms=80,
        dram_gbps=900.0,
        l2_bytes=6 * MB,
        peak_tflops={"fp64": 7.0, "fp32": 14.0, "fp16": 112.0},
        patterns=[["v100", "pcie"]],
        source=f"V100 datasheet {_V100_DS}; Volta whitepaper {_VOLTA_WP}; {_CUDA_GUIDE}",
    ),
]


def _tokens(name: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", name.lower()))


def lookup(device_name: str) -> GpuSpec | None:
    """The table's entry for a device name as torch or nvidia-smi gives it ("NVIDIA H100 80GB HBM3",
    "NVIDIA A100-SXM4-40GB", "Tesla V100-SXM2-32GB"): the entry with the most specific pattern whose
    tokens all appear in the name; None for a GPU not in the table."""
    tokens = _tokens(device_name)
    best: tuple[int, int, GpuSpec] | None = None
    for order, spec in enumerate(TABLE):
        for pattern in spec.patterns:
            if set(pattern) <= tokens and (best is None or len(pattern) > best[0]):
                best = (len(pattern), -order, spec)
    return best[2].model_copy(deep=True) if best else None


def _int(props: Mapping[str, Any], key: str) -> int | None:
    value = props.get(key)
    try:
        return int(value) if value is not None and int(value) > 0 else None
    except (TypeError, ValueError):
        return None


def measured(props: Mapping[str, Any]) -> GpuSpec | None:
    """A spec from what the driver reports (torch.cuda.get_device_properties as a dict, plus
    ``memory_clock_khz`` and ``memory_bus_width``), the rest from :func:`lookup`; reported values win.

    DRAM bandwidth is 2 x memory clock x bus width (double data rate); the peaks are the datasheet's,
    scaled by reported SMs / datasheet SMs (a MIG slice has fewer SMs). None when the name is not in
    the table and the driver gave no SM count."""
    name = str(props.get("name") or "")
    base = lookup(name) if name else None
    sms = _int(props, "multi_processor_count")
    if base is None:
        if sms is None:
            return None
        base = GpuSpec(
            name=name or "unknown GPU",
            sms=sms,
            dram_gbps=0.0,
            l2_bytes=0,
            smem_per_sm_bytes=0,
            smem_per_block_bytes=0,
            source="driver-reported; no datasheet entry for this GPU",
        )
    else:
        base.source = f"driver-reported where given; else {base.source}"
        if name:
            base.name = name
    if sms and sms != base.sms and base.sms:
        base.peak_tflops = {k: round(v * sms / base.sms, 2) for k, v in base.peak_tflops.items()}
    if sms:
        base.sms = sms
    clock, width = _int(props, "memory_clock_khz"), _int(props, "memory_bus_width")
    if clock and width:
        base.dram_gbps = round(2 * clock * 1e3 * width / 8 / 1e9, 1)
    for key, field in (
        ("L2_cache_size", "l2_bytes"),
        ("shared_memory_per_block_optin", "smem_per_block_bytes"),
        ("shared_memory_per_multiprocessor", "smem_per_sm_bytes"),
        ("regs_per_multiprocessor", "regs_per_sm"),
        ("max_threads_per_multi_processor", "max_threads_per_sm"),
    ):
        if (value := _int(props, key)) is not None:
            setattr(base, field, value)
    return base
