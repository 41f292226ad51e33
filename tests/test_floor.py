"""The task's floor (tools/gpu/floor.py) and where the model reads it: the first prompt states it with
eager's distance from it, later turns say how far the best kernel is."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernelfix.agent import messages as prompts
from kernelfix.prompts.blocks import floor_distance, floor_text
from kernelfix.tools.gpu import floor


def h100():
    return SimpleNamespace(
        name="NVIDIA H100 80GB HBM3",
        dram_gbps=3350.0,
        peak_tflops={"fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4},
    )


def test_an_elementwise_task_is_memory_bound_and_eager_is_measured_against_it():
    f = floor.TaskFloor(input_bytes=256 << 20, output_bytes=256 << 20, gpu="H100", dram_gbps=3350.0, eager_ms=0.2)
    assert f.memory_us == pytest.approx((512 << 20) / 3350e9 * 1e6)
    text = floor_text(f)
    assert "reads 0.25 GiB and writes 0.25 GiB" in text and "3,350 GB/s" in text and "(memory-bound)" in text
    assert f"{200 / f.floor_us:.1f}x the floor" in text
    assert (
        floor_distance(f, 0.4)
        == f"The best kernel so far takes 400.0 us, {400 / f.floor_us:.1f}x the floor of {f.floor_us:,.1f} us."
    )


def test_a_half_precision_matmul_is_held_to_the_tensor_core_peak_and_float32_to_three_tf32_products():
    assert floor.peak_for(h100(), ["float16"]) == (989.4, "fp16 tensor cores")
    peak, name = floor.peak_for(h100(), ["float32"])
    assert peak == pytest.approx(494.7 / 3) and "three TF32" in name
    f = floor.TaskFloor(
        input_bytes=64 << 20,
        output_bytes=32 << 20,
        flops=2 * 4096**3,
        gpu="H100",
        dram_gbps=3350.0,
        peak_tflops=989.4,
        precision="fp16 tensor cores",
    )
    assert f.compute_us > f.memory_us and "(compute-bound)" in floor_text(f) and "137.4 GFLOP" in floor_text(f)


def test_prompts_carry_the_floor_and_the_gpu_block():
    f = floor.TaskFloor(input_bytes=1 << 20, output_bytes=1 << 20, dram_gbps=1000.0, gpu="G")
    task = prompts.task_prompt("t", "class Model: ...", shape_block=None, goal="g", floor=floor_text(f))
    assert "The floor: This task reads" in task and "1,000 GB/s" in task
    from kernelfix.tools.config import JudgeConfig

    sys_prompt = prompts.system_prompt(JudgeConfig(), "cuda", gpu_block="GPU: H100, 132 SMs")
    assert "GPU: H100, 132 SMs" in sys_prompt or "$gpu" not in prompts.template("system").template
