"""The shape block: torch.fx ShapeProp in a sandboxed child."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from agent_support import CORPUS, TASK, make_session, reply, write_replay

from kernelfix.agent.events import TurnJudged
from kernelfix.agent.models import ReplayModel
from kernelfix.agent.shapes import shape_block
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.judge import Judge

# One worker runs this file's tests, so that the session below (its shape block's child among its children) is run
# once for the two tests that read it.
pytestmark = pytest.mark.xdist_group("agent_shapes")


@pytest.fixture(scope="module")
def relu_session(tmp_path_factory):
    """A new session on a fresh judge, with the shape block: the order its children were started and waited for
    in, and what shape_block returned for the relu task, in the session's own call (a sandboxed child of its own)."""
    import kernelfix.agent.graph as graph

    tmp_path = tmp_path_factory.mktemp("shapes_session")
    order, returned = [], []

    def watched_shapes(task_path, **kw):
        order.append("shape block")
        returned.append(shape_block(task_path, **kw))
        return returned[-1]

    with pytest.MonkeyPatch.context() as monkeypatch:
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
            success = session.run().success
    return SimpleNamespace(session=session, success=success, order=order, returned=returned)


def test_shapes_strides_and_contiguity_of_inputs_outputs_and_ops(relu_session):
    # shape_block on the relu task, as the session called it (the task's copy in the session's directory, the
    # judge's run timeout: the default's 120 s): one child for this test and the next one's session.
    ((block, problem),) = relu_session.returned
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


def test_the_reference_starts_while_the_shape_block_runs(relu_session):
    """A new session waits for two children before its first prompt, the task's reference and the
    shape block: the reference is already starting when the shape block's child runs."""
    assert relu_session.success
    order = relu_session.order
    assert order[:3] == ["reference starts", "shape block", "reference waited for"], order
    (judged,) = [e for e in relu_session.session.events if isinstance(e, TurnJudged)]
    assert "arg 0: float32[16, 2048], strides (2048, 1), contiguous" in judged.turn.messages[1].content
