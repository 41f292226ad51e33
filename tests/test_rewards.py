"""The RL reward and its adapters: the formula on real H100 timings (a speedup within the timings' own
noise counts as none), TRL's GRPOTrainer training a step with it and calling it through its own
reward code, and verl's compute_score called exactly as verl's reward managers call it.

Timings: eager and torch.compile of KernelBench tasks measured on the H100 (docs/data/baseline_h100.json,
`kernelfix baseline`), torch.compile standing in for a candidate: two real implementations timed the
judge's way. The adapters judge for real, in process, on the CPU (TRL's with the session's warm judge).
"""

from __future__ import annotations

import functools
import importlib
import json
import math

import pytest
from conftest import CORPUS, REPO_ROOT
from pydantic import ValidationError

from kernelfix.rewards import RewardConfig, speedup_view
from kernelfix.tools.verdict import InputSetReport, Timings, TimingStats, Verdict

H100 = {r["task"]: r for r in json.loads((REPO_ROOT / "docs" / "data" / "baseline_h100.json").read_text())["rows"]}
TASK = (CORPUS / "tasks" / "relu.py").read_text()
OK_REPLY = "The kernel:\n```python\n" + (CORPUS / "candidates" / "triton_relu_ok.py").read_text() + "```\n"


def timed(task: str, **fields) -> Verdict:
    """An ok verdict whose candidate is torch.compile of ``task`` against its eager, as timed on the H100."""
    row = H100[task]
    eager, compiled = TimingStats(**row["eager"]), TimingStats(**row["compiled"])
    return Verdict(
        category="ok",
        task=task,
        device="cuda",
        timings=Timings(candidate=compiled, eager=eager),
        speedup_eager=eager.median_ms / compiled.median_ms,
        **fields,
    )


def test_a_speedup_within_the_timings_noise_counts_as_none():
    cfg = RewardConfig()
    for task in ("5_Matrix_scalar_multiplication", "1_Square_matrix_multiplication_"):  # 1.0009x and 1.0004x
        v = timed(task)
        view = speedup_view(v)
        assert view.nominal == pytest.approx(v.speedup_eager) and view.nominal > 1 and view.within_noise
        assert view.effective == 1.0 and cfg.score(v) == cfg.correct


def test_beyond_the_noise_the_reward_is_the_speedup_the_timings_vouch_for():
    cfg = RewardConfig()
    softmax = timed("23_Softmax")  # 1.298x; the two p10-p90 ranges allow 1.2965x at least
    view = speedup_view(softmax)
    assert not view.within_noise and view.low < view.nominal and view.effective == view.low
    assert cfg.score(softmax) == pytest.approx(1.0 + 0.5 * math.log2(view.low))
    slower = timed("87_conv_pointwise_2D")  # torch.compile 0.34x of eager: slower beyond doubt
    assert speedup_view(slower).effective == speedup_view(slower).high < 1
    assert cfg.score(slower) == pytest.approx(0.5)  # clipped at 0.5x: an ok kernel still beats a failed one (0)
    assert cfg.score(timed("40_LayerNorm")) == pytest.approx(2.5)  # 18x, clipped at 8x
    assert RewardConfig(noise_scale=0).explain(softmax).speedup.effective == pytest.approx(
        softmax.speedup_eager
    )  # medians alone
    assert RewardConfig(speedup_term="linear").score(softmax) == pytest.approx(1.0 + 0.5 * (view.low - 1))
    assert RewardConfig(speedup_term="none").score(softmax) == 1.0


def test_input_sets_the_baseline_and_an_untimed_ok():
    a, b = timed("23_Softmax"), timed("5_Matrix_scalar_multiplication")
    sets = Verdict(
        category="ok",
        task="t",
        device="cuda",
        input_sets=[
            InputSetReport(index=1, shapes="x", timings=a.timings),
            InputSetReport(index=2, shapes="x", timings=b.timings),
        ],
    )
    assert speedup_view(sets).effective == pytest.approx(
        math.sqrt(speedup_view(a).effective * 1.0)
    )  # geometric mean of each set's
    over_compile = timed("23_Softmax").model_copy(
        update={"timings": a.timings.model_copy(update={"compiled": a.timings.candidate})}
    )
    assert RewardConfig(baseline="compile").explain(over_compile).speedup.effective == 1.0  # itself: no speedup
    assert RewardConfig(baseline="compile").explain(a).speedup.baseline == "eager"  # no torch.compile timing: eager
    cpu = Verdict(category="ok", task="t", device="cpu")
    assert RewardConfig().score(cpu) == 1.0 and "not timed" in RewardConfig().explain(cpu).why


def test_what_is_not_ok_gets():
    cfg = RewardConfig(cheating=-1.0)
    v = lambda category: Verdict(category=category, task="t", device="cuda")  # noqa: E731
    assert cfg.score(v("compile_error:nvcc")) == 0.0 and cfg.score(v("correctness_error:numerical")) == 0.0
    assert cfg.score(v("cheating:disallowed_aten")) == -1.0
    assert cfg.score(v("infra:gpu_busy")) is None and cfg.score(None) is None  # the machine's or the task's: no reward
    assert RewardConfig(unjudged=0.0).score(v("infra:worker")) == 0.0
    with pytest.raises(ValidationError):
        RewardConfig(speedup_range=(2.0, 8.0))
    with pytest.raises(ValidationError):
        RewardConfig(corect=1.0)


# --------------------------------------------------------------------------- the adapters, judging for real on the CPU


class Lent:
    """The session's kernelfix.Judge lent to a reward's pool (conftest's relu_cpu_judge: warm already), not closed with it."""

    def __init__(self, judge):
        self.judge, self.gpu = judge, judge.gpu

    def evaluate_text(self, candidate, **options):
        return self.judge.evaluate_text(candidate, **options)

    def close(self) -> None:
        pass


def test_verl_compute_score_as_its_reward_managers_call_it():
    # verl 0.9.1: verl/trainer/ppo/reward.py get_custom_reward_fn loads the module from
    # reward.custom_reward_function.path ("pkg://kernelfix.rewards.verl": importlib.import_module) and wraps the
    # function as partial(_call_with_kwargs, raw_fn, reward_kwargs), which calls raw_fn(*args, **{**kwargs, **reward_kwargs}).
    module = importlib.import_module("kernelfix.rewards.verl")

    def _call_with_kwargs(raw_fn, extra_kwargs, *args, **kwargs):
        return raw_fn(*args, **{**kwargs, **extra_kwargs})

    compute_score = functools.partial(_call_with_kwargs, module.compute_score, {"device": "cpu", "cheating": -1.0})
    # verl/workers/reward_manager/naive.py (and the reward loop's naive manager, in a thread pool):
    # self.compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...)
    # (Verdicts that need no trial here; an ok kernel's score through verl's call: tests/test_serve.py.)
    extra = {"task_name": "relu", "num_turns": None}  # verl adds num_turns (and rollout_reward_scores) itself
    bad = compute_score(
        data_source="kernelbench", solution_str="import os\nclass ModelNew: pass", ground_truth=TASK, extra_info=extra
    )
    # the reward loop adds these where a reward model router exists: accepted, not ours
    routed = compute_score(
        data_source="kernelbench",
        solution_str="```python\nimport kernelfix\nclass ModelNew: pass\n```",
        ground_truth=TASK,
        extra_info=extra,
        reward_router_address=None,
        reward_model_tokenizer=None,
    )
    assert bad == {
        "score": 0.0,
        "ok": 0.0,
        "effective_speedup": 0.0,
        "category": "format_error:no_code",
    }  # the keys of every sample
    assert routed == {"score": -1.0, "ok": 0.0, "effective_speedup": 0.0, "category": "cheating:tampering"}
    # verl/workers/reward_manager/batch.py: self.compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=, **reward_kwargs)
    scores = module.compute_score_batch(
        data_sources=["kb", "kb"],
        solution_strs=["```python\nimport kernelfix\nclass ModelNew: pass\n```", "nothing"],
        ground_truths=[TASK, TASK],
        extra_infos=[None, None],
        device="cpu",
        cheating=-1.0,
    )
    assert [(s["score"], s["category"]) for s in scores] == [
        (-1.0, "cheating:tampering"),
        (0.0, "format_error:no_code"),
    ]
    with pytest.raises(ValidationError, match="speedup_wieght"):
        compute_score(
            data_source="kb", solution_str=OK_REPLY, ground_truth=TASK, speedup_wieght=2.0
        )  # a typo is an error, not a default
    from kernelfix.rewards.backend import _shared

    assert len(_shared) == 1  # every call above used one in-process judge, kept for the process


@pytest.mark.slow
def test_trl_grpo_trains_a_step_with_the_reward_and_its_reward_code_scores_a_kernel(
    relu_cpu_judge, tmp_path_factory, monkeypatch
):
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    from tiny_model import save_tiny_qwen3

    from kernelfix.rewards.trl import KernelReward

    root = tmp_path_factory.mktemp("grpo")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(root / "hf-cache"))
    model = save_tiny_qwen3(root / "model")
    data = datasets.Dataset.from_dict(
        {"prompt": ["Write ModelNew for this ReLU.", "Make it fast."], "task": [TASK, TASK]}
    )
    from kernelfix.library.judge_pool import JudgePool
    from kernelfix.rewards.backend import InProcess
    from kernelfix.tools.config import JudgeConfig

    pool = JudgePool(JudgeConfig(device="cpu"), queue=None, make_judge=lambda req, gpu, root: Lent(relu_cpu_judge))
    reward = KernelReward(
        backend=InProcess(pool=pool)
    )  # in process, as KernelReward() judges; the session's warm judge
    args = trl.GRPOConfig(
        output_dir=str(root / "out"),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=8,
        max_steps=1,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
    )
    trainer = trl.GRPOTrainer(model=str(model), reward_funcs=[reward], train_dataset=data, args=args)
    trainer.train()  # a random model writes no code block: every reward 0, and the step runs through
    logged = trainer.state.log_history[0]
    assert logged["rewards/kernelfix/mean"] == 0.0 and logged["kernelfix/ok_rate"] == 0.0
    # TRL's own reward code (GRPOTrainer._calculate_rewards) with completions that hold a kernel or not.
    inputs = [{"prompt": "p", "task": TASK}, {"prompt": "p", "task": TASK}]
    rewards = trainer._calculate_rewards(inputs, ["p", "p"], [OK_REPLY, "no code"], [[0], [0]])
    assert rewards[:, 0].tolist() == [1.0, 0.0]
    pool.close()
