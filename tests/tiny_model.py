"""A causal LM small enough to train on the CPU in a test, built here (no download): a byte-level BPE
tokenizer (256 byte tokens, no merges: any text round-trips) with the Qwen3 chat template TRL ships and
Qwen3's special tokens, and a one-layer Qwen3 with random weights, saved as a directory TRL loads by path."""

from __future__ import annotations

from pathlib import Path


def qwen3_template() -> str:
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text()


def save_tiny_qwen3(directory: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    byte_level = Tokenizer(
        models.BPE(vocab={c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}, merges=[])
    )
    byte_level.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    byte_level.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=byte_level, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    tok.chat_template = qwen3_template()
    tok.save_pretrained(directory)
    cfg = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=32768,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    Qwen3ForCausalLM(cfg).save_pretrained(directory)
    return directory
