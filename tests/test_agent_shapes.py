"""The shape block: torch.fx ShapeProp in a sandboxed child."""

from __future__ import annotations

from agent_support import CORPUS, TASK
from kernelfix.agent.shapes import shape_block


def test_shapes_strides_and_contiguity_of_inputs_outputs_and_ops():
    block, problem = shape_block(TASK)
    assert problem is None
    assert "arg 0: float32[16, 2048], strides (2048, 1), contiguous" in block
    assert "output:\n  relu: float32[16, 2048]" in block
    assert "relu = relu(x)" in block


def test_untraceable_task_falls_back_to_running_forward(tmp_path):
    task = tmp_path / "branchy.py"
    task.write_text(
        "import torch, torch.nn as nn\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x.t() if x.sum() > -1e9 else x\n"  # data-dependent: torch.fx cannot trace it
        "def get_inputs():\n    return [torch.randn(8, 4)]\n"
        "def get_init_inputs():\n    return []\n"
    )
    block, problem = shape_block(task)
    assert problem is None
    assert "output: float32[4, 8], strides (1, 4), non-contiguous" in block
    assert "could not trace" in block


def test_a_broken_task_gives_a_reason_not_a_crash():
    block, problem = shape_block(CORPUS / "tasks" / "broken_import.py")
    assert block is None and "ModuleNotFoundError" in problem
