"""A Hugging Face transformers model built from a config with random weights (no download), run as users run it.

    python examples/models/hf_decoder.py [--family llama] [--size tiny] [--mode eval] [--device cpu] [--dtype float32]

--family: llama, qwen3, qwen3_moe, mixtral, gpt2 (decoders), bert, vit (encoders).
--size: tiny (a few layers of width 64: seconds on a CPU) or realistic (a Llama of hidden 2048, 16 layers,
16 heads, 4 KV heads, intermediate 5632; a mixture of experts of the same width with as many active
parameters per token), --batch and --seq (defaults 2 x 16 tiny, 8 x 1024 realistic).
--mode, how the script calls its model:
  eval          model.eval(), then model(ids), with gradients enabled (a script written without no_grad)
  no-grad       the same under torch.no_grad()
  inference     the same under torch.inference_mode()
  train         model.train(), a forward, a cross-entropy loss, loss.backward(), an optimizer step
  generate      model.generate(ids, max_new_tokens=--new-tokens, do_sample=False) under torch.no_grad()

The model is built under a fixed seed, so every run of the same arguments builds the same weights.
`kernelfix tune` runs this script unchanged (docs/tune.md):

    kernelfix tune examples/models/hf_decoder.py --rank-only -- --family llama --mode no-grad
"""

from __future__ import annotations

import argparse

import torch

SIZES = {
    "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, inter=128, vocab=256, experts=4, top_k=2, moe_inter=64),
    "realistic": dict(
        hidden=2048, layers=16, heads=16, kv_heads=4, inter=5632, vocab=32000, experts=16, top_k=2, moe_inter=2816
    ),
}
DECODERS = ("llama", "qwen3", "qwen3_moe", "mixtral", "gpt2")


def build_config(family: str, size: str):
    import transformers as tf

    s = SIZES[size]
    common = dict(
        vocab_size=s["vocab"], hidden_size=s["hidden"], num_hidden_layers=s["layers"], num_attention_heads=s["heads"]
    )
    if family == "llama":
        return tf.LlamaConfig(
            **common, num_key_value_heads=s["kv_heads"], intermediate_size=s["inter"], max_position_embeddings=4096
        )
    if family == "qwen3":
        return tf.Qwen3Config(
            **common,
            num_key_value_heads=s["kv_heads"],
            intermediate_size=s["inter"],
            head_dim=s["hidden"] // s["heads"],
            max_position_embeddings=4096,
        )
    if family == "qwen3_moe":
        return tf.Qwen3MoeConfig(
            **common,
            num_key_value_heads=s["kv_heads"],
            intermediate_size=s["inter"],
            head_dim=s["hidden"] // s["heads"],
            num_experts=s["experts"],
            num_experts_per_tok=s["top_k"],
            moe_intermediate_size=s["moe_inter"],
            max_position_embeddings=4096,
        )
    if family == "mixtral":
        return tf.MixtralConfig(
            **common,
            num_key_value_heads=s["kv_heads"],
            intermediate_size=s["moe_inter"],
            num_local_experts=s["experts"],
            num_experts_per_tok=s["top_k"],
            max_position_embeddings=4096,
        )
    if family == "gpt2":
        return tf.GPT2Config(
            vocab_size=s["vocab"], n_embd=s["hidden"], n_layer=s["layers"], n_head=s["heads"], n_positions=4096
        )
    if family == "bert":
        return tf.BertConfig(
            vocab_size=s["vocab"],
            hidden_size=s["hidden"],
            num_hidden_layers=s["layers"],
            num_attention_heads=s["heads"],
            intermediate_size=s["inter"],
        )
    if family == "vit":
        return tf.ViTConfig(
            hidden_size=s["hidden"],
            num_hidden_layers=s["layers"],
            num_attention_heads=s["heads"],
            intermediate_size=s["inter"],
            image_size=32,
            patch_size=8,
        )
    raise SystemExit(f"unknown --family {family}")


def build_model(family: str, size: str = "tiny", *, device: str = "cpu", dtype: torch.dtype = torch.float32):
    import transformers as tf

    torch.manual_seed(0)
    config = build_config(family, size)
    if family == "bert":
        model = tf.BertForMaskedLM(config)
    elif family == "vit":
        model = tf.ViTForImageClassification(config)
    else:
        model = tf.AutoModelForCausalLM.from_config(config)
    return model.to(device=device, dtype=dtype)


def make_inputs(family: str, size: str, batch: int, seq: int, device: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    if family == "vit":
        return torch.randn(batch, 3, 32, 32, generator=g).to(device)
    return torch.randint(0, SIZES[size]["vocab"], (batch, seq), generator=g).to(device)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--family", default="llama", choices=[*DECODERS, "bert", "vit"])
    p.add_argument("--size", default="tiny", choices=list(SIZES))
    p.add_argument("--mode", default="eval", choices=["eval", "no-grad", "inference", "train", "generate"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--new-tokens", type=int, default=8)
    a = p.parse_args()
    batch = a.batch or (2 if a.size == "tiny" else 8)
    seq = a.seq or (16 if a.size == "tiny" else 1024)
    model = build_model(a.family, a.size, device=a.device, dtype=getattr(torch, a.dtype))
    x = make_inputs(a.family, a.size, batch, seq, a.device)
    if a.mode == "train":
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        out = model(x)
        logits = out.logits
        target = torch.zeros(logits.shape[0], dtype=torch.long, device=a.device) if a.family == "vit" else x
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))
        loss.backward()
        opt.step()
        print(f"loss {loss.item():.4f}")
        return
    model.eval()
    if a.mode == "generate":
        with torch.no_grad():
            tokens = model.generate(x, max_new_tokens=a.new_tokens, do_sample=False)
        print("tokens", tokens[0, -a.new_tokens :].tolist())
        return
    if a.mode == "no-grad":
        with torch.no_grad():
            out = model(x)
    elif a.mode == "inference":
        with torch.inference_mode():
            out = model(x)
    else:
        out = model(x)
    logits = out.logits
    print(f"logits {tuple(logits.shape)} checksum {logits.float().sum().item():.4f}")


if __name__ == "__main__":
    main()
