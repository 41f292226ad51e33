"""--backward (docs/backward.md): gradients judged, the backward's ops policed, on the CPU with
Triton's interpreter. One judge for the task, shared: each case is a candidate worker's few seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelfix.tools.verdict import Category

CASES = Path(__file__).parent / "corpus" / "backward"


def _judge(judges, name: str):
    v = judges("scale_bw", "cpu").evaluate((CASES / name).read_text(), filename=name)
    return v


def test_honest_triton_backward_passes_with_no_false_positive(judges):
    v = _judge(judges, "scale_bw_ok.py")
    assert v.category == Category.OK, v.message
    # Its backward's allocations, and AccumulateGrad's detach into .grad (allowed); no compute of the engine's.
    assert v.legality is not None and set(v.legality.backward_ops or {}) == {"empty_like", "detach"}
    assert not v.legality.forbidden_backward_ops


def test_wrong_gradient_is_named(judges):
    v = _judge(judges, "scale_bw_wrong.py")
    assert v.category == Category.NUMERICAL
    assert "grad of parameter weight" in v.message and "grad of input" not in v.message
    assert v.feedback.startswith("Wrong gradient on trial") and "chain rule" in v.feedback


def test_backward_in_torch_ops_is_disallowed(judges):
    v = _judge(judges, "scale_bw_torch.py")
    assert v.category == Category.DISALLOWED_ATEN
    assert v.message.startswith("backward ran torch compute ops") and "mul" in v.message and "sum" in v.message


def test_output_without_gradient_fails_clearly(judges):
    v = _judge(judges, "scale_bw_nograd.py")
    assert v.category == Category.NO_GRADIENT
    assert "carries no gradient" in v.message and "autograd.Function" in v.message
    assert "ctx.save_for_backward" in v.feedback


def test_prompt_says_backward_is_judged():
    from kernelfix.agent import messages as prompts
    from kernelfix.tools.config import JudgeConfig

    assert "autograd" not in prompts.system_prompt(JudgeConfig(), "cuda")  # forward-only sessions: as before
    text = prompts.system_prompt(JudgeConfig(backward=True), "cuda")
    assert "The backward pass is judged" in text and "ctx.save_for_backward" in text and "What to save" in text


def test_flag_wins_over_the_task(tmp_path):
    import argparse

    from kernelfix.cli.common import add_judge_args
    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tools.judge import Judge

    p = argparse.ArgumentParser()
    add_judge_args(p)
    assert p.parse_args(["--backward"]).backward is True and p.parse_args(["--no-backward"]).backward is False
    assert p.parse_args([]).backward is None
    task = Path(__file__).parent / "corpus" / "tasks"
    for path, cfg, want in [
        (task / "scale_bw.py", None, True),
        (task / "scale_bw.py", False, False),
        (task / "relu.py", None, False),
        (task / "relu.py", True, True),
    ]:
        with Judge(path, JudgeConfig(device="cpu", backward=cfg), workdir=tmp_path / f"{path.stem}-{cfg}") as j:
            assert j.config.backward is want


@pytest.mark.gpu
def test_forward_backward_timed_and_ranked(judges):
    v = judges("scale_bw", "cuda").evaluate((CASES / "scale_bw_ok.py").read_text(), filename="scale_bw_ok.py")
    assert v.category == Category.OK, v.message
    t = v.timings
    assert t is not None and t.backward is not None and {"candidate", "eager"} <= set(t.backward)
    for name, p in t.backward.items():
        assert p.forward is not None and p.forward_backward is not None and p.backward_ms is not None, name
    # What ranks under --backward is forward+backward.
    assert t.candidate == t.backward["candidate"].forward_backward and t.eager == t.backward["eager"].forward_backward
    # The engine runs a CUDA backward on its device threads: the recorder must see the candidate's ops there too.
    assert (
        v.legality is not None
        and "empty_like" in (v.legality.backward_ops or {})
        and not v.legality.forbidden_backward_ops
    )
    cheat = judges("scale_bw", "cuda").evaluate((CASES / "scale_bw_torch.py").read_text(), filename="scale_bw_torch.py")
    assert cheat.category == Category.DISALLOWED_ATEN, cheat.message


@pytest.mark.parametrize("grad", [True, False])
def test_capture_in_training_writes_a_backward_task(tmp_path, grad):
    from kernelfix.capture.files import CaptureFiles
    from kernelfix.capture.pipeline import capture
    from kernelfix.tools.task import Task

    script = tmp_path / "train.py"
    wrap = "" if grad else "with torch.no_grad():\n    "
    script.write_text(
        "import torch\nimport torch.nn as nn\n\ntorch.manual_seed(0)\nmodel = nn.Sequential(nn.Linear(8, 4))\n"
        f"{wrap}model(torch.randn(2, 8))\n"
    )
    files = CaptureFiles(tmp_path / "lin.py")
    m = capture(script, "model", files.task).manifest
    assert m.backward is grad and Task.load(files.task).declares_backward is grad


def test_load_best_of_a_training_capture_has_a_working_backward(tmp_path):
    """A task captured in training says BACKWARD = True; the swapped module's gradients are the original's."""
    import torch
    from test_capture_swap import KERNEL, _capture, _session

    import kernelfix
    from kernelfix.tools.task import Task

    task, model = _capture(tmp_path)
    assert Task.load(task).declares_backward
    session = _session(tmp_path, task, KERNEL.format(wrong=""))
    swapped = kernelfix.load_best(session, model.inner, trace=False)  # the custom operator and its registered backward
    x, s = torch.randn(4, 4, requires_grad=True), torch.full((4, 4), 0.5)
    g = torch.randn(4, 4)
    swapped(x, scale=s, causal=True)["y"].backward(g)
    got_x, got_gain = x.grad.clone(), swapped.kernel.gain.grad.clone()
    x.grad = None
    model.inner(x, scale=s, causal=True)["y"].backward(g)
    assert torch.allclose(got_x, x.grad) and torch.allclose(got_gain, model.inner.gain.grad)
    # The backward is registered with the custom operator: a training step compiles whole (Dynamo and
    # AOTAutograd, which traces the registered formula; aot_eager spares the CPU a C++ build).
    assert swapped.op_name and "swap_" in swapped.op_name
    compiled = torch.compile(swapped, fullgraph=True, backend="aot_eager")
    swapped.kernel.gain.grad, x.grad = None, None
    compiled(x, scale=s, causal=True)["y"].backward(g)
    assert torch.allclose(x.grad, got_x) and torch.allclose(swapped.kernel.gain.grad, got_gain)
    # Left to choose, load_best finds that Dynamo traces this (plain torch) kernel, backward included,
    # and keeps that path: its check compiled a training step and compared the gradients.
    traced = kernelfix.load_best(session, model.inner)
    assert traced.compile_path.kind == "traced" and traced.op_name is None
    assert [(c.against, c.ok) for c in traced.compile_path.checks] == [("captured_call", True), ("gradients", True)]


def test_baseline_says_which_tasks_have_a_backward(tmp_path):
    from kernelfix.cli import baseline_run as baseline
    from kernelfix.cli.baseline import table
    from kernelfix.tools.config import JudgeConfig

    # 3_broken: torch's own backward fails (45_Average_Pooling_2D's CUDA error on the H100 was one)
    broken = (
        "class Broken(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n        return x * 2\n"
        "    @staticmethod\n    def backward(ctx, g):\n        raise RuntimeError('CUDA error: invalid argument')\n\n"
    )
    for name, head, body in [
        ("1_relu", "", "torch.relu(x)"),
        ("2_argmax", "", "torch.argmax(x, dim=1)"),
        ("3_broken", broken, "Broken.apply(x)"),
    ]:
        (tmp_path / f"{name}.py").write_text(
            f"import torch\nimport torch.nn as nn\n\n{head}class Model(nn.Module):\n    def forward(self, x):\n"
            f"        return {body}\n\ndef get_inputs():\n    return [torch.randn(8, 16)]\n\ndef get_init_inputs():\n    return []\n"
        )
    cfg = JudgeConfig(
        device="cpu", backward=True, trials=1, input_variants=[], float64_reference=False, reference_cache_gb=0.0
    )
    report = baseline.run(baseline.find_tasks([str(tmp_path)]), cfg, out=None)
    rows = {r.task: r for r in report.rows}
    assert rows["1_relu"].status == "ok"
    assert rows["2_argmax"].status == "no_backward" and "does not require grad" in rows["2_argmax"].error
    assert rows["3_broken"].status == "task_error"
    assert "invalid argument in torch's own backward of Model on trial 0" in rows["3_broken"].error
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(table(report, {}))
    text = console.export_text()
    assert "eager fwd+bwd ms" in text and "no backward" in text


def test_replay_goes_from_a_wrong_gradient_to_a_right_one(tmp_path, judges):
    """examples/replays/scale_train.jsonl on the shared judge: the prompt says backward is judged, turn 1's
    weight gradient is wrong and named in the feedback, turn 2 is right."""
    from agent_support import REPO, check_session_dir

    from kernelfix.agent.agent_config import AgentConfig
    from kernelfix.agent.models import ReplayModel
    from kernelfix.agent.session import Session

    judge = judges("scale_bw", "cpu")
    s = Session.create(
        tmp_path / "session",
        task_path=Path(__file__).parent / "corpus" / "tasks" / "scale_bw.py",
        model=ReplayModel(REPO / "examples" / "replays" / "scale_train.jsonl"),
        agent=AgentConfig(shape_block=False, max_turns=2),
        judge_config=judge.config,
        judge=judge,
    )
    s.run()
    traj = check_session_dir(tmp_path / "session")
    cats = [t.verdict.category for t in traj.turns]
    assert cats == [Category.NUMERICAL, Category.OK], [t.verdict.message for t in traj.turns]
    assert "grad of parameter weight" in traj.turns[0].feedback
    assert "The backward pass is judged" in traj.turns[0].messages[0].content


def test_recorder_blames_hooks_not_the_engine():
    """In-process: the engine's sum of two gradients of one tensor is not counted; a hook's compute is."""
    import torch

    from kernelfix.tools.workers.candidate.recorder import OpRecorder, mark_function_backward

    class Copy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return torch.empty_like(x).copy_(x)

        @staticmethod
        def backward(ctx, g):
            return torch.empty_like(g).copy_(g)

    def record(forward):
        r = OpRecorder()
        mark_function_backward(r)
        x = torch.randn(4, requires_grad=True)
        with torch.enable_grad():
            out = r.run(forward, x)
            r.run_backward(torch.autograd.backward, list(out), [torch.randn(4) for _ in out])
        return r.backward_ops()

    both = record(lambda x: (Copy.apply(x), Copy.apply(x)))  # x's two gradients: the engine adds them
    assert "aten::add" not in both and "aten::add_" not in both and both["aten::copy_"] == 2

    def hooked(x):
        x.register_hook(lambda g: g * 2)  # the gradient computed by torch, in a hook
        return (Copy.apply(x),)

    assert "aten::mul" in record(hooked)


@pytest.mark.gpu
def test_the_profile_tells_forward_from_backward_kernels(judges):
    """Nsight Compute (or torch.profiler where ncu cannot run) over one forward and its backward: each
    kernel says which pass launched it, and the feedback gives each pass its share."""
    v = judges("scale_bw", "cuda", {"profile": True}).evaluate(
        (CASES / "scale_bw_ok.py").read_text(), filename="scale_bw_ok.py"
    )
    assert v.category == Category.OK, v.message
    p = v.profile
    print(f"[cuda] profile ({p.source}): {[(k.part, k.name, k.calls) for k in p.kernels]}; {p.highlights[:2]}")
    assert {k.part for k in p.kernels} == {"forward", "backward"}, p.kernels
    assert any(h.startswith("Forward and backward") for h in p.highlights)
