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
    # The engine's own work (AccumulateGrad into .grad, the summed gradients) is not the candidate's.
    assert v.legality is not None and v.legality.backward_ops == {"empty_like": v.legality.backward_ops["empty_like"]}
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
    from kernelfix.agent import prompting
    from kernelfix.tools.config import JudgeConfig

    assert "autograd" not in prompting.system_prompt(JudgeConfig(), "cuda")  # forward-only sessions: as before
    text = prompting.system_prompt(JudgeConfig(backward=True), "cuda")
    assert "The backward pass is judged" in text and "ctx.save_for_backward" in text and "What to save" in text


def test_flag_wins_over_the_task(tmp_path):
    from kernelfix.cli.common import _common_judge_args
    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tools.judge import Judge

    import argparse

    p = argparse.ArgumentParser()
    _common_judge_args(p)
    assert p.parse_args(["--backward"]).backward is True and p.parse_args(["--no-backward"]).backward is False
    assert p.parse_args([]).backward is None
    task = Path(__file__).parent / "corpus" / "tasks"
    for path, cfg, want in [(task / "scale_bw.py", None, True), (task / "scale_bw.py", False, False), (task / "relu.py", None, False), (task / "relu.py", True, True)]:
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
    assert v.legality is not None and "empty_like" in (v.legality.backward_ops or {}) and not v.legality.forbidden_backward_ops
    cheat = judges("scale_bw", "cuda").evaluate((CASES / "scale_bw_torch.py").read_text(), filename="scale_bw_torch.py")
    assert cheat.category == Category.DISALLOWED_ATEN, cheat.message
