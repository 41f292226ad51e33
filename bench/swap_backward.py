"""A kernel with a backward, swapped into a model that trains under torch.compile(fullgraph=True) (issues 25-26).

    python3 -P bench/swap_backward.py                 # on the GPU: inductor
    python3 -P bench/swap_backward.py --device cpu    # Triton's interpreter, the aot_eager backend

1. A user's script trains a small model (grad enabled) whose `scale` module is `x * weight`;
   `capture` lifts it into a task that says BACKWARD = True.
2. A session's best.py is a Triton `torch.autograd.Function` for it (the kernels and Function of
   examples/candidates/scale_train_triton.py; no model is run here, the kernel is given).
3. `kernelfix.load_best` swaps it in (traced by Dynamo, autograd.Function and all, where its check
   of a compiled training step passes; else a custom operator with its backward registered); a training
   step of `torch.compile(model, fullgraph=True)` is compared with the original model's: the loss and
   the gradients of the input, the scale's weight and the layers around it. torch._dynamo.explain
   counts graph breaks.

Prints `swap-backward: OK` (exit 0) when every check passed.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from pathlib import Path

SCRIPT = """
import torch
import torch.nn as nn

class Scale(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 2.0, features))
    def forward(self, x):
        return x * self.weight

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(256, 256)
        self.scale = Scale(256)
        self.out = nn.Linear(256, 8)
    def forward(self, x):
        return self.out(torch.relu(self.scale(self.fc(x))))

torch.manual_seed(0)
model = Net()
model(torch.randn(64, 256)).sum().backward()  # a training step: the capture sees grad enabled
"""

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "candidates" / "scale_train_triton.py"
# The example's kernels and autograd.Function; a ModelNew that takes the captured weights, as a captured task's does.
LOADS_WEIGHTS = """
class ModelNew(nn.Module):
    def __init__(self, weights):
        super().__init__()
        self.weight = nn.Parameter(torch.load(weights, weights_only=True)["weight"])

    def forward(self, x):
        return Scale.apply(x, self.weight)
"""


def kernel_source() -> str:
    text = EXAMPLE.read_text()
    return text[: text.index("class ModelNew")] + LOADS_WEIGHTS


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None, help="cuda (default when there is one) or cpu")
    args = ap.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        import os

        os.environ["TRITON_INTERPRET"] = "1"
    from kernelfix.agent.agent_config import AgentConfig
    from kernelfix.agent.session_dir import SessionDir
    from kernelfix.capture.files import import_file
    from kernelfix.capture.pipeline import capture
    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tools.task import Task

    work = Path(tempfile.mkdtemp(prefix="kf-swap-backward-"))
    script = work / "train.py"
    script.write_text(SCRIPT)
    task = work / "scale.py"
    capture(script, "model.scale", task)
    assert Task.load(task).declares_backward, "a capture in training says BACKWARD = True"
    session = work / "session"
    SessionDir.create(
        session, task=Task.load(task), model="replay:none", agent=AgentConfig(), judge=JudgeConfig(device=device)
    )
    (session / "best.py").write_text(kernel_source())

    original = import_file(script, "user_train").model.to(device)
    ok = True
    for trace in (None, False):  # the path load_best picks, then the custom operator's registered backward
        ok &= train_check(session, original, device, trace)
    print(f"swap-backward: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


def train_check(session: Path, original, device: str, trace: bool | None) -> bool:
    """Two compiled training steps of the swapped model against the original's."""
    import torch

    import kernelfix
    from kernelfix.capture.summary import compile_path_text

    model = copy.deepcopy(original)
    model.scale = kernelfix.load_best(session, model.scale, device=device, trace=trace)
    print(f"swapped model.scale on {device} (trace={trace}); {compile_path_text(model.scale.compile_path)}")
    backend = (
        "inductor" if device == "cuda" else "aot_eager"
    )  # aot_eager: AOTAutograd's trace without a C++ build on the CPU
    torch._dynamo.reset()
    explain = torch._dynamo.explain(model)(torch.randn(64, 256, device=device))
    print(
        f"torch._dynamo.explain over the swapped model: {explain.graph_count} graph(s), {explain.graph_break_count} graph break(s)"
    )
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    ok = explain.graph_break_count == 0
    for step in range(2):  # the second step runs the compiled graph as compiled
        x = torch.randn(64, 256, device=device, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_(True)
        for m in (model, original):
            m.zero_grad(set_to_none=True)
        loss = compiled(x).square().mean()
        loss.backward()
        want = original(x_ref).square().mean()
        want.backward()
        pairs = [
            ("loss", loss.detach(), want.detach()),
            ("grad of x", x.grad, x_ref.grad),
            ("grad of scale.weight", model.scale.kernel.weight.grad, original.scale.weight.grad),
            ("grad of fc.weight", model.fc.weight.grad, original.fc.weight.grad),
        ]
        for name, got, exp in pairs:
            good = got is not None and torch.allclose(got, exp, atol=1e-4, rtol=1e-4)
            ok &= good
            err = (got - exp).abs().max().item() if got is not None else float("nan")
            print(f"  step {step}: {name}: {'match' if good else 'DIFFERS'} (max abs diff {err:.3g})")
    return ok


if __name__ == "__main__":
    sys.exit(main())
