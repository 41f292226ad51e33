"""Putting the kernel back: kernelfix.load_best and `kernelfix swap`.

Most tests build a session directory through the session API and write its best.py
themselves (a plain-torch ModelNew stands for the kernel a session found), so load_best's
own work is what they time. The last test runs the whole path on CPU: capture the example
transformer's MLP, optimize it with the replay model (the Triton kernel judged for real, in
Triton's interpreter), load the best kernel into the model and check the model's output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import kernelfix
from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.models import make_model
from kernelfix.agent.session import Session
from kernelfix.agent.session_dir import SessionDir
from kernelfix.capture.errors import CallMismatch, SwapCheckFailed
from kernelfix.capture.files import CaptureFiles, import_file
from kernelfix.capture.pipeline import capture
from kernelfix.capture.swap import attribute_path
from kernelfix.cli import main
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.task import Task

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "models" / "tiny_transformer.py"

SCRIPT = """
import torch
import torch.nn as nn

class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.gain = nn.Parameter(torch.linspace(0.5, 2.0, 4))
    def forward(self, x, *, scale, bias=None, causal=False):
        y = x * scale * self.gain
        if causal:
            y = torch.tril(y)
        return {"y": y, "sum": y.sum()}

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Scaled()
    def forward(self, x):
        return self.inner(x, scale=torch.full((4, 4), 0.5), causal=True)["y"]

torch.manual_seed(0)
model = Net()
model(torch.randn(4, 4))
"""

KERNEL = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, weights):
        super().__init__()
        self.gain = nn.Parameter(torch.load(weights, weights_only=True)["gain"])
    def forward(self, x, scale):
        y = torch.tril(x * scale * self.gain){wrong}
        return {{"y": y, "sum": y.sum()}}
"""


def _capture(tmp_path: Path, keep_call: bool = True) -> tuple[Path, object]:
    script = tmp_path / "user_model.py"
    script.write_text(SCRIPT)
    task = tmp_path / "scaled.py"
    capture(script, "model.inner", task, keep_call=keep_call)
    return task, _user_model(script)


def _user_model(script: Path):
    """The user's model object, rebuilt the way their script builds it."""
    mod = import_file(script, "user_model")
    return mod.model


def _session(tmp_path: Path, task: Path, best: str | None) -> Path:
    d = tmp_path / "session"
    SessionDir.create(
        d, task=Task.load(task), model="replay:none", agent=AgentConfig(), judge=JudgeConfig(device="cpu")
    )
    if best is not None:
        (d / "best.py").write_text(textwrap.dedent(best))
    return d


def test_load_best_replaces_the_module_and_checks_it(tmp_path):
    task, model = _capture(tmp_path)
    session = _session(tmp_path, task, KERNEL.format(wrong=""))
    original = model.inner
    swapped = kernelfix.load_best(session, original)
    assert [(c.against, c.ok) for c in swapped.checks] == [("captured_call", True), ("original_module", True)]
    model.inner = swapped
    x, s = torch.randn(4, 4), torch.full((4, 4), 0.5)
    with torch.no_grad():
        want = original(x, scale=s, causal=True)
        assert torch.equal(model(x), want["y"])
        got = swapped(x, causal=True, scale=s)  # keywords in another order
    assert torch.equal(got["y"], want["y"]) and swapped.fallbacks == 0
    with pytest.warns(UserWarning, match=r"kwargs\['causal'\] is False; the capture fixed it to True"):
        out = swapped(x, scale=s, causal=False)  # not what the kernel was judged on: the original runs it
    assert torch.equal(out["y"], original(x, scale=s, causal=False)["y"]) and swapped.fallbacks == 1
    bare = kernelfix.load_best(session)
    # torch.compile's path was checked (an aot_eager compile) at the first load; another instance of the kernel takes it
    assert swapped.compile_path.kind == "traced" and swapped.compile_path.checks
    assert bare.compile_path.kind == "traced" and bare.compile_path.note.startswith(
        "as every instance of this kind: checked compiled"
    )
    with pytest.raises(CallMismatch, match=r"args\[0\] is float32\[2, 4\]; the kernel was judged on float32\[4, 4\]"):
        bare(torch.randn(2, 4), scale=s, causal=True)


def test_a_wrong_kernel_fails_the_check(tmp_path, capsys):
    task, model = _capture(tmp_path)
    session = _session(tmp_path, task, KERNEL.format(wrong=" * 1.001"))
    with pytest.raises(SwapCheckFailed, match=r"against the captured call: .*outside atol 0\.0001, rtol 0\.0001"):
        kernelfix.load_best(session, model.inner)
    assert main(["swap", str(session), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"] and report["checks"][0]["against"] == "captured_call" and not report["checks"][0]["ok"]


def test_without_the_captured_call_it_checks_against_the_task(tmp_path):
    task, _ = _capture(tmp_path, keep_call=False)
    assert not CaptureFiles(task).call.exists()
    swapped = kernelfix.load_best(_session(tmp_path, task, KERNEL.format(wrong="")))
    assert [(c.against, c.ok) for c in swapped.checks] == [("task_model", True)]


def test_swap_cli(tmp_path, capsys):
    task, _ = _capture(tmp_path)
    session = _session(tmp_path, task, None)
    assert main(["swap", str(session)]) == 1  # no correct kernel yet
    assert "no correct kernel yet" in capsys.readouterr().err
    (session / "best.py").write_text(KERNEL.format(wrong=""))
    assert main(["swap", str(session)]) == 0
    out = capsys.readouterr().out
    assert (
        f"model.inner = kernelfix.load_best({str(session)!r}, model.inner)" in out
        and "check against the captured call: ok" in out
    )
    relu = _session(tmp_path / "other", ROOT / "examples" / "tasks" / "relu.py", "")
    assert main(["swap", str(relu)]) == 2  # not a captured task
    assert "was not made by `kernelfix capture`" in capsys.readouterr().err


def test_attribute_path():
    assert attribute_path("model.blocks.0.mlp") == "model.blocks[0].mlp"
    assert attribute_path("net.heads.out-proj") == "net.heads['out-proj']"


SWAP = """
import json, sys
import torch
import kernelfix
sys.path.insert(0, {models!r})
from tiny_transformer import build, tokens

model, ids = build(), tokens()
with torch.no_grad():
    want = model(ids)
    model.blocks[1].mlp = kernelfix.load_best({session!r}, model.blocks[1].mlp)
    got = model(ids)
m = model.blocks[1].mlp
print(json.dumps({{"checks": [c.ok for c in m.checks], "fallbacks": m.fallbacks, "kernel": type(m.kernel).__name__,
                  "max_diff": (got - want).abs().max().item()}}))
"""


def test_capture_optimize_swap_on_cpu(tmp_path):
    """The example transformer's MLP: captured, optimized by the replay model's Triton kernel, swapped back."""
    task = tmp_path / "mlp.py"
    capture(EXAMPLE, "model.blocks.1.mlp", task)
    replay = tmp_path / "mlp.jsonl"  # the example replay's correct turn only, to keep the test short
    replay.write_text((ROOT / "examples" / "replays" / "tiny_mlp.jsonl").read_text().splitlines()[1] + "\n")
    session = Session.create(
        tmp_path / "session",
        task_path=task,
        model=make_model(f"replay:{replay}", AgentConfig()),
        agent=AgentConfig(max_turns=1, shape_block=False),
        judge_config=JudgeConfig(device="cpu", trials=2),
    )
    outcome = session.run()
    assert outcome.success and outcome.best_turn == 1
    # The user's side, in a process of its own: Triton runs on the CPU only when its interpreter is chosen at import.
    script = tmp_path / "use_kernel.py"
    script.write_text(SWAP.format(models=str(EXAMPLE.parent), session=str(tmp_path / "session")))
    run = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "TRITON_INTERPRET": "1"},
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.splitlines()[-1])
    assert result["checks"] == [True, True] and result["fallbacks"] == 0 and result["kernel"] == "ModelNew"
    assert result["max_diff"] < 1e-5


PAIR = """
import torch
import torch.nn as nn

class Attn(nn.Module):  # returns (output, None), as a transformers attention without its weights does
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0.5, 2.0, 4))
    def forward(self, x):
        return x * self.w, None

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attn()
    def forward(self, x):
        y, none = self.attn(x)
        return y + 1 if none is None else y

torch.manual_seed(0)
model = Net()
model(torch.randn(3, 4))
"""

PAIR_KERNEL = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, weights):
        super().__init__()
        self.w = nn.Parameter(torch.load(weights, weights_only=True)["w"])
    def forward(self, x):
        return x * self.w, None
"""


def test_a_none_in_the_output_stays_none_under_the_custom_operator(tmp_path):
    """An operator returns tensors only: the None beside them (an attention's weights) is rebuilt, eager and compiled."""
    script = tmp_path / "pair_model.py"
    script.write_text(PAIR)
    task = tmp_path / "attn.py"
    capture(script, "model.attn", task)
    model = _user_model(script)
    swapped = kernelfix.load_best(_session(tmp_path, task, PAIR_KERNEL), model.attn, trace=False)
    assert swapped.compile_path.kind == "custom_op"
    model.attn = swapped
    x = torch.randn(3, 4)
    with torch.no_grad():
        want = x * torch.linspace(0.5, 2.0, 4) + 1
        assert torch.allclose(model(x), want)
        assert torch.allclose(torch.compile(model, fullgraph=True, backend="aot_eager")(x), want)


def test_a_none_in_the_output_stays_none_through_the_custom_operator():
    """A transformers attention returns (output, None): the operator returns only the tensors, and the rebuilt output
    puts None back where the module had it, in a tuple and in a dict, eager and under torch.compile."""
    import torch.nn as nn

    from kernelfix.capture.calls import output_layout, rebuild
    from kernelfix.capture.custom_op import meta_reference, register

    class Attention(nn.Module):
        def forward(self, x):
            return x * 2, None, {"weights": None, "cache": x + 1}

    class Kernel(nn.Module):  # the swapped kernel: the same structure, its own arithmetic
        def forward(self, x):
            return x + x, None, {"weights": None, "cache": 1 + x}

    op, spec, tensor_at = register(
        Kernel(), meta_reference(Attention()), "model.attn", [torch.empty(3, 4, device="meta")]
    )
    assert tensor_at == [0, 3]  # the leaves (out, None, None, cache): two tensors
    layout = output_layout(spec, tensor_at)
    x = torch.randn(3, 4)
    for call in (
        lambda t: rebuild(layout, op([t])),
        torch.compile(lambda t: rebuild(layout, op([t])), backend="eager", fullgraph=True),
    ):
        out, weights, rest = call(x)
        assert torch.equal(out, x * 2) and weights is None
        assert rest["weights"] is None and torch.equal(rest["cache"], x + 1)
