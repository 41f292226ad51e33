"""The hand-written kernels of examples/tune/hf (the H200 proof's replays), judged on tiny captured tasks on the CPU.

Each kernel goes through the real judge (Triton's interpreter) on the module it replaces, captured from
examples/models/hf_decoder.py at its tiny size: the training step's capture where the kernel has a backward (the
gradients of inputs and parameters judged, the backward's ops policed), the no-grad call otherwise; the vendor's
GEMMs and attention allowed as `kernelfix tune` allows them. Then the attention kernel goes back into a Llama's
generate(): same tokens, and the kernel ran on the prefill.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kernelfix
from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.models import make_model
from kernelfix.agent.session import Session
from kernelfix.capture.files import import_file
from kernelfix.capture.pipeline import capture
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.legality.allowlist import LIBRARY_GEMM_ATTENTION

ROOT = Path(__file__).resolve().parents[1]
HF = ROOT / "examples" / "models" / "hf_decoder.py"
REPLAYS = ROOT / "examples" / "tune" / "hf"
JUDGE = dict(device="cpu", trials=2, input_variants=[], extra_allowed_ops=list(LIBRARY_GEMM_ATTENTION))

# task name -> (family, module path, how the script calls its model, the replay's class)
TASKS = {
    "norm_train": ("llama", "model.model.layers.0.input_layernorm", "train", "LlamaRMSNorm"),
    "mlp_train": ("llama", "model.model.layers.0.mlp", "train", "LlamaMLP"),
    "attn_train": ("llama", "model.model.layers.0.self_attn", "train", "LlamaAttention"),
    "attn_generate": ("llama", "model.model.layers.0.self_attn", "generate", "LlamaAttention"),
    "experts": ("qwen3_moe", "model.model.layers.0.mlp.experts", "no-grad", "Qwen3MoeExperts"),
    "q_norm": ("qwen3_moe", "model.model.layers.0.self_attn.q_norm", "no-grad", "Qwen3MoeRMSNorm"),
}


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hf_tasks")
    out = {}
    for name, (family, module, mode, _) in TASKS.items():
        out[name] = d / f"{name}.py"
        capture(HF, module, out[name], script_args=["--family", family, "--mode", mode])
    return out


def _replay_code(cls: str) -> str:
    reply = json.loads((REPLAYS / f"{cls}.jsonl").read_text())["content"]
    return reply.split("```python\n", 1)[1].rsplit("```", 1)[0]


def test_replay_files_are_written_from_the_sources():
    """Each <ModuleClass>.jsonl is what make_replays.py writes from src/ (no hand edits that src/ lacks)."""
    make = import_file(REPLAYS / "make_replays.py", "make_replays")
    for name in make.REPLAYS:
        assert (REPLAYS / f"{name}.jsonl").read_text() == make.replay_line(name), (
            f"{name}.jsonl is stale: run make_replays.py"
        )
        assert "Hand-written" in make.replay_line(name)


@pytest.mark.parametrize("name", [n for n in TASKS if n != "attn_generate"])
def test_kernel_is_judged_ok_on_its_captured_task(tasks, name):
    cls = TASKS[name][3]
    with kernelfix.Judge(tasks[name], config=JUDGE) as judge:
        verdict = judge.evaluate(_replay_code(cls), kind="code")
    assert verdict.category.value == "ok", (verdict.category, verdict.message, verdict.feedback[-2000:])
    ops = verdict.legality.aten_ops
    assert not verdict.legality.forbidden_ops and verdict.legality.runtime_checked
    if TASKS[name][2] == "train":  # the gradients were judged, and what the backward ran was policed
        assert verdict.legality.backward_ops and not verdict.legality.forbidden_backward_ops
    if name in ("mlp_train", "attn_train"):
        assert ops.get("mm"), ops  # the GEMMs are the library's
    if name == "attn_train":
        assert verdict.legality.backward_ops.get("_scaled_dot_product_flash_attention_for_cpu_backward"), (
            verdict.legality.backward_ops
        )
    if name == "experts":
        assert ops.get("_grouped_mm") == ops.get("transpose"), ops  # both projections, nothing else of torch's computes


USE = """
import json, sys, torch
sys.path.insert(0, {models!r})
import kernelfix, hf_decoder
from kernelfix.capture.check import compare_outputs

model = hf_decoder.build_model("llama", "tiny", device={device!r}).eval()
ids = hf_decoder.make_inputs("llama", "tiny", 2, 16, {device!r})
with torch.no_grad():
    before = model.generate(ids, max_new_tokens=32, do_sample=False)
    positions = torch.arange(ids.shape[1], device=ids.device).expand(ids.shape)  # per sequence, as generate's prefill passes them
    ref = model(ids, position_ids=positions)  # logits and the cache it filled: the cache compared by the tensors it holds
    attn = model.model.layers[0].self_attn
    swapped = kernelfix.load_best({session!r}, attn, device={device!r})  # captured on the CPU, used where the model is
    model.model.layers[0].self_attn = swapped
    calls = []
    swapped.kernel.register_forward_hook(lambda *a: calls.append(1))
    eager = compare_outputs(model(ids, position_ids=positions), ref).ok and len(calls) == 1
    calls.clear()
    after = model.generate(ids, max_new_tokens=32, do_sample=False)
print(json.dumps({{"same": torch.equal(before, after), "new": after.shape[1] - ids.shape[1], "kernel_calls": len(calls),
                   "fallbacks": swapped.fallbacks, "kernel": type(swapped.kernel).__name__, "eager": eager}}))
"""


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_attention_kernel_swapped_into_generate_keeps_the_tokens(tasks, tmp_path, device):
    """A Llama attention captured from generate() (its prefill), its replayed kernel judged in a session, loaded with
    load_best into layer 0: the model's output (logits and the cache it fills) as before; generate(32 greedy tokens) gives the same tokens, and the kernel ran on the prefill (the decode steps, one token
    against a filled cache, fall back to the original module by design)."""
    session = Session.create(
        tmp_path / "session",
        task_path=tasks["attn_generate"],
        model=make_model(f"replay:{REPLAYS / 'LlamaAttention.jsonl'}", AgentConfig()),
        agent=AgentConfig(max_turns=1, shape_block=False),
        judge_config=JudgeConfig(**{**JUDGE, "device": device}),
    )
    outcome = session.run()
    verdicts = sorted((tmp_path / "session").glob("turns/*/verdict.json"))
    assert outcome.success and outcome.best_turn == 1, verdicts and json.loads(verdicts[-1].read_text())["message"]
    script = tmp_path / "use_kernel.py"  # in its own process: Triton takes its interpreter only when chosen at import
    script.write_text(
        textwrap.dedent(USE).format(models=str(HF.parent), session=str(tmp_path / "session"), device=device)
    )
    env = {**os.environ, **({"TRITON_INTERPRET": "1"} if device == "cpu" else {})}
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.splitlines()[-1])
    assert got["kernel"] == "ModelNew" and got["new"] == 32
    assert got["eager"], got
    assert got["same"], got
    assert got["kernel_calls"] == 1 and got["fallbacks"] == 31, got
