"""A task with get_input_sets(): every shape judged, a failure names its shape, the speedup is a geometric mean.

The task's row softmax meets rows of 1000 (set 1, get_inputs()'s shape) and rows of 4096 (set 2).
A Triton kernel whose block is fixed at 1024 is right at 1000 and wrong at 4096: judged on
get_inputs() alone it would be `ok`. Both candidates run under Triton's interpreter on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import has_cuda

from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.judge import Judge
from kernelfix.tools.verdict import Category

HERE = Path(__file__).parent / "shapes"
TASK = HERE / "softmax_sets_task.py"


def _judge(tmp_path_factory, device: str) -> Judge:
    cfg = JudgeConfig(device=device, run_timeout_s=120, compile_timeout_s=600, trials=2)
    return Judge(TASK, cfg, workdir=tmp_path_factory.mktemp(f"judge-sets-{device}"))


@pytest.fixture(scope="module")
def cpu_judge(tmp_path_factory):
    with _judge(tmp_path_factory, "cpu") as j:
        yield j


def test_every_shape_is_judged_and_a_wrong_one_is_named(cpu_judge):
    honest = cpu_judge.evaluate((HERE / "softmax_any_width.py").read_text())
    assert honest.category == Category.OK, honest.message
    assert [s.shapes for s in honest.input_sets] == ["x float32[8, 1000]", "x float32[7, 4096]"]
    assert all(s.ok and s.trials >= 2 for s in honest.input_sets)
    # each set ran its own trials and its own varied inputs, every one right
    by_set = {k: [t for t in honest.correctness.trials if t.input_set == k] for k in (1, 2)}
    assert all(len(ts) >= 2 and all(t.ok for t in ts) for ts in by_set.values())
    assert {t.variant for t in by_set[2] if t.variant} == {"scaled", "shifted", "heavy_tailed"}
    assert "set 2: x float32[7, 4096]: right on" in honest.feedback

    fixed = cpu_judge.evaluate((HERE / "softmax_fixed_block.py").read_text())
    assert fixed.category.family.value == "correctness_error", (
        fixed.message
    )  # garbage past the block: NaN or wrong values
    assert fixed.message.startswith("inputs set 2: x float32[7, 4096]: trial "), fixed.message
    assert [s.ok for s in fixed.input_sets] == [True, False]  # right where get_inputs() alone would look
    assert "set 2: x float32[7, 4096]: WRONG" in fixed.feedback
    print(f"\nhonest: {honest.category.value}; fixed block: {fixed.category.value}: {fixed.message[:120]}")


def test_geometric_mean_ranks():
    from kernelfix.tools import input_sets

    assert input_sets.geomean([2.0, 0.5]) == pytest.approx(1.0)
    assert input_sets.geomean([4.0, None]) is None  # a set not timed ranks nothing
    plan = input_sets.plan(5, JudgeConfig(trials=2), 2)
    assert len({t.index for t in plan}) == len(plan) and len({t.seed for t in plan}) == len(plan)
    assert all(t.variant_of is None or plan[t.variant_of].input_set == t.input_set for t in plan)


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs a CUDA GPU")
def test_each_shape_is_timed_on_the_gpu(tmp_path_factory):
    with _judge(tmp_path_factory, "cuda") as j:
        v = j.evaluate((HERE / "softmax_any_width.py").read_text())
    assert v.category == Category.OK, v.message
    assert all(s.timings and s.timings.candidate and s.speedup_eager for s in v.input_sets)
    assert v.speedup_eager == pytest.approx(input_sets_geomean(v), rel=1e-6)
    print("\n" + "\n".join(line for line in v.feedback.splitlines() if "set " in line or "geometric" in line))


def input_sets_geomean(v) -> float:
    from kernelfix.tools import input_sets

    return input_sets.geomean([s.speedup_eager for s in v.input_sets])


def test_the_counted_size_is_the_largest_sets():
    """The early too-large refusal and the warm-up limit read one trial's size: with several input
    sets, the largest bounds what a trial holds, not get_inputs()'s."""
    import types

    import torch

    from kernelfix.tools.task_size import on_meta

    class Model(torch.nn.Module):
        def forward(self, x):
            return x.sum(dim=1)

    task = types.SimpleNamespace(
        Model=Model,
        get_init_inputs=lambda: [],
        get_inputs=lambda: [torch.randn(8, 1000)],
        get_input_sets=lambda: [[torch.randn(8, 1000)], [torch.randn(4096, 4096)]],
    )
    size = on_meta(task)
    assert size.input_bytes == 4096 * 4096 * 4 and size.output_bytes == 4096 * 4
    del task.get_input_sets
    assert on_meta(task).input_bytes == 8 * 1000 * 4
