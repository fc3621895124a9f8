#!/usr/bin/env python3
"""Dev-time: writes two random-weight Qwen3 checkpoints of the same weights (no Qwen3 weights are
on PyPI; issue 14), for the qwen3 and qwen3_ggml plugins' oracle tests:

  tests/fixtures/tiny-qwen3-bf16/   config.json + model.safetensors (bf16), as transformers'
                                    Qwen3ForCausalLM saves them; no tokenizer (prompts are ids)
  tests/fixtures/tiny-qwen3.gguf    the same values in f32 (bf16 widens exactly), written with the
                                    `gguf` package under llama.cpp's qwen3 names and keys

Shape: 3 layers, hidden 64, 4 query heads over 2 kv heads, head_dim 32 (NOT hidden / heads = 16:
a reader that derives head_dim breaks), intermediate 128, vocab 384, rope_theta 10000 (no
scaling), rms_norm_eps 1e-6, untied lm_head (as Qwen3-8B and up; a random tied head mostly
predicts the last token again, so greedy continuations would be one token repeated and prove
little; the tied path is SmolLM2's). Each layer has q_norm / k_norm gammas [head_dim]. About 172k parameters.

The weights are drawn from a seeded numpy generator (same bytes on every run and machine) and
rounded to bf16 by torch (round-to-nearest-even), scaled as scripts/make-tiny-llama.py's so the
model is not a near-uniform predictor; norm gammas are 1 + noise (q/k norms 1 + 0.2 noise), so a
kernel that skips or swaps them fails. GGUF q/k rows are stored as Hugging Face's: llama.cpp's
convert_hf_to_gguf.py (Qwen3Model < Qwen2Model) does not permute them (NEOX rope). The script
reads the GGUF back and checks every tensor equals the safetensors one, widened; the oracle
goldens (scripts/gen-oracle.py --tiny-qwen3) are therefore those of both files.

    /work/venv-hf/bin/python scripts/make-tiny-qwen3.py
"""
import json
import os

import gguf
import numpy as np
import torch
from safetensors.torch import load_file, save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "tiny-qwen3-bf16")
GGUF_OUT = os.path.join(ROOT, "tests", "fixtures", "tiny-qwen3.gguf")

SEED = 20250429
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FF, VOCAB = 3, 64, 4, 2, 32, 128, 384
THETA, EPS, CTX = 10000.0, 1e-6, 512
assert HEADS * HEAD_DIM != HIDDEN  # head_dim must come from the metadata


def config():
    return {
        "_name_or_path": "radiance/tiny-qwen3-bf16",
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": FF,
        "max_position_embeddings": CTX,
        "max_window_layers": LAYERS,
        "model_type": "qwen3",
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": EPS,
        "rope_scaling": None,
        "rope_theta": THETA,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": VOCAB,
    }


def weights():
    rng = np.random.default_rng(SEED)

    def lin(out_f, in_f, gain=1.0):  # HF Linear layout: [out, in]
        return rng.standard_normal((out_f, in_f), dtype=np.float32) * np.float32(gain / np.sqrt(in_f))

    def norm(n, spread=0.1):
        return (1.0 + spread * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": rng.standard_normal((VOCAB, HIDDEN), dtype=np.float32)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(HIDDEN)
        w[p + "self_attn.q_proj.weight"] = lin(HEADS * HEAD_DIM, HIDDEN, 1.5)
        w[p + "self_attn.k_proj.weight"] = lin(KV_HEADS * HEAD_DIM, HIDDEN, 1.5)
        w[p + "self_attn.v_proj.weight"] = lin(KV_HEADS * HEAD_DIM, HIDDEN)
        w[p + "self_attn.o_proj.weight"] = lin(HIDDEN, HEADS * HEAD_DIM)
        w[p + "self_attn.q_norm.weight"] = norm(HEAD_DIM, 0.2)
        w[p + "self_attn.k_norm.weight"] = norm(HEAD_DIM, 0.2)
        w[p + "post_attention_layernorm.weight"] = norm(HIDDEN)
        w[p + "mlp.gate_proj.weight"] = lin(FF, HIDDEN)
        w[p + "mlp.up_proj.weight"] = lin(FF, HIDDEN)
        w[p + "mlp.down_proj.weight"] = lin(HIDDEN, FF)
    w["model.norm.weight"] = norm(HIDDEN)
    w["lm_head.weight"] = lin(VOCAB, HIDDEN, 3.0)
    return {k: torch.from_numpy(v).to(torch.bfloat16).contiguous() for k, v in w.items()}


# Hugging Face suffix -> llama.cpp's qwen3 tensor name (gguf.MODEL_ARCH.QWEN3's map)
GGUF_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")
    assert parts[:2] == ["model", "layers"], hf
    return f"blk.{parts[2]}.{GGUF_LAYER['.'.join(parts[3:])]}"


def write_gguf(w):
    """The keys convert_hf_to_gguf.py writes for a Qwen3 (TextModel.set_gguf_parameters: no
    rope.dimension_count; key/value_length from head_dim), plus vocab_size (no tokenizer here to
    count the tokens from). Tensors in f32, HF row order (no q/k permutation for qwen3)."""
    arch = gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.QWEN3]
    assert arch == "qwen3"
    wr = gguf.GGUFWriter(GGUF_OUT, arch)
    wr.add_name("tiny-qwen3")
    wr.add_block_count(LAYERS)
    wr.add_context_length(CTX)
    wr.add_embedding_length(HIDDEN)
    wr.add_feed_forward_length(FF)
    wr.add_head_count(HEADS)
    wr.add_head_count_kv(KV_HEADS)
    wr.add_key_length(HEAD_DIM)
    wr.add_value_length(HEAD_DIM)
    wr.add_rope_freq_base(THETA)
    wr.add_layer_norm_rms_eps(EPS)
    wr.add_vocab_size(VOCAB)
    wr.add_file_type(gguf.LlamaFileType.ALL_F32)
    for k, t in w.items():
        wr.add_tensor(gguf_name(k), t.float().numpy())
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def check_gguf(w):
    r = gguf.GGUFReader(GGUF_OUT)
    got = {t.name: t for t in r.tensors}
    assert len(got) == len(w), (len(got), len(w))
    for k, t in w.items():
        g = got[gguf_name(k)]
        assert g.tensor_type == gguf.GGMLQuantizationType.F32, k
        a = np.asarray(g.data).reshape(t.shape)  # GGUF dims are reversed; the data is row-major
        assert np.array_equal(a, t.float().numpy()), k


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config(), f, indent=2)
        f.write("\n")
    w = weights()
    st = os.path.join(OUT, "model.safetensors")
    save_file(w, st, metadata={"format": "pt"})
    back = load_file(st)
    assert all(torch.equal(back[k], w[k]) for k in w)
    write_gguf(w)
    check_gguf(w)
    n = sum(t.numel() for t in w.values())
    print(f"{OUT}: {len(w)} tensors, {n} parameters, model.safetensors {os.path.getsize(st)} bytes")
    print(f"{GGUF_OUT}: {os.path.getsize(GGUF_OUT)} bytes, every tensor equal to the bf16 one widened")


if __name__ == "__main__":
    main()
