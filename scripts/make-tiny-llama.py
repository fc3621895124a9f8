#!/usr/bin/env python3
"""Dev-time: writes tests/fixtures/tiny-llama-bf16/, a random-weight Llama in bf16 for the
engine's bf16 path (config.json + model.safetensors; no tokenizer, prompts are token ids).

Shape: 3 layers, hidden 64, 4 query heads over 2 kv heads (GQA, 2 queries per kv head),
head_dim 16, intermediate 192, vocab 384, rope_theta 10000 (no scaling), rms_norm_eps 1e-5,
untied lm_head. About 200k parameters, ~400 KB.

The weights are drawn from a seeded numpy generator (same bytes on every run and machine),
rounded to bf16 by torch (round-to-nearest-even) and written by the reference `safetensors`
package. They are scaled so that the model is not a near-uniform predictor: attention
scores and logits have a spread of a few units, so greedy continuations have clear margins
and top-1 agreement means something. Norm weights are 1 + noise, so a kernel that ignores
them fails. The oracle goldens for it are written by scripts/gen-oracle.py.

    /work/venv/bin/python scripts/make-tiny-llama.py
"""
import json
import os

import numpy as np
import torch
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "tiny-llama-bf16")

SEED = 20240601
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FF, VOCAB = 3, 64, 4, 2, 16, 192, 384
assert HEADS * HEAD_DIM == HIDDEN


def config():
    return {
        "_name_or_path": "radiance/tiny-llama-bf16",
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": FF,
        "max_position_embeddings": 512,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": VOCAB,
    }


def weights():
    rng = np.random.default_rng(SEED)

    def lin(out_f, in_f, gain=1.0):  # HF Linear layout: [out, in]
        return rng.standard_normal((out_f, in_f), dtype=np.float32) * np.float32(gain / np.sqrt(in_f))

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": rng.standard_normal((VOCAB, HIDDEN), dtype=np.float32)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(HIDDEN)
        w[p + "self_attn.q_proj.weight"] = lin(HEADS * HEAD_DIM, HIDDEN, 1.5)
        w[p + "self_attn.k_proj.weight"] = lin(KV_HEADS * HEAD_DIM, HIDDEN, 1.5)
        w[p + "self_attn.v_proj.weight"] = lin(KV_HEADS * HEAD_DIM, HIDDEN)
        w[p + "self_attn.o_proj.weight"] = lin(HIDDEN, HEADS * HEAD_DIM)
        w[p + "post_attention_layernorm.weight"] = norm(HIDDEN)
        w[p + "mlp.gate_proj.weight"] = lin(FF, HIDDEN)
        w[p + "mlp.up_proj.weight"] = lin(FF, HIDDEN)
        w[p + "mlp.down_proj.weight"] = lin(HIDDEN, FF)
    w["model.norm.weight"] = norm(HIDDEN)
    w["lm_head.weight"] = lin(VOCAB, HIDDEN, 3.0)
    return {k: torch.from_numpy(v).to(torch.bfloat16).contiguous() for k, v in w.items()}


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config(), f, indent=2)
        f.write("\n")
    w = weights()
    save_file(w, os.path.join(OUT, "model.safetensors"), metadata={"format": "pt"})
    n = sum(t.numel() for t in w.values())
    size = os.path.getsize(os.path.join(OUT, "model.safetensors"))
    print(f"{OUT}: {len(w)} tensors, {n} parameters, model.safetensors {size} bytes")


if __name__ == "__main__":
    main()
