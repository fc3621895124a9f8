#!/usr/bin/env python3
"""Dev-time: writes a random-weight Qwen3 checkpoint in the block-scaled fp8 layout DeepSeek-V3 and
Qwen3-FP8 checkpoints use (no fp8 checkpoint is on PyPI; issue 18), for the qwen3_fp8 plugin's
oracle test:

  tests/fixtures/tiny-qwen3-fp8/   config.json (quantization_config: quant_method "fp8", fmt
                                   "e4m3", activation_scheme "dynamic", weight_block_size
                                   [128, 128]) + model.safetensors; no tokenizer (prompts are ids)

Every linear of the layers is `X.weight` (F8_E4M3 [N, K]) beside `X.weight_scale_inv` (F32
[ceil(N/128), ceil(K/128)]), quantised per 128x128 block as transformers' FineGrainedFP8 does
(scale = amax / 448, codes = (w / scale) rounded to e4m3fn by torch): the weight is codes * scale.
The embedding, the norms and lm_head stay bf16 (modules_to_not_convert: lm_head), as the real
checkpoints ship them.

Shape: 2 layers, hidden 256, 6 query heads over 2 kv heads, head_dim 64 (not hidden / heads),
intermediate 384, vocab 256, untied: q_proj is 3x2 blocks of 128x128, k/v 1x2, o 2x3, gate/up 3x2,
down 2x3, so a reader that swaps the scale grid's axes or strides misplaces scales. Every dim is a
whole number of blocks, as in the real checkpoints and as transformers' CPU dequantiser requires
(scripts/gen-oracle.py --tiny-qwen3-fp8 checks its weights against it); partial blocks are
checked in tests/kernels/ref_test.c against rad-kbench's reference. About 1.3 MB.

    /work/venv-hf/bin/python scripts/make-tiny-qwen3-fp8.py

With --per-tensor, the same model quantised with one scale per tensor instead (transformers'
FineGrainedFP8 with weight_block_size None: each `X.weight_scale_inv` a 0-d F32, scale = the
tensor's amax / 448), into tests/fixtures/tiny-qwen3-fp8-tensor/, with hidden 320 and intermediate
448 so the 128x128 grid the reader spreads each scale over ends in partial blocks on both axes.

    /work/venv-hf/bin/python scripts/make-tiny-qwen3-fp8.py --per-tensor
"""
import argparse
import json
import os

import numpy as np
import torch
from safetensors.torch import load_file, save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "tiny-qwen3-fp8")

SEED = 20261207
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FF, VOCAB = 2, 256, 6, 2, 64, 384, 256
THETA, EPS, CTX, BLOCK, FP8_MAX = 10000.0, 1e-6, 512, 128, 448.0
PER_TENSOR = False
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def config():
    return {
        "_name_or_path": "radiance/tiny-qwen3-fp8",
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
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "weight_block_size": None if PER_TENSOR else [BLOCK, BLOCK],
                                "modules_to_not_convert": ["lm_head"]},
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


def quantise(w):
    """w: f32 [N, K] -> (codes float8_e4m3fn [N, K], scale f32 [ceil(N/128), ceil(K/128)])."""
    n, k = w.shape
    bn, bk = -(-n // BLOCK), -(-k // BLOCK)
    scale = torch.empty(bn, bk, dtype=torch.float32)
    codes = torch.empty(n, k, dtype=torch.float8_e4m3fn)
    for i in range(bn):
        for j in range(bk):
            blk = w[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK]
            s = blk.abs().max().clamp(min=1e-12) / FP8_MAX
            scale[i, j] = s
            codes[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK] = (blk / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return codes, scale


def quantise_tensor(w):
    """w: f32 [N, K] -> (codes float8_e4m3fn [N, K], scale f32 0-d): one scale for the tensor."""
    s = w.abs().max().clamp(min=1e-12) / FP8_MAX
    return (w / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), s.reshape(())


def dequantise(codes, scale):
    """The weight the checkpoint means, in f32: codes * scale per block (one f32 product)."""
    s = scale.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:codes.shape[0], :codes.shape[1]]
    return codes.to(torch.float32) * s


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
    out = {}
    for k, v in w.items():
        t = torch.from_numpy(v)
        if any(k.endswith(lin_name + ".weight") for lin_name in LINEARS):
            codes, scale = quantise_tensor(t) if PER_TENSOR else quantise(t)
            out[k] = codes.contiguous()
            out[k + "_scale_inv"] = scale.contiguous()
        else:
            out[k] = t.to(torch.bfloat16).contiguous()
    return out


def main():
    global OUT, PER_TENSOR, HIDDEN, FF
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-tensor", action="store_true", help="one scale per tensor, into tiny-qwen3-fp8-tensor/")
    if ap.parse_args().per_tensor:
        OUT, PER_TENSOR, HIDDEN, FF = OUT + "-tensor", True, 320, 448
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config(), f, indent=2)
        f.write("\n")
    w = weights()
    st = os.path.join(OUT, "model.safetensors")
    save_file(w, st, metadata={"format": "pt"})
    back = load_file(st)
    assert all(back[k].dtype == w[k].dtype and torch.equal(back[k].view(torch.uint8), w[k].view(torch.uint8))
               if w[k].dtype == torch.float8_e4m3fn else torch.equal(back[k], w[k]) for k in w)
    n_fp8 = sum(t.numel() for t in w.values() if t.dtype == torch.float8_e4m3fn)
    print(f"{OUT}: {len(w)} tensors ({n_fp8} fp8 codes), model.safetensors {os.path.getsize(st)} bytes")


if __name__ == "__main__":
    main()
