"""The shape block: torch.fx ShapeProp in a sandboxed child."""

from __future__ import annotations

from agent_support import CORPUS, TASK, make_session, reply, write_replay

from kernelfix.agent.events import TurnJudged
from kernelfix.agent.models import ReplayModel
from kernelfix.agent.shapes import shape_block
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.judge import Judge


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


def test_the_reference_starts_while_the_shape_block_runs(tmp_path, monkeypatch):
    """A new session waits for two children before its first prompt, the task's reference and the
    shape block: the reference is already starting when the shape block's child runs."""
    import kernelfix.agent.graph as graph

    order = []

    def watched_shapes(task_path, **kw):
        order.append("shape block")
        return shape_block(task_path, **kw)

    monkeypatch.setattr(graph, "shape_block", watched_shapes)
    with Judge(TASK, JudgeConfig(device="cpu", run_timeout_s=120), workdir=tmp_path / "judge") as judge:
        for obj, name, what in (
            (judge.ref, "start_background", "reference starts"),
            (judge, "reference", "reference waited for"),
        ):
            real = getattr(obj, name)
            monkeypatch.setattr(
                obj, name, lambda *a, real=real, what=what, **kw: (order.append(what), real(*a, **kw))[1]
            )
        model = ReplayModel(write_replay(tmp_path / "replay.jsonl", [reply("triton_relu_ok.py")]))
        session = make_session(tmp_path, model, judge, shape_block=True, max_turns=1)
        assert session.run().success
    assert order[:3] == ["reference starts", "shape block", "reference waited for"], order
    (judged,) = [e for e in session.events if isinstance(e, TurnJudged)]
    assert "arg 0: float32[16, 2048], strides (2048, 1), contiguous" in judged.turn.messages[1].content
