#!/usr/bin/env python3
"""Dev-time: writes tests/fixtures/rope-llama3/, a random-weight Llama with Llama 3.1's rope
scaling ("llama3" rope_type) in both source forms, and transformers' goldens for it:

  hf/config.json, hf/model.safetensors   the Hugging Face form: rope_scaling {rope_type llama3,
                                         factor 8, low_freq_factor 1, high_freq_factor 4,
                                         original_max_position_embeddings 32}
  model.gguf                             the same bf16 weights as llama.cpp's converter writes
                                         them: q/k rows interleaved, no rope.scaling.* keys, the
                                         scaling as rope_freqs.weight (f32 [head_dim/2] frequency
                                         divisors, computed as convert_hf_to_gguf.py does)
  MANIFEST, rope-*.bin                   goldens (docs/ORACLE.md's format) from transformers'
                                         LlamaForCausalLM on the HF form, f32 compute
  meta.json                              versions, hashes, the factors, per-case margins, and
                                         how far the goldens are from the same model run without
                                         the scaling (the fixture's sensitivity)

Shape: 2 layers, hidden 64, 4 query heads over 2 kv heads, head_dim 16, intermediate 128,
vocab 256, rope_theta 500, rms_norm_eps 1e-5, untied lm_head. With original context 32 the
8 rope pairs fall in all three llama3 bands: pair 0 (wavelength 6.3 tokens) is kept, pairs 1-2
(13.6, 29.4) are smoothed, pairs 3-7 (64 .. 1400) are divided by 8; prompts run to position 190,
six times the original context, so the scaled frequencies decide the attention pattern.

    /work/venv/bin/python scripts/make-rope-llama3.py           # ~1 minute
    /work/venv/bin/python scripts/make-rope-llama3.py --verify  # re-read the goldens

Tests (tests/runtime/rope_scaling_test.c) read the files with plain C and never run Python.
"""
import argparse
import importlib.util
import json
import math
import os
import platform
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import LlamaForCausalLM

import gguf
from gguf import GGMLQuantizationType as T

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "rope-llama3")
HF = os.path.join(OUT, "hf")
GGUF_PATH = os.path.join(OUT, "model.gguf")

# the golden writer, top-K records and greedy runner are gen-oracle.py's (one format)
_spec = importlib.util.spec_from_file_location("gen_oracle", os.path.join(ROOT, "scripts", "gen-oracle.py"))
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

SEED = 20250301
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FF, VOCAB = 2, 64, 4, 2, 16, 128, 256
THETA = 500.0
ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32}
PROMPT_SEED = 11
PROMPTS = [("len6", 6), ("len48", 48), ("len160", 160)]
MIN_MARGIN = 0.05
FULL_EVERY = 8   # full logits rows at every 8th position (and the last prompt position)


def config(rope_scaling=ROPE):
    return {
        "_name_or_path": "radiance/rope-llama3",
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
        "rope_scaling": rope_scaling,
        "rope_theta": THETA,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": VOCAB,
    }


def weights():
    """HF names and layouts, rounded to bf16 (the values both sources hold)."""
    rng = np.random.default_rng(SEED)

    def lin(out_f, in_f, gain=1.0):
        return rng.standard_normal((out_f, in_f), dtype=np.float32) * np.float32(gain / np.sqrt(in_f))

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": rng.standard_normal((VOCAB, HIDDEN), dtype=np.float32)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(HIDDEN)
        w[p + "self_attn.q_proj.weight"] = lin(HEADS * HEAD_DIM, HIDDEN, 2.0)  # sharp attention:
        w[p + "self_attn.k_proj.weight"] = lin(KV_HEADS * HEAD_DIM, HIDDEN, 2.0)  # positions matter
        w[p + "self_attn.v_proj.weight"] = lin(KV_HEADS * HEAD_DIM, HIDDEN)
        w[p + "self_attn.o_proj.weight"] = lin(HIDDEN, HEADS * HEAD_DIM)
        w[p + "post_attention_layernorm.weight"] = norm(HIDDEN)
        w[p + "mlp.gate_proj.weight"] = lin(FF, HIDDEN)
        w[p + "mlp.up_proj.weight"] = lin(FF, HIDDEN)
        w[p + "mlp.down_proj.weight"] = lin(HIDDEN, FF)
    w["model.norm.weight"] = norm(HIDDEN)
    w["lm_head.weight"] = lin(VOCAB, HIDDEN, 3.0)
    return {k: torch.from_numpy(v).to(torch.bfloat16).contiguous() for k, v in w.items()}


def llama_cpp_rope_factors(hparams):
    """convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors (rope_freqs.weight), but with
    original_max_position_embeddings read from rope_scaling (llama.cpp reads a top-level key
    and falls back to 8192, which is Llama 3.1's value)."""
    rope_scaling = hparams["rope_scaling"]
    base = hparams.get("rope_theta", 10000.0)
    dim = hparams["head_dim"]
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor = rope_scaling.get("factor", 8.0)
    low_freq_factor = rope_scaling.get("low_freq_factor", 1.0)
    high_freq_factor = rope_scaling.get("high_freq_factor", 4.0)
    old_context_len = rope_scaling.get("original_max_position_embeddings", 8192)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    rope_factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            rope_factors.append(1)
        elif wavelen > low_freq_wavelen:
            rope_factors.append(factor)
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            rope_factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(torch.tensor(rope_factors, dtype=torch.float32).numpy(), dtype=np.float32)


def permute(w, n_head):
    """llama.cpp's LlamaModel.permute: rotate-half rows to GGUF's interleaved pairs."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


def bf16_bytes(t):
    """A bf16 torch tensor [out, in] as the uint8 array gguf's writer takes with raw_dtype BF16."""
    return np.ascontiguousarray(t.view(torch.int16).numpy().view(np.uint8))


def write_gguf(w, factors):
    wr = gguf.GGUFWriter(GGUF_PATH, arch="llama")
    wr.add_name("rope-llama3 fixture")
    wr.add_uint32("general.file_type", 32)  # MOSTLY_BF16
    wr.add_block_count(LAYERS)
    wr.add_context_length(512)
    wr.add_embedding_length(HIDDEN)
    wr.add_feed_forward_length(FF)
    wr.add_head_count(HEADS)
    wr.add_head_count_kv(KV_HEADS)
    wr.add_layer_norm_rms_eps(1e-5)
    wr.add_rope_freq_base(THETA)
    wr.add_rope_dimension_count(HEAD_DIM)
    wr.add_vocab_size(VOCAB)
    # no rope.scaling.* keys: llama.cpp writes the llama3 scaling as the rope_freqs tensor only
    wr.add_tensor("token_embd.weight", bf16_bytes(w["model.embed_tokens.weight"]), raw_dtype=T.BF16)
    wr.add_tensor("rope_freqs.weight", factors)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        g = f"blk.{i}."
        q = permute(w[p + "self_attn.q_proj.weight"], HEADS)
        k = permute(w[p + "self_attn.k_proj.weight"], KV_HEADS)
        wr.add_tensor(g + "attn_norm.weight", w[p + "input_layernorm.weight"].float().numpy())
        wr.add_tensor(g + "attn_q.weight", bf16_bytes(q), raw_dtype=T.BF16)
        wr.add_tensor(g + "attn_k.weight", bf16_bytes(k), raw_dtype=T.BF16)
        wr.add_tensor(g + "attn_v.weight", bf16_bytes(w[p + "self_attn.v_proj.weight"]), raw_dtype=T.BF16)
        wr.add_tensor(g + "attn_output.weight", bf16_bytes(w[p + "self_attn.o_proj.weight"]), raw_dtype=T.BF16)
        wr.add_tensor(g + "ffn_norm.weight", w[p + "post_attention_layernorm.weight"].float().numpy())
        wr.add_tensor(g + "ffn_gate.weight", bf16_bytes(w[p + "mlp.gate_proj.weight"]), raw_dtype=T.BF16)
        wr.add_tensor(g + "ffn_up.weight", bf16_bytes(w[p + "mlp.up_proj.weight"]), raw_dtype=T.BF16)
        wr.add_tensor(g + "ffn_down.weight", bf16_bytes(w[p + "mlp.down_proj.weight"]), raw_dtype=T.BF16)
    wr.add_tensor("output_norm.weight", w["model.norm.weight"].float().numpy())
    wr.add_tensor("output.weight", bf16_bytes(w["lm_head.weight"]), raw_dtype=T.BF16)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def load(folder):
    return oracle.plain(LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager"),
                        torch.float32)


@torch.no_grad()
def teacher_forced(model, seq):
    return model(input_ids=torch.tensor([seq], dtype=torch.long)).logits[0].float().numpy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--verify", action="store_true", help="only read the goldens back and check them")
    args = ap.parse_args()
    oracle.OUT = OUT  # gen-oracle.py's verify() reads this folder's MANIFEST and cases
    if args.verify:
        oracle.verify()
        return 0

    torch.manual_seed(0)
    torch.set_num_threads(oracle.THREADS)
    torch.use_deterministic_algorithms(True)
    os.makedirs(HF, exist_ok=True)
    for f in os.listdir(OUT):
        if f.endswith(".bin"):
            os.remove(os.path.join(OUT, f))
    cfg = config()
    with open(os.path.join(HF, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    w = weights()
    save_file(w, os.path.join(HF, "model.safetensors"), metadata={"format": "pt"})
    factors = llama_cpp_rope_factors(cfg)
    write_gguf(w, factors)

    model = load(HF)
    rope = model.model.rotary_emb
    inv_hf = rope.inv_freq.float().numpy()
    inv_default = (1.0 / (THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.int64).float() / HEAD_DIM))).numpy()
    assert not np.allclose(inv_hf, inv_default), "transformers did not apply the llama3 scaling"
    # the GGUF's divisors reproduce transformers' frequencies to f32 rounding
    rel = np.abs(inv_default / factors - inv_hf) / inv_hf
    assert rel.max() < 1e-6, rel
    print("inv_freq (transformers):", inv_hf)
    print("rope_freqs.weight:      ", factors)

    # the same weights without the scaling: how far a rope that ignores it lands
    nos = os.path.join("/tmp", "rope-llama3-noscaling")
    os.makedirs(nos, exist_ok=True)
    with open(os.path.join(nos, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config(None), f)
    save_file(w, os.path.join(nos, "model.safetensors"), metadata={"format": "pt"})
    model_nos = load(nos)

    rng = np.random.default_rng(PROMPT_SEED)
    manifest, cases = [], []
    for case, n in PROMPTS:
        draws = 0
        while True:
            draws += 1
            prompt = [int(x) for x in rng.integers(0, VOCAB, n)]
            gen, logits, margins = oracle.run_case(model, prompt)
            if min(margins) >= MIN_MARGIN:
                break
        n_pos = n + len(gen) - 1
        full = sorted(set(range(0, n_pos, FULL_EVERY)) | {n - 1})
        fn = f"rope-{case}.bin"
        rest = oracle.write_case(os.path.join(OUT, fn), VOCAB, prompt, gen, logits, full)
        seq = prompt + gen[:-1]
        tf = teacher_forced(model, seq)
        agree_tf, kl_tf, _, _ = oracle.kl_stats(logits, tf)
        agree_nos, kl_nos, kl_nos_max, _ = oracle.kl_stats(logits, teacher_forced(model_nos, seq))
        gen_nos, _, _ = oracle.run_case(model_nos, prompt)
        same = next((i for i, (a, b) in enumerate(zip(gen, gen_nos)) if a != b), len(gen))
        cases.append({"file": fn, "n_prompt": n, "n_gen": len(gen), "draws": draws,
                      "min_greedy_margin": min(margins), "rest_mass_mean": float(rest.mean()),
                      "teacher_forced_vs_cached": {"top1": agree_tf, "mean_kl": kl_tf},
                      "without_scaling": {"top1": agree_nos, "mean_kl": kl_nos, "max_kl": kl_nos_max,
                                          "greedy_same_prefix": same}})
        manifest.append((fn, "rope-llama3", n, len(gen), len(full)))
        print(f"  {case:7s} {n:4d} tokens  margin {min(margins):.3f}  without scaling: top-1 {agree_nos:.3f} "
              f"mean KL {kl_nos:.3e}, greedy same for {same} tokens")

    with open(os.path.join(OUT, "MANIFEST"), "w") as f:
        f.write("# file model n_prompt n_gen n_full (scripts/make-rope-llama3.py; format: docs/ORACLE.md)\n")
        for r in manifest:
            f.write("%s %s %d %d %d\n" % r)
    meta = {
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "numpy": np.__version__,
                     "machine": platform.machine()},
        "config": {"layers": LAYERS, "hidden": HIDDEN, "heads": HEADS, "kv_heads": KV_HEADS,
                   "head_dim": HEAD_DIM, "ff": FF, "vocab": VOCAB, "rope_theta": THETA, "rope_scaling": ROPE},
        "sha256": {os.path.relpath(p, OUT): oracle.sha256(p) for p in
                   (os.path.join(HF, "config.json"), os.path.join(HF, "model.safetensors"), GGUF_PATH)},
        "inv_freq_transformers": [float(x) for x in inv_hf],
        "rope_freqs": [float(x) for x in factors],
        "load": "LlamaForCausalLM.from_pretrained(hf, dtype=float32, attn_implementation='eager')",
        "cases": cases,
    }
    with open(os.path.join(OUT, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(OUT) for f in fs)
    print(f"{OUT}: {total} bytes")
    oracle.verify()
    return 0


if __name__ == "__main__":
    sys.exit(main())
