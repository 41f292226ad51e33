"""`kernelfix capture --calls all`, then the kernel swapped back as a custom operator under
torch.compile(model, fullgraph=True): no graph break, and the original's output at every captured shape.

The example model calls its softmax gate at two shapes (rows of 200, then one row fewer of 520: the
example's 1000 and 4096, smaller for the CPU). The user's side runs in a process of its own, as in
tests/test_capture_swap.py: Triton runs on the CPU only when its interpreter is chosen at import."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from kernelfix.capture.files import CaptureFiles

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "models" / "two_shapes.py"
REPLAY = ROOT / "examples" / "replays" / "two_shapes_gate.jsonl"

USER = """
import json, sys
import torch
import torch._dynamo
import kernelfix
from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.session_dir import SessionDir
from kernelfix.cli import main
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.task import Task

task, session, best, example = sys.argv[1:5]
sizes = ["--batch", "4", "--local", "200", "--wide", "520"]
rc = main(["capture", example, "--module", "model.gate", "--calls", "all", "--out", task, "--", *sizes])
SessionDir.create(session, task=Task.load(task), model="replay:none", agent=AgentConfig(), judge=JudgeConfig(device="cpu"))
open(session + "/best.py", "w").write(open(best).read())

sys.path.insert(0, str(__import__("pathlib").Path(example).parent))
from two_shapes import build, inputs
original, model = build("cpu", 200, 520), build("cpu", 200, 520)
h = inputs("cpu", 4)
with torch.no_grad():
    model.gate = kernelfix.load_best(session, model.gate)
    explained = torch._dynamo.explain(model)(h)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(model, fullgraph=True)
    got, want = compiled(h), original(h)
    again = compiled(inputs("cpu", 4) * 2)  # new values, same shapes: no recompile
    unique_graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    # a shape the gate was not captured at, compiled whole: the original module runs it (issue 35)
    odd = torch.randn(2, 100)
    odd_diff = (torch.compile(lambda t: model.gate(t) * 2, fullgraph=True, backend="eager")(odd) - torch.softmax(odd, -1) * 2).abs().max().item()
print(json.dumps({
    "rc": rc, "checks": [[c.against, c.input_set, c.ok] for c in model.gate.checks], "op": model.gate.op_name,
    "graph_breaks": explained.graph_break_count, "graphs": explained.graph_count,
    "dynamo_breaks": dict(torch._dynamo.utils.counters["graph_break"]),
    "unique_graphs": unique_graphs,
    "max_diff": (got - want).abs().max().item(), "fallbacks": model.gate.fallbacks,
    "again_diff": (again - original(inputs("cpu", 4) * 2)).abs().max().item(),
    "odd_diff": odd_diff, "path": model.gate.compile_path.kind, "path_note": model.gate.compile_path.note,
}))
"""


def _honest_kernel(tmp_path: Path) -> Path:
    """The replay's second turn: the softmax whose block covers the row."""
    reply = json.loads(REPLAY.read_text().splitlines()[1])["content"]
    best = tmp_path / "best_src.py"
    best.write_text(re.search(r"```python\n(.*?)```", reply, re.S)[1])
    return best


def test_capture_all_calls_then_the_swap_compiles_fullgraph(tmp_path):
    task, session = tmp_path / "gate.py", tmp_path / "session"
    script = tmp_path / "user.py"
    script.write_text(USER)
    run = subprocess.run(
        [sys.executable, "-P", str(script), str(task), str(session), str(_honest_kernel(tmp_path)), str(EXAMPLE)],
        capture_output=True,
        text=True,
        env={**os.environ, "TRITON_INTERPRET": "1"},
        timeout=300,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    r = json.loads(run.stdout.splitlines()[-1])
    assert r["rc"] == 0
    # the capture: both calls, one input set each, each reproduced; get_inputs() is the first
    m = CaptureFiles(task).read_manifest()
    assert m.calls == [1, 2] and [[i.tensor.shape for i in s] for s in m.input_sets] == [[[4, 200]], [[3, 520]]]
    assert all(c.ok for c in m.set_checks)
    source = task.read_text()
    assert "def get_input_sets():" in source and "_normal([3, 520]" in source and "_normal([4, 200]" in source
    # the swap: checked at both captured calls, a custom operator, one graph, no break, the original's output
    assert r["checks"] == [
        ["captured_call", 1, True],
        ["original_module", 1, True],
        ["captured_call", 2, True],
        ["original_module", 2, True],
    ]
    assert r["op"].startswith("kernelfix::swap_model_gate_")
    assert r["graph_breaks"] == 0 and r["graphs"] == 1 and r["dynamo_breaks"] == {}
    assert r["unique_graphs"] == 1 and r["fallbacks"] == 0
    assert r["max_diff"] < 1e-4 and r["again_diff"] < 1e-4 and r["odd_diff"] < 1e-6
    # on the CPU Triton runs in its interpreter, which Dynamo cannot trace: the custom operator, and why
    assert r["path"] == "custom_op" and "Triton's CPU interpreter runs softmax_kernel" in r["path_note"]
