"""Capture on the models people run: transformers decoders with their cache, mixtures of experts, training steps
with dropout, scripts with and without torch.no_grad, built from tiny configs with random weights (no download).

Each capture runs examples/models/hf_decoder.py as a user's script; each written task must import, reproduce the
captured call and run on get_inputs() draws (capture checks both before it writes anything)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from kernelfix.agent.agent_config import AgentConfig  # noqa: E402
from kernelfix.agent.session_dir import SessionDir  # noqa: E402
from kernelfix.capture.errors import Untraceable  # noqa: E402
from kernelfix.capture.files import import_file  # noqa: E402
from kernelfix.capture.pipeline import capture  # noqa: E402
from kernelfix.capture.swap import load_best  # noqa: E402
from kernelfix.tools.config import JudgeConfig  # noqa: E402
from kernelfix.tools.task import Task  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "models" / "hf_decoder.py"
sys.path.insert(0, str(SCRIPT.parent))
from hf_decoder import build_config, build_model, make_inputs  # noqa: E402

CASES = [  # family, mode, module: the targets tune puts on top for each family, in the ways scripts call them
    ("llama", "no-grad", "model.model.layers.0.self_attn"),
    ("llama", "eval", "model.model.layers.1.mlp"),
    ("qwen3", "train", "model.model.layers.0.self_attn"),
    ("qwen3_moe", "no-grad", "model.model.layers.0.mlp.experts"),
    ("mixtral", "train", "model.model.layers.1.mlp"),
    ("gpt2", "train", "model.transformer.h.0.attn"),
    ("bert", "train", "model.bert.encoder.layer.0.attention"),
    ("vit", "inference", "model.vit.layers.0"),
]


@pytest.mark.parametrize(
    "family,mode,module", CASES, ids=[f"{f}-{m}-{p.rsplit('.', 2)[-2]}.{p.rsplit('.', 1)[-1]}" for f, m, p in CASES]
)
def test_capture_takes_the_family(tmp_path, family, mode, module):
    out = tmp_path / "task.py"
    m = capture(SCRIPT, module, out, script_args=["--family", family, "--mode", mode]).manifest
    assert m.check.ok and m.check.fresh_inputs and m.check.captured.ok, m.check
    task = import_file(out, f"task_{family}")
    with torch.no_grad():
        task.Model(*task.get_init_inputs())(*task.get_inputs())
    assert all(
        op.split(".")[0] in ("aten", "prims") or "." not in op for op in m.graph_ops
    )  # torch's own operators only
    decoder_attention = family in ("llama", "qwen3", "gpt2") and module.endswith(("self_attn", "attn"))
    if decoder_attention:  # the cache: what the call wrote into it is an output, keyed as the task says
        (state,) = m.state
        assert state.type.endswith("DynamicCache") and state.units[0].outputs == ["keys", "values"]
        assert (
            state.units[0].index_attr == "layer_idx" and not state.units[0].inputs
        )  # an empty cache before the prefill
        assert any(o.path.startswith("[1]['kf_state']['cache_layers_0_") for o in m.outputs)
        assert "kf_state" in out.read_text()
    else:
        assert not m.state
    if "moe" in family or family == "mixtral":
        assert m.graph_ops.get("aten._grouped_mm") == 2 and not any(op.startswith("transformers") for op in m.graph_ops)
    if mode == "train" and family in ("gpt2", "bert"):  # dropout: the masks are inputs, drawn at the configured rate
        assert m.random and all(r.p == pytest.approx(0.1) for r in m.random)
        masks = [i for i in m.inputs if i.path.startswith("kwargs['kf_random']")]
        assert masks and all(i.tensor.dtype == "bool" and i.tensor.p_true == pytest.approx(0.9) for i in masks)
    else:
        assert not m.random
    assert m.backward == (mode == "train")


def _session(tmp_path: Path, task: Path) -> Path:
    """A session whose best kernel is the task's own Model: what a swap does is what is tested here (the judge's
    Triton kernels for these tasks are tested in test_hf_kernels.py)."""
    d = tmp_path / f"session_{task.stem}"
    SessionDir.create(
        d, task=Task.load(task), model="replay:none", agent=AgentConfig(), judge=JudgeConfig(device="cpu")
    )
    (d / "best.py").write_text(task.read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
    return d


GENERATE = """
import sys, torch
sys.path.insert(0, {models!r})
from hf_decoder import build_model, make_inputs
model = build_model("llama").eval()
ids = make_inputs("llama", "tiny", 2, 16, "cpu")
with torch.no_grad():
    model.generate(ids, max_new_tokens=4, do_sample=False)
"""


def test_a_swapped_attention_writes_the_cache_as_the_module_does(tmp_path):
    """generate() with the attention swapped: the kernel runs the prefill and writes the cache the decode steps read;
    the decode steps (a cache that already holds keys) run the original module; the tokens are the same, eager and
    under torch.compile(fullgraph=True)."""
    script = tmp_path / "generate.py"
    script.write_text(GENERATE.format(models=str(SCRIPT.parent)))
    task = tmp_path / "attn.py"
    capture(script, "model.model.layers.1.self_attn", task)
    model = build_model("llama").eval()
    ids = make_inputs("llama", "tiny", 2, 16, "cpu")
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=12, do_sample=False)
    swapped = load_best(_session(tmp_path, task), model.model.layers[1].self_attn)
    assert [(c.against, c.ok) for c in swapped.checks] == [("captured_call", True)]
    ran = []
    swapped.kernel.register_forward_hook(lambda *a: ran.append(1))
    model.model.layers[1].self_attn = swapped
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = model.generate(ids, max_new_tokens=12, do_sample=False)
    assert torch.equal(got, want)
    assert len(ran) == 1 and swapped.fallbacks == 11  # the prefill, then 11 decode steps
    assert any(
        "layers[1].is_initialized is True where the captured call found it False" in str(w.message) for w in caught
    )


ONE_LAYER = """
import sys, torch
sys.path.insert(0, {models!r})
import transformers
from hf_decoder import build_config, make_inputs
config = build_config("llama", "tiny")
config.num_hidden_layers = 1
torch.manual_seed(0)
model = transformers.AutoModelForCausalLM.from_config(config).eval()
with torch.no_grad():
    model(make_inputs("llama", "tiny", 2, 16, "cpu"))
"""


def _one_layer_llama():
    """The model ONE_LAYER builds (the same seed, the same weights)."""
    import transformers

    config = build_config("llama", "tiny")
    config.num_hidden_layers = 1
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def test_the_cache_swap_compiles_whole(tmp_path):
    """The swap reads and writes the user's cache inside a compiled model: one graph, the same logits."""
    # The tiny Llama with one decoder layer: the swapped layer, the cache it writes and the model around it (embedding,
    # rotary embedding, masks, norm, head) are all in the graph; a second, unswapped layer only made Dynamo trace more
    # (about 2 of the test's 6 CPU-seconds).
    script = tmp_path / "one_layer.py"
    script.write_text(ONE_LAYER.format(models=str(SCRIPT.parent)))
    task = tmp_path / "attn.py"
    capture(script, "model.model.layers.0.self_attn", task)
    model = _one_layer_llama()
    ids = make_inputs("llama", "tiny", 2, 16, "cpu")
    with torch.no_grad():
        want = model(ids).logits
        model.model.layers[0].self_attn = load_best(_session(tmp_path, task), model.model.layers[0].self_attn)
        got = torch.compile(model, fullgraph=True, backend="aot_eager")(ids).logits
    assert torch.allclose(got, want, atol=1e-5) and model.model.layers[0].self_attn.fallbacks == 0


def test_a_swapped_module_with_dropout_draws_fresh_masks(tmp_path):
    task = tmp_path / "mlp.py"
    capture(SCRIPT, "model.transformer.h.0.mlp", task, script_args=["--family", "gpt2", "--mode", "train"])
    model = build_model("gpt2").train()
    original = model.transformer.h[0].mlp
    swapped = load_best(_session(tmp_path, task), original)
    x = torch.randn(2, 16, 64)
    a, b = swapped(x), swapped(x)
    assert not torch.equal(a, b)  # dropout: a new mask each call
    kept = (a != 0).float().mean()
    assert 0.8 < float(kept) < 0.97  # about 1 - p of the elements survive
    model.transformer.h[0].mlp = swapped
    ids = make_inputs("gpt2", "tiny", 2, 16, "cpu")
    model(ids, labels=ids).loss.backward()  # the training step runs through the kernel and back
    assert model.transformer.h[0].ln_1.weight.grad is not None and swapped.fallbacks == 0
    swapped.eval()
    with pytest.warns(UserWarning, match="captured in training, with dropout"):
        out = swapped(x)
    assert torch.equal(out, original.eval()(x))  # eval mode: no dropout, the module itself


def test_a_loop_over_a_tensors_values_gets_advice_that_fits(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Experts(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.w = nn.Parameter(torch.randn(4, 8, 8))\n\n"
        "    def forward(self, x, idx):\n"
        "        out = torch.zeros_like(x)\n"
        "        for e in idx.unique():\n"
        "            out[idx == e] = x[idx == e] @ self.w[e]\n"
        "        return out\n\n"
        "model = nn.Sequential()\nmodel.add_module('experts', Experts())\n"
        "model.experts(torch.randn(6, 8), torch.tensor([0, 1, 1, 3, 0, 2]))\n"
    )
    with pytest.raises(Untraceable) as e:
        capture(script, "model.experts", tmp_path / "x.py")
    text = str(e.value)
    assert "a Python loop over a tensor's values" in text and "loop.py:" in text and "for e in idx.unique():" in text
    assert "torch._grouped_mm" in text and text.rstrip().endswith(".")
