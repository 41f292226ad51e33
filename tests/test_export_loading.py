"""The exported SFT files where they are used: loaded by Hugging Face `datasets` (chat JSONL and parquet),
rendered by `transformers`' apply_chat_template, and trained on by TRL's SFTTrainer through the recipe in
docs/export.md, run as written. The tokenizer is a byte-level one built here (no download, tests/tiny_model.py) with the Qwen3
chat template TRL ships; the model a one-layer Qwen3 saved beside it."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path

import pytest
from agent_support import REPO
from test_export import PERFECT, SOURCE, R, save, trajectory
from tiny_model import save_tiny_qwen3

from kernelfix.cli import EXIT_OK, main

# In the dev extra: CI runs these (the TRL trainings are in the slow tier). Imported by the tests that use them (the
# worker that runs this file's group), not at collection, which every worker does.
for _lib in ("datasets", "transformers", "trl"):
    if importlib.util.find_spec(_lib) is None:
        pytest.skip(f"{_lib} is not installed", allow_module_level=True)

RECIPE_DOC = REPO / "docs" / "export.md"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    """The same sessions exported as chat JSONL and parquet (loss on the final answer) and as JSONL with loss on every answer."""
    root = tmp_path_factory.mktemp("export")
    sessions = root / "sessions"
    save(sessions, trajectory("repair", PERFECT))  # nvcc error, then correct, then faster
    save(
        sessions,
        trajectory(
            "repair_cpu",
            [
                ("compile_error:nvcc", None, R),
                ("correctness_error:numerical", None, "Ünïcode — ok? " * 3),
                ("ok", None, R),
            ],
            device="cpu",
            task_source=SOURCE + "\n# b\n",
        ),
    )
    save(sessions, trajectory("optimized", [("ok", 1.0, R), ("ok", 1.6, R * 2)], task_source=SOURCE + "\n# c\n"))
    files = {
        "jsonl": root / "final" / "sft.jsonl",
        "parquet": root / "final" / "sft.parquet",
        "all": root / "all" / "sft.jsonl",
    }
    assert main(["export", str(sessions), "--out", str(files["jsonl"])]) == EXIT_OK
    assert main(["export", str(sessions), "--out", str(files["parquet"])]) == EXIT_OK
    assert main(["export", str(sessions), "--out", str(files["all"]), "--loss", "all-assistant"]) == EXIT_OK
    return files


def _load(path: Path):
    import datasets

    return datasets.load_dataset(
        "parquet" if path.suffix == ".parquet" else "json",
        data_files=str(path),
        split="train",
        cache_dir=str(path.parent / "hf-cache"),
    )


def test_datasets_loads_jsonl_and_parquet_alike(exported):
    as_json, as_parquet = _load(exported["jsonl"]), _load(exported["parquet"])
    written = [json.loads(line) for line in exported["jsonl"].read_text().splitlines()]
    assert as_json.num_rows == as_parquet.num_rows == len(written) == 3
    assert set(as_json.column_names) == set(as_parquet.column_names) == {"messages", "metadata"}
    # parquet: one struct type for every message (None where a message lacks a key); JSON: each message as written
    assert set(as_parquet.features["messages"].feature) == {"role", "content", "reasoning_content", "weight"}
    for j, p, w in zip(as_json, as_parquet, written):
        assert j["messages"] == [{k: v for k, v in m.items() if v is not None} for m in p["messages"]] == w["messages"]
        for key in ("session_id", "kind", "loss", "final_turn", "final_speedup_eager", "turns"):
            assert j["metadata"][key] == p["metadata"][key] == w["metadata"][key]
    assert sorted(as_json["metadata"], key=lambda m: m["session_id"])[0]["kind"] == "optimization"


# --------------------------------------------------------------------------- a tokenizer and model, built here


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """tests/tiny_model.py's tokenizer and one-layer Qwen3, saved as a model directory TRL loads by path."""
    return save_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"))


def test_apply_chat_template_renders_a_record(exported, tiny_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    data = _load(exported["jsonl"])
    rec = next(r for r in data if r["metadata"]["session_id"] == "repair")
    msgs = rec["messages"]
    text = tok.apply_chat_template(msgs, tokenize=False)
    final = msgs[-1]
    # Qwen3's template strips newlines (only) around the reasoning
    expected_tail = f"<|im_start|>assistant\n<think>\n{final['reasoning_content'].strip(chr(10))}\n</think>\n\n{final['content']}<|im_end|>\n"
    assert text.startswith(
        f"<|im_start|>system\n{msgs[0]['content']}<|im_end|>\n<|im_start|>user\n{msgs[1]['content']}<|im_end|>\n"
    )
    assert text.endswith(expected_tail)
    for m in msgs[2:-1]:  # earlier answers and the judge's feedback, in order, no reasoning
        assert f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" in text
    assert text.count("<think>") == 1 and "None" not in text.replace(SOURCE, "")
    assert tok.decode(tok(text)["input_ids"]) == text  # the tokenizer loses nothing


# --------------------------------------------------------------------------- TRL, through the documented recipe


def recipe(model: Path, data: Path) -> str:
    """The TRL recipe from docs/export.md, with its MODEL and DATA pointed at the test's, on the CPU
    (TRL trains in bf16 by default, which it refuses without a GPU), for one step: the masks are checked on the
    dataset the trainer built, and one step shows it trains (three epochs took three times the CPU)."""
    block = next(b for b in re.findall(r"```python\n(.*?)```", RECIPE_DOC.read_text(), re.S) if "SFTTrainer(" in b)
    block, n = re.subn(r'^MODEL = ".*"$', f"MODEL = {str(model)!r}", block, flags=re.M)
    block, m = re.subn(r'^DATA = ".*".*$', f"DATA = {str(data)!r}", block, flags=re.M)
    block, c = re.subn(
        r"^args = SFTConfig\($", "args = SFTConfig(use_cpu=True, bf16=False, max_steps=1,", block, flags=re.M
    )
    assert n == m == c == 1, "the recipe's MODEL, DATA and SFTConfig lines"
    return block


def run_recipe(model: Path, data: Path, workdir: Path, monkeypatch) -> dict:
    import datasets

    monkeypatch.chdir(workdir)  # output_dir is relative
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(workdir / "hf-cache"))  # not the user's ~/.cache
    ns: dict = {}
    exec(compile(recipe(model, data), str(RECIPE_DOC), "exec"), ns)
    return ns


def trained_spans(example: dict, tok) -> list[str]:
    """The runs of tokens that carry loss (label != -100), decoded."""
    spans, cur = [], []
    for token, label in zip(example["input_ids"], example["labels"]):
        if label != -100:
            cur.append(token)
        elif cur:
            spans.append(cur)
            cur = []
    if cur:
        spans.append(cur)
    return [tok.decode(s) for s in spans]


@pytest.mark.slow
def test_trl_trains_on_the_final_answer_only(exported, tiny_model, tmp_path, monkeypatch):
    from trl.data_utils import is_conversational

    ns = run_recipe(tiny_model, exported["jsonl"], tmp_path, monkeypatch)
    trainer = ns["trainer"]
    assert trainer.state.global_step >= 1 and math.isfinite(trainer.state.log_history[-1]["train_loss"])
    tok = trainer.processing_class
    written = [json.loads(line) for line in exported["jsonl"].read_text().splitlines()]
    assert len(trainer.train_dataset) == len(written)
    for ex, rec in zip(trainer.train_dataset, written):
        msgs = rec["messages"]
        assert is_conversational({"prompt": msgs[:-1], "completion": msgs[-1:]})
        prompt = tok.apply_chat_template(msgs[:-1], tokenize=False, add_generation_prompt=True)
        full = tok.apply_chat_template(msgs, tokenize=False)
        assert full.startswith(prompt)  # the prompt renders the same alone: the completion starts where it ends
        assert tok.decode(ex["input_ids"]) == full  # nothing cut
        # weight 1 on the final answer only = loss on exactly its rendering: reasoning, content, end of turn
        assert trained_spans(ex, tok) == [full[len(prompt) :]]
        assert (
            msgs[-1]["content"] in full[len(prompt) :]
            and [m.get("weight") for m in msgs if m["role"] == "assistant"][-1] == 1
        )


@pytest.mark.slow
def test_trl_trains_on_every_answer_with_loss_all_assistant(exported, tiny_model, tmp_path, monkeypatch):
    from trl.data_utils import is_conversational

    parquet = exported["all"].with_suffix(".parquet")  # the parquet loader in this path
    assert (
        main(
            [
                "export",
                str(exported["jsonl"].parent.parent / "sessions"),
                "--out",
                str(parquet),
                "--loss",
                "all-assistant",
            ]
        )
        == EXIT_OK
    )
    ns = run_recipe(tiny_model, parquet, tmp_path, monkeypatch)
    trainer = ns["trainer"]
    assert trainer.state.global_step >= 1 and math.isfinite(trainer.state.log_history[-1]["train_loss"])
    tok = trainer.processing_class
    written = [json.loads(line) for line in exported["all"].read_text().splitlines()]
    for ex, rec in zip(trainer.train_dataset, written):
        msgs = rec["messages"]
        assert is_conversational(rec)
        answers = [m for m in msgs if m["role"] == "assistant"]
        assert all(m["weight"] == 1 for m in answers)
        spans = trained_spans(ex, tok)
        assert len(spans) == len(answers)  # one trained span per answer
        for span, m in zip(spans, answers):
            assert (
                span.startswith("<think>\n") and m["content"] in span and span.endswith("<|im_end|>\n")
            )  # the training template marks the newline too
            assert (m.get("reasoning_content") or "").strip() in span
        others = [m["content"] for m in msgs if m["role"] != "assistant"]
        assert not any(o[:200] in s for o in others for s in spans)  # no system or user text carries loss
