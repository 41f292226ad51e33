"""`kernelfix tune` and kernelfix.load_tuned.

The ranking is a pure function of a profile: tested on profiles recorded from the example transformer
(tests/fixtures/tune, written by bench/tune_transformer.py --save-profiles) and on hand-made events. The
keep rule is tested on given timing samples. The whole flow runs once on the CPU, as a user runs it: a
script with one module worth a kernel, a one-turn replay judged for real (Triton in its interpreter),
the swap tried in the model and, the interpreter being far slower than torch, not kept; then the same
command again, which redoes nothing.
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import kernelfix
from kernelfix.agent.agent_config import AgentConfig
from kernelfix.agent.session_dir import SessionDir
from kernelfix.capture.errors import SwapError
from kernelfix.capture.files import import_file
from kernelfix.capture.pipeline import capture
from kernelfix.cli import main
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.task import Task
from kernelfix.tune import rank
from kernelfix.tune.decide import compare, explain, promising
from kernelfix.tune.model_call import collections_skip_what_was_there, free_memory
from kernelfix.tune.model_profile import MODULE_MARK, STEP_MARK, ProfEvent, Profile
from kernelfix.tune.swaps import swapped_view
from kernelfix.tune.tune_config import TuneConfig
from kernelfix.tune.tune_report import KeptSwap, ModuleRow, TuneReport

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "tune"
GATED = FIX / "gated_model.py"
EXAMPLE = ROOT / "examples" / "models" / "tiny_transformer.py"


def _recorded(name: str) -> Profile:
    return Profile.model_validate_json(gzip.decompress((FIX / f"{name}.json.gz").read_bytes()))


# --------------------------------------------------------------------------- ranking


def test_ranking_of_a_recorded_forward():
    rows = rank.rows(_recorded("tiny_transformer_cpu_forward"), "model", "TinyTransformer", min_share=0.01)
    by = {r.module: r for r in rows}
    assert rows[0].module == "model" and rows[0].share == 1 and rows[0].reason.startswith("the whole model")
    assert [r.share for r in rows] == sorted((r.share for r in rows), reverse=True)
    # The leaf-most modules that run several ops: both attentions and both MLPs, ranked by share.
    cands = [r for r in rows if r.candidate]
    assert sorted(r.module for r in cands) == [
        "model.blocks.0.attn",
        "model.blocks.0.mlp",
        "model.blocks.1.attn",
        "model.blocks.1.mlp",
    ]
    assert [r.rank for r in cands] == [1, 2, 3, 4]
    attn = by["model.blocks.0.attn"]
    assert attn.ops["matmul"] == 2 and attn.ops["linear"] == 2 and attn.ops["softmax"] == 1 and "view" not in attn.ops
    assert (
        attn.calls == 1
        and attn.shapes == ["args[0]: float32[2, 8, 32]"]
        and attn.amdahl == round(1 / (1 - attn.share), 4)
    )
    # A block holds both: its share includes theirs, and what it adds (its LayerNorms and residual adds) is less than
    # either of them: the time is in its parts, and it is tuned through them.
    block = by["model.blocks.0"]
    assert block.share > 0.95 * (attn.share + by["model.blocks.0.mlp"].share)
    assert block.reason.startswith(
        "holds CausalSelfAttention, MLP, chosen; what it adds beyond them"
    ) and block.reason.endswith("tuned through them")
    assert (
        by["model.blocks.0.attn.qkv"].reason
        == "one op per call (linear): a kernel for it alone competes with the library's"
    )
    assert by["model.head"].reason.startswith("one op per call (linear)")


def test_ranking_of_a_recorded_training_step():
    prof = _recorded("tiny_transformer_cpu_train")
    a = rank.attribute(prof.events, measure="cpu_time")
    # Most of a training step is its backward, run outside every module's forward: it reaches the modules
    # through the sequence numbers of the forward ops it differentiates, so little is left outside them.
    assert a.outside_us / a.total_us < 0.3
    rows = rank.rows(prof, "model", "TinyTransformer", min_share=0.01)
    assert {r.module for r in rows if r.candidate} == {
        "model.blocks.0.attn",
        "model.blocks.0.mlp",
        "model.blocks.1.attn",
        "model.blocks.1.mlp",
    }
    r = rank.ranking(prof, "cpu", backward=True)
    assert r.backward and r.measure == "cpu_time" and r.busy is None


def test_a_gpu_profile_is_read_through_the_kernels_each_op_launched():
    """torch's own event tree, as a CUDA profile builds it: a kernel counts once, at the op that launched it (not as a
    device-side event of its own, nor as a profiler range's device-side twin); the backward on the autograd thread."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import EventList, FunctionEvent

    from kernelfix.tune.model_profile import flatten

    def fe(i, name, start, end, *, thread=1, device=DeviceType.CPU, seq=-1, fwd=0, range_=False):
        return FunctionEvent(
            id=i,
            name=name,
            thread=thread,
            start_us=start,
            end_us=end,
            fwd_thread=fwd,
            use_device="cuda",
            device_type=device,
            sequence_nr=seq,
            is_user_annotation=range_,
        )

    a = fe(3, MODULE_MARK + "a", 2, 50, range_=True)
    a.append_kernel(MODULE_MARK + "a", 0, 999)
    mm = fe(4, "aten::mm", 3, 40, seq=5)
    mm.append_kernel("sm90_gemm", 0, 30)
    backward_mm = fe(8, "aten::mm", 201, 250, thread=2)
    backward_mm.append_kernel("sm90_gemm", 0, 20)
    events = EventList(
        [
            fe(1, STEP_MARK, 0, 100, range_=True),
            fe(2, MODULE_MARK, 1, 90, range_=True),
            a,
            mm,
            fe(5, "cudaLaunchKernel", 4, 6),
            fe(6, "sm90_gemm", 10, 40, device=DeviceType.CUDA),
            fe(7, "autograd::engine::evaluate_function: MmBackward0", 200, 260, thread=2, seq=5, fwd=1),
            backward_mm,
        ],
        use_device="cuda",
    )
    events._build_tree()
    flat = flatten(events, cuda=True)
    assert [e.name for e in flat if e.kernel_us] == ["aten::mm", "aten::mm"] and "sm90_gemm" not in [
        e.name for e in flat
    ]
    a = rank.attribute(flat, measure="cuda_kernels")
    assert a.inclusive == {"": 50.0, "a": 50.0} and a.total_us == 50.0


def _ev(name, parent=None, *, cpu=0.0, kernel=0.0, seq=-1, thread=1, fwd_thread=0):
    return ProfEvent(
        name=name, parent=parent, cpu_us=cpu, kernel_us=kernel, seq=seq, thread=thread, fwd_thread=fwd_thread
    )


def _step(base: int, *, a_kernel: float, seq: int) -> list[ProfEvent]:
    """One step: the model's range, module a (a mul and a view), module b (an add), and a harness op outside the model."""
    return [
        _ev(STEP_MARK),
        _ev(MODULE_MARK, base),
        _ev(MODULE_MARK + "a", base + 1, cpu=2),
        _ev("aten::mul", base + 2, cpu=5, kernel=a_kernel, seq=seq),
        _ev("aten::view", base + 2, cpu=1),
        _ev(MODULE_MARK + "b", base + 1, cpu=2),
        _ev("aten::add", base + 5, cpu=4, kernel=3, seq=seq + 1),
        _ev("aten::zero_", base, cpu=50, kernel=50),  # clearing gradients between steps: not the model's
    ]


def test_attribution_of_hand_made_events():
    events = []
    for k, kernel in enumerate((7, 7, 900)):  # the third step's mul stalled
        events += _step(len(events), a_kernel=kernel, seq=10 * k)
    # The first step's backward, on the autograd thread: the mul's derivative belongs to module a
    n = len(events)
    events += [
        _ev("autograd::engine::evaluate_function: MulBackward0", seq=0, thread=2, fwd_thread=1),
        _ev("aten::mul", n, kernel=4, thread=2),
        _ev("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", thread=2, fwd_thread=1),
        _ev("aten::add_", n + 2, kernel=3, thread=2),
    ]
    a = rank.attribute(events, measure="cuda_kernels")
    # per step, the median over steps: a = 7 (+4 in the first step's backward: median of 11, 7, 900 = 11), b = 3;
    # the gradient accumulation belongs to no step: spread evenly (1 per step), outside the modules
    assert a.inclusive["a"] == 11 and a.inclusive["b"] == 3 and a.own["a"] == 11
    assert a.total_us == 14 + 1 and a.outside_us == 1 and a.inclusive[""] == a.total_us
    assert dict(a.ops["a"]) == {"aten::mul": 1} and dict(a.ops[""]) == {"aten::mul": 1, "aten::add": 1}
    c = rank.attribute(events, measure="cpu_time")
    assert c.inclusive["a"] == 2 + 5 + 1 and c.inclusive["b"] == 6 and c.own[""] == 0


def test_a_launch_bound_gpu_step_is_ranked_by_cpu_time():
    # module a: two tiny kernels behind two launches; module b: one long GEMM and a relu
    events = [
        _ev(STEP_MARK),
        _ev(MODULE_MARK, 0),
        _ev(MODULE_MARK + "a", 1),
        _ev("aten::mul", 2, cpu=10, kernel=2),
        _ev("aten::add", 2, cpu=10, kernel=2),
        _ev(MODULE_MARK + "b", 1),
        _ev("aten::mm", 5, cpu=5, kernel=20),
        _ev("aten::relu", 5, cpu=5, kernel=1),
    ]
    busy = Profile(
        events=events,
        steps=1,
        measure="cuda_kernels",
        calls={"": 1, "a": 1, "b": 1},
        shapes={},
        classes={},
        step_ms=0.03,
    )
    r = rank.ranking(busy, "cuda:0", backward=False)
    assert r.measure == "cuda_kernels" and r.busy == pytest.approx(25 / 30, abs=1e-4) and r.why is None
    top = [m.module for m in rank.rows(busy, "m", "M", min_share=0.01, measure=r.measure) if m.candidate]
    assert top == ["m.b", "m.a"]  # by kernel time
    idle = busy.model_copy(update={"step_ms": 0.2})  # the GPU busy 12% of the step: the CPU issuing ops is the time
    r = rank.ranking(idle, "cuda:0", backward=False)
    assert (
        r.measure == "cpu_time"
        and r.busy == 0.125
        and r.why.startswith("the GPU ran kernels 12% of the step: launch-bound")
    )
    rows = rank.rows(idle, "m", "M", min_share=0.01, measure=r.measure)
    assert [m.module for m in rows if m.candidate] == ["m.a", "m.b"]
    a = next(m for m in rows if m.module == "m.a")
    assert (
        a.share == pytest.approx(20 / 30, abs=1e-5)
        and a.kernel_share == pytest.approx(4 / 25, abs=1e-5)
        and a.cpu_share == a.share
    )


def _profile(events: list[ProfEvent], calls: dict[str, int], measure="cpu_time") -> Profile:
    return Profile(
        events=events,
        steps=1,
        measure=measure,
        calls={"": 1, **calls},
        shapes={},
        classes={p: p.title() for p in calls},
        step_ms=1.0,
    )


def test_which_modules_are_worth_a_kernel():
    events = [_ev(STEP_MARK), _ev(MODULE_MARK, 0)]

    def add(path, parent_index, *ops, us=10.0):
        start = len(events)
        events.append(_ev(MODULE_MARK + path, parent_index))
        for op in ops:
            events.append(_ev(f"aten::{op}", start, cpu=us))
        return start

    block = add("block", 1)
    add("block.fused", block, "mul", "sigmoid", "add", us=30)  # several ops: worth a kernel
    add("block.norm", block, "layer_norm", us=30)  # one op
    add("flat", 1, "view", "reshape")  # views only
    add("tiny", 1, "mul", "add", us=0.1)  # under 1%
    add("outer", 1)
    add("outer.inner", len(events) - 1, "mul", "add", us=20)
    attn = add("attn", 1, "mm", "softmax", "mul", us=30)  # its own work is most of its time: chosen over its norm
    add("attn.q_norm", attn, "pow", "mean", "rsqrt", us=3)
    prof = _profile(
        events,
        {
            p: 1
            for p in (
                "block",
                "block.fused",
                "block.norm",
                "flat",
                "tiny",
                "outer",
                "outer.inner",
                "attn",
                "attn.q_norm",
            )
        },
    )
    by = {r.module: r for r in rank.rows(prof, "net", "Net", min_share=0.01)}
    assert by["net.block.fused"].candidate and by["net.outer.inner"].candidate
    assert [by["net.attn"].rank, by["net.block.fused"].rank, by["net.outer.inner"].rank] == [1, 2, 3]
    assert by["net.attn"].chosen_because.startswith("chosen over Attn.Q_Norm inside it: it adds")
    assert (
        not by["net.attn.q_norm"].candidate
        and by["net.attn.q_norm"].reason == "inside net.attn, whose kernel covers it"
    )
    # the block adds one op beyond its fused part (a layer norm, which alone competes with the library's): tuned through it
    assert (
        by["net.block"].reason.startswith("holds Block.Fused, chosen; what it adds beyond them")
        and "one op per call" in by["net.block"].reason
    )
    assert (
        by["net.block.norm"].reason == "one op per call (layer_norm): a kernel for it alone competes with the library's"
    )
    assert by["net.flat"].reason == "views and copies only: no arithmetic for a kernel"
    assert by["net.tiny"].reason.startswith("0.0") and "however fast its kernel" in by["net.tiny"].reason
    assert by["net.outer"].reason.startswith("holds Outer.Inner, chosen")


# --------------------------------------------------------------------------- the keep rule


def test_the_keep_rule_on_given_samples():
    cfg = TuneConfig()
    before = [1.0, 1.02, 0.98, 1.01, 0.99] * 4
    fast = compare("eager", before, [0.9 * b for b in before], 10, cfg)
    assert fast.faster and fast.speedup == pytest.approx(1 / 0.9, abs=1e-3) and fast.before.rounds == 20
    noisy = compare(
        "eager", before, [0.9 * b if k % 3 else 1.1 * b for k, b in enumerate(before)], 10, cfg
    )  # faster in 2 rounds of 3
    assert noisy.speedup > 1.05 and noisy.speedup_low < 1 and not noisy.faster
    small = compare(
        "compiled", before, [0.996 * b for b in before], 10, cfg
    )  # faster every round, by too little to matter
    assert small.speedup_low > 1 and not small.faster
    slow = compare("compiled", before, [1.3 * b for b in before], 10, cfg)
    assert slow.speedup < 1 and not slow.faster
    kept, why = explain(fast, compare("compiled", before, [0.95 * b for b in before], 10, cfg), cfg)
    assert kept and why == (
        "faster beyond the noise (p10 above 1x, median at least 1.01x): eager round-by-round speedup: median 1.111x, "
        "p10 1.111x; compiled round-by-round speedup: median 1.053x, p10 1.053x"
    )
    kept, why = explain(fast, noisy.model_copy(update={"mode": "compiled"}), cfg)
    assert not kept and why.startswith(
        "not faster beyond the noise compiled (needs the round-by-round speedup's p10 above 1x and its "
        "median at least 1.01x): "
    )
    kept, why = explain(fast, slow, cfg)
    assert not kept and why.startswith(
        "slower compiled in most paired rounds (round-by-round speedup's median below 1x)"
    )
    assert "median 0.7692x" in why  # the statistic that decided, with the digits that show which side of 1x it is on
    from kernelfix.capture.schema import OutputCheck

    broken = fast.model_copy(update={"output": OutputCheck(ok=False, problem="the outputs differ in structure")})
    assert explain(broken, fast, cfg) == (False, "breaks the model's output (eager): the outputs differ in structure")
    with pytest.raises(ValueError):
        compare("eager", [1.0], [], 1, cfg)
    # Promising: inside the noise alone, but its gains may add up with the others' (tried together).
    assert promising(noisy, noisy.model_copy(update={"mode": "compiled"}), cfg)
    assert not promising(noisy, small, cfg)  # a median gain too small to matter in one mode
    assert not promising(noisy, slow, cfg) and not promising(broken, noisy, cfg) and not promising(noisy, None, cfg)


def test_a_swapped_view_shares_everything_it_does_not_swap():
    ex = import_file(EXAMPLE, "tiny_transformer")
    model = ex.build()
    attn, mlp = model.blocks[0].attn, model.blocks[0].mlp
    view = swapped_view(model, {"blocks.0.attn": nn.Identity(), "blocks.0.mlp": nn.Identity()})
    assert isinstance(view.blocks[0].attn, nn.Identity) and isinstance(view.blocks[0].mlp, nn.Identity)
    assert model.blocks[0].attn is attn and model.blocks[0].mlp is mlp  # the original keeps its own
    assert (
        view.blocks[1] is model.blocks[1]
        and view.blocks[0].ln1 is model.blocks[0].ln1
        and view.head.weight is model.head.weight
    )
    with torch.no_grad():
        assert view(ex.tokens()).shape == model(ex.tokens()).shape


# --------------------------------------------------------------------------- load_tuned

PLAIN_KERNEL = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):  # a plain-torch stand-in for the kernel a session found
    def __init__(self, weights):
        super().__init__()
        w = torch.load(weights, weights_only=True)
        self.gain, self.bias = nn.Parameter(w["gain"]), nn.Parameter(w["bias"])
    def forward(self, x):
        return x * torch.sigmoid(x * self.gain) + self.bias
"""


def test_load_tuned_applies_the_kept_swaps(tmp_path):
    task = tmp_path / "tasks" / "model_gate.py"
    capture(GATED, "model.gate", task)
    session = tmp_path / "sessions" / "gate"
    SessionDir.create(
        session, task=Task.load(task), model="replay:none", agent=AgentConfig(), judge=JudgeConfig(device="cpu")
    )
    (session / "best.py").write_text(textwrap.dedent(PLAIN_KERNEL))
    report = TuneReport(
        kernelfix_version="t",
        created_at=0,
        updated_at=0,
        script=str(GATED),
        script_sha256="-",
        model_name="model",
        model_class="__main__.Net",
        device="cpu",
        judge_device="cpu",
        backward=False,
        llm="replay:none",
        top=1,
        modules=[ModuleRow(module="model.gate", module_class="Gate", calls=1, share=0.5)],
        kept=[KeptSwap(module="model.gate", session=str(session))],
    )
    (tmp_path / "report.json").write_text(report.model_dump_json())
    user = import_file(GATED, "gated_model")
    original, model = user.Net().eval(), user.Net().eval()
    model.load_state_dict(original.state_dict())
    assert kernelfix.load_tuned(tmp_path, model) is model
    assert type(model.gate).__name__ == "CapturedKernel" and all(c.ok for c in model.gate.checks)
    x = torch.randn(4, 16, 64)
    with torch.no_grad():
        want = original(x)
        assert torch.allclose(model(x), want, atol=1e-6)
        assert torch.allclose(torch.compile(model, fullgraph=True, backend="aot_eager")(x), want, atol=1e-6)
    with pytest.raises(SwapError, match="is the tune already loaded"):
        kernelfix.load_tuned(tmp_path, model)
    with pytest.raises(SwapError, match="tuned a Net, not a Sequential"):
        kernelfix.load_tuned(tmp_path, nn.Sequential())
    with pytest.raises(SwapError, match="holds no tune"):
        kernelfix.load_tuned(tmp_path / "sessions", model)


TRAIN = """
import sys
import torch
sys.path.insert(0, {fixtures!r})
from gated_model import Net

torch.manual_seed(0)
model = Net()
with torch.no_grad():
    model(torch.randn(4, 16, 64))  # a warm-up without gradients: passed over
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(4, 16, 64)).square().mean().backward()
opt.step()
"""


def test_a_swap_in_training_carries_its_backward(tmp_path):
    """--backward: the training step's call is the one tried; the swapped model's gradients (those of the norm before the
    gate, which flow back through the swapped gate's backward) match the original's, and the steps are timed."""
    from kernelfix.tune.model_call import run_to_model_call
    from kernelfix.tune.swaps import Trials

    script = tmp_path / "train.py"
    script.write_text(TRAIN.format(fixtures=str(FIX)))
    task = tmp_path / "gate.py"
    assert not capture(script, "model.gate", tmp_path / "first.py").manifest.backward  # its first call: the warm-up
    assert capture(
        script, "model.gate", task, calls="all", with_grad=True
    ).manifest.backward  # as tune --backward captures it
    session = tmp_path / "session"
    SessionDir.create(
        session, task=Task.load(task), model="replay:none", agent=AgentConfig(), judge=JudgeConfig(device="cpu")
    )
    (session / "best.py").write_text(textwrap.dedent(PLAIN_KERNEL))
    call = run_to_model_call(script, need_grad=True)
    assert call.trains and call.name == "model"
    cfg = TuneConfig(rounds=3, round_ms=1, compile_backend="aot_eager")
    t = Trials(call, model_name="model", cfg=cfg, judge_cfg=JudgeConfig(), backward=True).trial(
        [("model.gate", str(session))], [1]
    )
    assert t.grads.ok and [leaf.path for leaf in t.grads.leaves] == ["['norm.weight']", "['norm.bias']"]
    for c in (t.eager, t.compiled):
        assert c.error is None and c.output.ok and c.before.rounds == 3
    assert (t.kept, t.reason) == explain(t.eager, t.compiled, cfg)


# --------------------------------------------------------------------------- the command

CONFIG = """
[judge]
trials = 1
input_variants = []
float64_reference = false

[tune]
min_share = 0.0  # the gate's share on a busy 2-core box is whatever the other processes leave it; the rule has its own test
rounds = 5
round_ms = 5
profile_steps = 3
compile_backend = "aot_eager"
"""


@pytest.mark.slow
def test_tune_on_the_cpu_then_again(tmp_path):
    """The whole flow as a user runs it, then the same command again."""
    cfg = tmp_path / "kernelfix.toml"
    cfg.write_text(CONFIG)
    out = tmp_path / "tuned"
    argv = [
        sys.executable,
        "-P",
        "-m",
        "kernelfix",
        "tune",
        str(GATED),
        "--model",
        f"replay:{FIX / 'replays'}",
        "--top",
        "1",
        "--out",
        str(out),
        "--device",
        "cpu",
        "--headless",
        "--config",
        str(cfg),
        "--json",
    ]
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert run.returncode in (0, 1), run.stderr[-4000:]
    report = TuneReport.model_validate_json(run.stdout)
    assert report == TuneReport.model_validate_json((out / "report.json").read_text()) and report.done
    by = {m.module: m for m in report.modules}
    assert [m.module for m in report.modules if m.candidate] == ["model.gate"]
    assert by["model.norm"].reason.startswith("one op per call (layer_norm)") and by["model.flat"].reason.startswith(
        "views and copies only"
    )
    gate = by["model.gate"]
    assert (
        gate.selected
        and Path(gate.task).is_file()
        and gate.session_status == "finished"
        and gate.correct
        and gate.best_turn == 1
    )
    assert (
        Path(gate.session).parent == (out / "sessions").resolve()
    )  # the batch's session, replayed from replays/Gate.jsonl (by class)
    t = gate.swap
    assert t is not None and t.modules == ["model.gate"] and t.best_turns == [1] and t.fallbacks == 0
    for c in (t.eager, t.compiled):
        assert (
            c.error is None
            and c.output.ok
            and c.before.rounds == c.after.rounds == 5
            and c.speedup_low <= c.speedup <= c.speedup_high
        )
    # Kept or not is the rule's decision on what was measured (Triton's interpreter against torch: it says slower here,
    # but the timing of a shared 2-core box is not asserted), and the report, the exit code and the summary follow it.
    assert (t.kept, t.reason) == explain(t.eager, t.compiled, TuneConfig(rounds=5))
    assert report.kept == (
        [KeptSwap(module="model.gate", session=gate.session)] if t.kept else []
    ) and run.returncode == (0 if t.kept else 1)
    assert f"model.gate: {'KEPT' if t.kept else 'not kept'}: {t.reason}" in " ".join(
        run.stderr.split()
    )  # lines broken at 120 columns
    # Again: every step is done, nothing is redone (the same trial, not timed again).
    again = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert again.returncode == run.returncode, again.stderr[-4000:]
    assert "ranking from" in again.stderr and "skipped (done earlier)" in again.stderr and "trying" not in again.stderr
    assert TuneReport.model_validate_json(again.stdout).row("model.gate").swap == t


def test_tune_refuses_bad_input(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # what tune sets for a model on the CPU, undone after the test
    out = str(tmp_path / "t")
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nmodel = torch.nn.Linear(2, 2)\nraise RuntimeError('no data here')\n")
    assert main(["tune", str(broken), "--model", "replay:/nonexistent.jsonl", "--out", out]) == 2
    assert "no replay file or directory /nonexistent.jsonl" in capsys.readouterr().err
    assert main(["tune", str(broken), "--rank-only", "--out", out]) == 2
    assert (
        "broken.py raised RuntimeError: no data here" in capsys.readouterr().err
        and not (tmp_path / "t" / "report.json").exists()
    )
    plain = tmp_path / "plain.py"
    plain.write_text(
        "import torch\nmodel = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Flatten())\nwith torch.no_grad():\n    model(torch.randn(4, 8))\n"
    )
    replays = str(FIX / "replays")
    assert main(["tune", str(plain), "--model", f"replay:{replays}", "--out", out, "--headless"]) == 1
    text = capsys.readouterr().out
    assert (
        "no module of model is worth a kernel (" in text
        and "1 module: one op per call" in text
        and "1 module: views and copies only" in text
    )
    assert json.loads((tmp_path / "t" / "report.json").read_text())["modules"][0]["module"] == "model"
    assert main(["tune", str(GATED), "--rank-only", "--out", out]) == 2  # DIR holds another script's tune
    assert "holds a tune of" in capsys.readouterr().err
    assert main(["tune", str(plain), "--rank-only", "--backward", "--out", str(tmp_path / "b")]) == 2
    assert "only without gradients" in capsys.readouterr().err


def test_a_tunes_collections_skip_what_was_there_and_leave_the_process_as_it_was():
    """Inside a tune what was alive before it is frozen (each collection scans only what the tune made), a cycle the
    tune made (a model with hooks) is still collected, and the process's own freeze is left as it found it. Frozen
    objects leave the count as they are freed (by any thread), so the counts are bounds, not equalities."""

    class Holder:
        pass

    had = gc.get_freeze_count()
    gc.unfreeze()  # first a process that froze nothing
    try:
        with collections_skip_what_was_there():
            assert gc.get_freeze_count() > 0
            held = Holder()
            held.me = held
            ref = weakref.ref(held)
            del held
            free_memory()
            assert ref() is None
        assert gc.get_freeze_count() == 0
        gc.freeze()  # then one that froze its own objects
        mine = gc.get_freeze_count()
        made = [Holder() for _ in range(10_000)]  # tracked, and not frozen: a freeze inside would add them
        with collections_skip_what_was_there():
            assert gc.get_freeze_count() <= mine
        assert 0 < gc.get_freeze_count() <= mine and made
    finally:
        gc.unfreeze()
        if had:
            gc.freeze()
