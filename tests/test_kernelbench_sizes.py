"""The field's real sizes, counted on the meta device (shapes, no memory) from KernelBench's own task
files as vendored in tests/kernelbench/ (MIT; NOTICE.md there). The judge's GPU runs use them at these
sizes (bench/judge_latency.py --big); this keeps the numbers quoted in docs/judge.md honest."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kernelfix.tools import task_size

KB = Path(__file__).parent / "kernelbench" / "level1"
GiB = 2**30


def sizes(path: Path) -> tuple[int, int]:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    size = task_size.on_meta(mod)  # what the reference worker counts before it allocates
    assert size is not None, f"{path.name} does not run on the meta device"
    return size.input_bytes, size.output_bytes


@pytest.mark.parametrize(
    "task,gib_in,gib_out",
    [
        ("19_ReLU", 6, 6),
        ("23_Softmax", 6, 6),
        ("45_Average_Pooling_2D", 16, None),
        ("47_Sum_reduction_over_a_dimension", 8, None),
        ("88_MinGPTNewGelu", 0.25, 0.25),
    ],
)
def test_published_sizes(task, gib_in, gib_out):
    i, o = sizes(KB / f"{task}.py")
    assert i == pytest.approx(gib_in * GiB, rel=0.01)
    if gib_out is not None:
        assert o == pytest.approx(gib_out * GiB, rel=0.01)


def test_the_vendored_files_carry_kernelbenchs_licence():
    notice = (KB.parent / "NOTICE.md").read_text()
    assert "MIT License" in notice and "ScalingIntelligence/KernelBench" in notice
