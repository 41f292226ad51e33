"""kernelfix capture on CPU: a user's script in, a task that reproduces the captured call out.

Each test writes a small script of its own (the user's model), captures a submodule of it
and checks the task: it imports, reproduces the captured output, draws fresh inputs of the
captured shapes, dtypes, strides and ranges, and keeps the user's values out of its text.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

from kernelfix.capture.errors import CaptureFailed, CaptureInputError, Untraceable
from kernelfix.capture.files import CaptureFiles, import_file
from kernelfix.capture.output_tolerance import tolerance_for
from kernelfix.capture.pipeline import capture
from kernelfix.cli import main
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.task import Task

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "models" / "tiny_transformer.py"


def _script(tmp_path: Path, body: str, name: str = "user_model.py") -> Path:
    p = tmp_path / name
    p.write_text("import torch\nimport torch.nn as nn\n\n" + textwrap.dedent(body))
    return p


def _task(files: CaptureFiles):
    """The written task, imported as the judge would: Model(*get_init_inputs()), get_inputs()."""
    Task.load(files.task)  # kernelfix's own check of the KernelBench names
    return import_file(files.task, "test_captured")


def _rerun_captured(files: CaptureFiles):
    """(task output on the captured inputs, captured output)."""
    task = _task(files)
    saved = torch.load(files.call, weights_only=True)
    tensors = [x for x in saved["leaves"] if isinstance(x, torch.Tensor)]
    with torch.no_grad():
        return task.Model(*task.get_init_inputs())(*tensors), saved["output"]


def test_transformer_block_captured_at_two_submodules(tmp_path):
    """The example transformer, captured at its attention and at its MLP: both tasks reproduce their call."""
    for path, ops in (
        ("model.blocks.0.attn", {"aten.linear", "aten.softmax", "aten.masked_fill"}),
        ("model.blocks.1.mlp", {"aten.linear", "aten.silu"}),
    ):
        files = CaptureFiles(tmp_path / f"{path.split('.')[-1]}.py")
        m = capture(EXAMPLE, path, files.task).manifest
        assert m.check.ok and m.check.captured.ok, m.check
        assert ops <= set(m.graph_ops)
        assert [i.tensor.shape for i in m.inputs if i.tensor] == [[2, 8, 32]]
        got, want = _rerun_captured(files)
        assert torch.allclose(got, want, atol=1e-6, rtol=0)
        source = files.task.read_text()
        assert (
            "torch.ops.aten.linear.default(" in source and "tiny_transformer.py:" in source
        )  # readable, with its source lines
        weights = torch.load(files.weights, weights_only=True)
        assert (
            set(weights) >= {"qkv.weight", "proj.bias"}
            if "attn" in path
            else {"fc.weight", "fc.bias", "proj.weight", "proj.bias"}
        )
        assert json.loads(files.manifest.read_text())["module_path"] == path
    attn_weights = torch.load(tmp_path / "attn.weights.pt", weights_only=True)
    assert attn_weights["causal"].dtype == torch.bool  # the non-persistent buffer travels too


def test_get_inputs_draws_fresh_values_in_the_captured_ranges(tmp_path):
    """Shapes, dtypes, strides and ranges as captured; the captured values appear nowhere in the task."""
    script = _script(
        tmp_path,
        """
        class Mix(nn.Module):
            def forward(self, x, t, idx, flags):
                return x * t.sum() + idx.float().mean() + flags.float().mean()

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.mix = Mix()
            def forward(self, x):
                wide = torch.arange(60, dtype=torch.float32).reshape(6, 10) / 7.0 + 100.0
                idx = torch.tensor([[7, 9, 42], [5, 11, 13]])
                flags = torch.tensor([True, False, False, False])
                return self.mix(x, wide.t(), idx, flags)

        model = Net()
        model(torch.full((3,), 2.5))
    """,
    )
    files = CaptureFiles(tmp_path / "mix.py")
    m = capture(script, "model.mix", files.task).manifest
    specs = {i.name: i.tensor for i in m.inputs}
    assert specs["t"].stride == [1, 10] and not specs["t"].contiguous
    assert (specs["idx"].kind, specs["idx"].min, specs["idx"].max) == ("int", 5, 42)
    assert specs["flags"].p_true == pytest.approx(0.25)
    task = _task(files)
    torch.manual_seed(3)
    x, t, idx, flags = task.get_inputs()
    assert t.shape == (10, 6) and t.stride() == (1, 10) and t.dtype == torch.float32
    assert 100.0 <= float(t.min()) and float(t.max()) <= float(torch.tensor(100.0 + 59 / 7.0))
    assert idx.dtype == torch.int64 and 5 <= int(idx.min()) and int(idx.max()) <= 42
    assert flags.dtype == torch.bool and x.shape == (3,)
    assert len({round(float(v), 4) for v in t.flatten()}) > 30  # drawn, not the captured arange
    assert "103.571" not in files.task.read_text()  # an inner captured value (100 + 25/7): only ranges are recorded


def test_data_dependent_output_shape(tmp_path):
    """Boolean masking and nonzero: export's unbacked sizes; the task reproduces and runs on fresh draws."""
    script = _script(
        tmp_path,
        """
        class Select(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = nn.Parameter(torch.tensor(3.0))
            def forward(self, x):
                return x[x > 0] * self.scale, torch.nonzero(x > 1)

        torch.manual_seed(0)
        model = nn.Sequential(Select())
        model(torch.randn(5, 7))
    """,
    )
    files = CaptureFiles(tmp_path / "select.py")
    m = capture(script, "model.0", files.task).manifest
    assert m.check.ok and "aten.nonzero" in m.graph_ops
    (got_sel, got_nz), (want_sel, want_nz) = _rerun_captured(files)
    assert torch.equal(got_sel, want_sel) and torch.equal(got_nz, want_nz)
    task = _task(files)
    sizes = set()
    for seed in range(4):
        torch.manual_seed(seed)
        sizes.add(task.Model(*task.get_init_inputs())(*task.get_inputs())[0].numel())
    assert len(sizes) > 1  # the output's size follows the drawn values


def test_buffers_taken_before_the_call_and_updated_in_place(tmp_path):
    """Persistent, non-persistent and updated buffers; the second call is captured with the state it started from."""
    script = _script(
        tmp_path,
        """
        class Counter(nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = nn.BatchNorm1d(4)        # training mode: running stats change on every call
                self.register_buffer("steps", torch.zeros(()))
                self.register_buffer("table", torch.linspace(0, 1, 4), persistent=False)
            def forward(self, x):
                self.steps.add_(1)
                return self.norm(x) * self.table + self.steps

        torch.manual_seed(0)
        model = Counter()
        for _ in range(3):
            model(torch.randn(8, 4))
    """,
    )
    files = CaptureFiles(tmp_path / "counter.py")
    m = capture(script, "model", files.task, call=2).manifest
    assert m.check.ok and m.training
    weights = torch.load(files.weights, weights_only=True)
    assert float(weights["steps"]) == 1.0  # before the second call, not after it
    assert float(weights["norm.num_batches_tracked"]) == 1
    assert torch.equal(weights["table"], torch.linspace(0, 1, 4))
    assert 'self.register_buffer("b_table", w["table"], persistent=False)' in files.task.read_text()
    task = _task(files)
    model = task.Model(*task.get_init_inputs())
    saved = torch.load(files.call, weights_only=True)
    out = model(*saved["leaves"])
    assert torch.allclose(out, saved["output"], atol=1e-6)
    assert float(model.b_steps) == 2.0  # the task updates its buffer as the module did


def test_keyword_arguments_and_fixed_values(tmp_path):
    """Tensors passed by keyword become inputs; None, ints and flags are fixed into the graph and recorded."""
    script = _script(
        tmp_path,
        """
        class Scaled(nn.Module):
            def forward(self, x, *, scale, bias=None, causal=False, power=1):
                y = x * scale
                if causal:
                    y = torch.tril(y)
                return {"y": y ** power, "sum": y.sum()}

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = Scaled()
            def forward(self, x):
                return self.inner(x, scale=torch.full((4, 4), 0.5), causal=True, power=2)

        model = Net()
        model(torch.arange(16.0).reshape(4, 4))
    """,
    )
    files = CaptureFiles(tmp_path / "scaled.py")
    m = capture(script, "model.inner", files.task).manifest
    by_path = {i.path: i for i in m.inputs}
    assert by_path["kwargs['scale']"].name == "scale"
    assert by_path["kwargs['causal']"].constant == "True" and by_path["kwargs['power']"].constant == "2"
    assert "def forward(self, x: " in files.task.read_text() and ", scale: " in files.task.read_text()
    got, want = _rerun_captured(files)
    assert got.keys() == want.keys() and torch.equal(got["y"], want["y"])  # the dict structure survives


def test_untraceable_module_names_the_construct(tmp_path, capsys):
    script = _script(
        tmp_path,
        """
        class Gate(nn.Module):
            def forward(self, x):
                if x.sum() > 0:
                    return x * 2
                return x

        model = nn.Sequential(nn.Linear(4, 4), Gate())
        model(torch.randn(2, 4))
    """,
    )
    out = tmp_path / "gate.py"
    with pytest.raises(Untraceable) as e:
        capture(script, "model.1", out)
    assert "data-dependent control flow" in e.value.construct
    assert e.value.location == f"{script}:7 in forward" and e.value.code == "if x.sum() > 0:"
    assert "torch.where" in str(e.value)
    assert not any(p.exists() for p in CaptureFiles(out).all()) and not list(tmp_path.glob(".gate*"))
    assert main(["capture", str(script), "--module", "model.1", "--out", str(out)]) == 1
    assert "if x.sum() > 0:" in capsys.readouterr().err


def test_a_value_read_into_python_is_named(tmp_path):
    script = _script(
        tmp_path,
        """
        class Head(nn.Module):
            def forward(self, x):
                n = int(x.max().item())
                return x[:n]

        model = nn.Sequential(Head())
        model(torch.full((4, 4), 2.0))
    """,
    )
    with pytest.raises(Untraceable, match=r"a read of a tensor's value into Python \(\.item\(\), int\(\)") as e:
        capture(script, "model.0", tmp_path / "head.py")
    assert e.value.code == "n = int(x.max().item())"


def test_dropout_in_training_takes_its_masks_as_inputs(tmp_path):
    script = _script(
        tmp_path,
        """
        model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Dropout(0.0))   # left in training mode
        model(torch.randn(64, 4))
    """,
    )
    m = capture(script, "model", tmp_path / "drop.py").manifest
    assert [(r.name, r.p) for r in m.random] == [("dropout_0", 0.5)]  # p = 0 draws nothing
    assert m.check.ok
    mask = next(i for i in m.inputs if i.path == "kwargs['kf_random']['dropout_0']")
    assert mask.tensor.dtype == "bool" and mask.tensor.shape == [64, 4] and mask.tensor.p_true == 0.5
    task = import_file(tmp_path / "drop.py", "drop_task")
    x, keep = torch.randn(64, 4), torch.rand(64, 4) < 0.5
    out = task.Model(*task.get_init_inputs())(x, keep)
    lin = task.Model(*task.get_init_inputs()).p_0_weight
    assert torch.allclose(
        out, torch.nn.functional.linear(x, lin, task.Model(*task.get_init_inputs()).p_0_bias) * keep * 2.0
    )


def test_other_random_draws_are_refused(tmp_path):
    script = _script(
        tmp_path,
        """
        class Noisy(nn.Module):
            def forward(self, x):
                return x + torch.randn_like(x)

        model = nn.Sequential(Noisy())
        model(torch.randn(2, 4))
    """,
    )
    with pytest.raises(
        CaptureFailed,
        match=r"draws random numbers \(aten\.randn_like \(user_model\.py:\d+\)\) other than dropout's masks",
    ):
        capture(script, "model.0", tmp_path / "noisy.py")


def test_device_literals_follow_the_inputs(tmp_path):
    script = _script(
        tmp_path,
        """
        class Pos(nn.Module):
            def forward(self, x):
                return x + torch.arange(x.shape[-1], device=x.device)

        model = Pos()
        model(torch.zeros(2, 3))
    """,
    )
    files = CaptureFiles(tmp_path / "pos.py")
    capture(script, "model", files.task)
    source = files.task.read_text()
    assert "device = inputs_device" in source and "device(type=" not in source


@pytest.mark.parametrize(
    ("module", "body", "message"),
    [
        (
            "model.blocks.9",
            "model = nn.Sequential()\nmodel.add_module('blocks', nn.ModuleList([nn.Linear(2, 2)]))\nmodel.blocks[0](torch.ones(2))",
            "model.blocks (ModuleList) has no submodule '9'; it has: 0",
        ),
        (
            "model.0",
            "model = nn.Sequential(nn.Linear(2, 2))\nprint('built, never run')",
            "ran to its end without calling model.0",
        ),
        ("model.0", "model = nn.Sequential(nn.Linear(2, 2))\nmodel(torch.ones(3))", "raised RuntimeError"),
        (
            "model.0",
            "model = nn.Sequential(nn.Linear(2, 2))\nmodel(torch.ones(2))",
            "called model.0 (Linear) 1 time, not 2",
        ),
    ],
)
def test_bad_input_is_named(tmp_path, module, body, message):
    script = _script(tmp_path, body)
    with pytest.raises(CaptureInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        capture(script, module, tmp_path / "t.py", call=2 if "not 2" in message else 1)
    assert (
        main(
            ["capture", str(script), "--module", module, "--out", str(tmp_path / "t.py")]
            + (["--call", "2"] if "not 2" in message else [])
        )
        == 2
    )


def test_help_explains_itself(capsys):
    for command in ("capture", "swap"):
        with pytest.raises(SystemExit) as e:
            main([command, "--help"])
        assert e.value.code == 0
        text = capsys.readouterr().out
        assert "Exit codes: 0" in text and ("--module PATH" in text if command == "capture" else "load_best" in text)


def test_cli_json_and_script_arguments(tmp_path, capsys):
    out = tmp_path / "mlp.py"
    assert (
        main(
            ["capture", str(EXAMPLE), "--module", "model.blocks.1.mlp", "--out", str(out), "--json", "--", "--seq", "5"]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["manifest"]["inputs"][0]["tensor"]["shape"] == [2, 5, 32]
    assert report["manifest"]["script_args"] == ["--seq", "5"]
    assert (
        main(["capture", str(EXAMPLE), "--module", "model.blocks.1.mlp", "--out", str(out)]) == 2
    )  # exists; --force replaces


def test_tolerance_for():
    assert tolerance_for(torch.float32).atol == 1e-4 and tolerance_for(torch.bfloat16).rtol == 1e-2
    assert tolerance_for(torch.int64).atol == 0.0
    assert tolerance_for(torch.float32, JudgeConfig()).atol == 1e-4  # the judge's defaults: per dtype
    assert tolerance_for(torch.float32, JudgeConfig(atol=5e-3)).atol == 5e-3  # a tuned config wins


def test_half_precision_outputs_are_judged_against_the_exact_result():
    """bfloat16 rounding differs with every kernel's order of operations and grows through a deep model: an output
    outside the element-wise tolerance passes when it is as close to the float32 result as the original's own."""
    from kernelfix.capture.check import compare_outputs, truth_rule

    g = torch.Generator().manual_seed(0)
    truth = torch.randn(64, 256, generator=g) * 3
    want = (truth + 0.03 * torch.randn(64, 256, generator=g)).bfloat16()  # the original's own rounding error
    close = (truth + 0.03 * torch.randn(64, 256, generator=g)).bfloat16()  # another order of operations, as far off
    wrong = (truth + 0.5 * torch.randn(64, 256, generator=g)).bfloat16()
    for got, ok in ((close, True), (wrong, False)):
        check = compare_outputs(got, want, JudgeConfig())
        assert not check.ok  # element-wise, both fail
        judged = truth_rule(got, want, truth, JudgeConfig(), check)
        assert judged.ok is ok
    assert (
        "as close to the exact result"
        in truth_rule(close, want, truth, JudgeConfig(), compare_outputs(close, want, JudgeConfig())).summary()
    )
