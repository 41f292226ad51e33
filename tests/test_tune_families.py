"""`kernelfix tune` on the models people run, built from tiny transformers configs with random weights: which run it
is (a training step only when the script calls backward() on the model's result), targets as an expert chooses them
(copies of one layer are one target, a parent over the norms inside it, what capture refuses marked and passed over),
and the table a person reads."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

from kernelfix.agent.agent_config import AgentConfig  # noqa: E402
from kernelfix.cli import main  # noqa: E402
from kernelfix.tools.config import JudgeConfig  # noqa: E402
from kernelfix.tune.flow import Tune, TuneOptions  # noqa: E402
from kernelfix.tune.tune_config import TuneConfig  # noqa: E402
from kernelfix.tune.tune_report import label  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "models" / "hf_decoder.py"
CFG = TuneConfig(profile_steps=3, min_share=0.01)


def rank(tmp_path: Path, script: Path, args: list[str], *, backward: bool | None = None, top: int = 3):
    lines: list[str] = []
    opts = TuneOptions(
        script=script,
        out=tmp_path / "tuned",
        llm="(none: --rank-only)",
        top=top,
        cfg=CFG,
        judge=JudgeConfig(device="cpu"),
        agent=AgentConfig(),
        script_args=args,
        backward=backward,
        rank_only=True,
    )
    r = Tune(opts, say=lines.append, run_sessions=lambda jobs: {}).run()
    return r, "\n".join(lines)


@pytest.mark.parametrize(
    "family,mode,trains,why",
    [
        ("llama", "no-grad", False, "inference: under torch.no_grad()"),
        ("llama", "eval", False, "inference: the script never calls backward() on its result"),
        ("qwen3", "inference", False, "inference: under torch.inference_mode()"),
        ("gpt2", "train", True, "a training step: backward() on its result at hf_decoder.py:"),
        ("qwen3_moe", "generate", False, "inference: under torch.no_grad()"),
        ("bert", "train", True, "a training step: backward() on its result"),
        ("vit", "eval", False, "inference: the script never calls backward()"),
        ("mixtral", "no-grad", False, "inference"),
    ],
)
def test_each_family_is_ranked_for_what_the_script_does_and_its_targets_captured(tmp_path, family, mode, trains, why):
    r, text = rank(tmp_path, SCRIPT, ["--family", family, "--mode", mode])
    assert r.backward is trains and r.why.startswith(why)
    assert text.splitlines()[0].startswith(f"profiling model ({type_name(r)}) on cpu, {why.split(':')[0]} (")
    chosen = [m for m in r.modules if m.candidate]
    assert chosen and [m.rank for m in chosen] == list(range(1, len(chosen) + 1))
    # Capture took the targets in rank order (its checks before any session); each task imports and reproduces its call.
    captured = [m for m in chosen if m.capture == "ok"]
    assert captured and all(m.selected and Path(m.task).is_file() for m in captured)
    assert len(captured) == min(3, len(chosen)) or any(m.capture not in (None, "ok") for m in chosen)
    for (
        line
    ) in text.splitlines():  # the table a person reads: 120 columns (a task's path may run over), no profiler chatter
        assert len(line) <= 120 or "tasks/" in line, line
    assert "USDT" not in text and "profiler_start" not in text


def type_name(r) -> str:
    return r.model_class.rsplit(".", 1)[-1]


def test_copies_of_a_layer_are_one_target_and_a_parent_beats_its_norms(tmp_path):
    r, text = rank(tmp_path, SCRIPT, ["--family", "qwen3", "--mode", "no-grad"])
    attn = next(m for m in r.modules if m.module_class == "Qwen3Attention")
    # The two layers' attentions are one target, ranked by their summed share, each instance's share kept.
    assert attn.candidate and label(attn) == "Qwen3Attention x2"
    assert [i.module for i in attn.instances] == ["model.model.layers.0.self_attn", "model.model.layers.1.self_attn"]
    assert attn.share == pytest.approx(sum(i.share for i in attn.instances), abs=1e-5)
    assert "Qwen3Attention x2" in text and "model.model.layers.1.self_attn " not in text
    # The attention is chosen over the q and k norms inside it: what it adds (projections, rotary embedding, the
    # attention itself) is most of its time.
    norms = [m for m in r.modules if m.module.endswith(("q_norm", "k_norm"))]
    assert norms and all(not m.candidate for m in norms)
    assert attn.chosen_because.startswith(
        ("chosen over Qwen3RMSNorm inside it", "chosen: no smaller target")
    )  # (norms under 1% here)
    # A decoder layer adds two residual adds to its parts: the time is in the parts, tuned through them.
    layer = next(m for m in r.modules if m.module_class == "Qwen3DecoderLayer")
    assert not layer.candidate and layer.reason.endswith("tuned through them") and len(layer.instances) == 2
    # The model itself, a stack of layers, is not a kernel.
    stack = next(m for m in r.modules if m.module == "model.model")
    assert not stack.candidate and stack.reason.startswith("a stack of layers")


UNCAPTURABLE = """
import torch
import torch.nn as nn

class Router(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 32)
        self.scale = nn.Linear(32, 32)

    def forward(self, x):
        y = torch.relu(self.proj(x)) * 2.0 + 1.0
        for i in (y[:, 0] > 1.0).nonzero().flatten().tolist():  # a loop over the data's values: export refuses it
            y[i] = y[i] * 0.5
        return torch.sigmoid(self.scale(y)) * y + y

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = Router()
        self.out = nn.Linear(32, 32)

    def forward(self, x):
        h = self.router(x)
        return torch.tanh(self.out(h)) * h + torch.exp(-h) - h.sin()

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return self.block(x)

torch.manual_seed(0)
model = Net()
with torch.no_grad():
    model(torch.randn(64, 32))
"""


def test_a_target_capture_refuses_is_marked_and_what_it_holds_takes_its_place(tmp_path):
    script = tmp_path / "net.py"
    script.write_text(UNCAPTURABLE)
    r, text = rank(tmp_path, script, [])
    block = next(m for m in r.modules if m.module == "model.block")
    router = next(m for m in r.modules if m.module == "model.block.router")
    assert not block.candidate and block.reason.startswith("capture cannot take it: cannot capture model.block:")
    assert (
        "torch.export cannot trace a read of a tensor's value into Python (.tolist()" in block.reason
        and "net.py:" in block.reason
    )
    assert block.reason in r.uncapturable.values()
    # The router holds the same loop: refused too, and no session was planned for either.
    assert not router.candidate and router.reason.startswith("capture cannot take it")
    assert "capture cannot take it" in text and not r.selected


def test_device_cuda_without_a_gpu_is_a_usage_error(capsys):
    if __import__("torch").cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main(["tune", str(SCRIPT), "--rank-only", "--device", "cuda"]) == 2
    assert "--device cuda" in capsys.readouterr().err
