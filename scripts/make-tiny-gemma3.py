#!/usr/bin/env python3
"""Dev-time: writes tests/fixtures/tiny-gemma3-bf16/, a random-weight Gemma 3 text model in bf16
as a Hugging Face folder (Gemma3ForCausalLM, model_type gemma3_text: config.json as transformers
writes it + model.safetensors; no tokenizer, prompts are token ids), and its goldens,
tests/fixtures/tiny-gemma3-oracle/ (RADORCL1 files, docs/ORACLE.md), from transformers'
Gemma3ForCausalLM, eager attention, f32 compute.

Shape: 4 layers, hidden 64, 2 query heads over 1 kv head, head_dim 48 (NOT hidden / heads = 32:
a reader that derives head_dim breaks), intermediate 128, vocab 320, tied head (as every Gemma
3). Every value that could be taken from a default differs from it, so a reader that misses a
key fails the goldens:

  layer_types           sliding, full, sliding, sliding (not a period: config.json's
                        sliding_window_pattern still says 6, which would make all four local)
  sliding_window        8 (prompts and continuations run far past it)
  rope_parameters       full_attention theta 1e6, sliding_attention theta 500 (transformers 5's
                        nested form; the plugin's local default is 10000)
  query_pre_attn_scalar 24 (the default is head_dim)

Norm gammas are stored as Hugging Face stores them, w (the model computes x * (1 + w)), drawn as
0.1 noise around a base: 0 for the pre-norms and q/k norms, 1 for the post-norms (so each block
adds about twice a unit-RMS vector and the tied head's prediction is not the embedding's own
token again); a converter that forgets the "+1" scales by w and fails every position. Embedding
rows are N(0, 1/8²): the model multiplies them by sqrt(64) = 8.

Cases: prompts of 5 (inside the window), 8 (exactly it) and 60 tokens, each with its 32-token
greedy continuation (top-1 margins >= 0.05), top-64 log-probabilities at every position. The
script checks what it writes: the cached decode rows equal a full forward over prompt ++
continuation, the window changes the long case's logits against the same weights with full
attention, and the model's local layers are the ones layer_types lists.

    /work/venv-hf/bin/python scripts/make-tiny-gemma3.py
"""
import importlib.util
import json
import os

import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MODEL = os.path.join(ROOT, "tests", "fixtures", "tiny-gemma3-bf16")
OUT = os.path.join(ROOT, "tests", "fixtures", "tiny-gemma3-oracle")

_spec = importlib.util.spec_from_file_location("gen_oracle", os.path.join(ROOT, "scripts", "gen-oracle.py"))
go = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(go)  # its run_case, write_case (the golden format) and sha256

SEED = 20250601
PROMPT_SEED = 13
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FF, VOCAB, WINDOW = 4, 64, 2, 1, 48, 128, 320, 8
LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]
THETA_GLOBAL, THETA_LOCAL, QPAS = 1e6, 500.0, 24
assert HEADS * HEAD_DIM != HIDDEN and QPAS != HEAD_DIM  # both must come from the config
PROMPTS = [("len5", 5), ("len8", 8), ("len60", 60)]
MIN_MARGIN = 0.05


def config(window=WINDOW, layer_types=LAYER_TYPES):
    c = Gemma3TextConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FF, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
        sliding_window=window, layer_types=layer_types, max_position_embeddings=512,
        query_pre_attn_scalar=QPAS, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": THETA_GLOBAL},
                         "sliding_attention": {"rope_type": "default", "rope_theta": THETA_LOCAL}})
    d = c.to_dict()
    d["architectures"] = ["Gemma3ForCausalLM"]
    d["_name_or_path"] = "radiance/tiny-gemma3-bf16"
    d["dtype"] = "bfloat16"
    d.pop("transformers_version", None)
    return d


def weights():
    rng = np.random.default_rng(SEED)

    def lin(out_f, in_f, gain=1.0):  # HF Linear layout: [out, in]
        return rng.standard_normal((out_f, in_f), dtype=np.float32) * np.float32(gain / np.sqrt(in_f))

    def norm(n, base=0.0, spread=0.1):  # w; the model multiplies by 1 + w
        return (base + spread * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": rng.standard_normal((VOCAB, HIDDEN), dtype=np.float32) / np.float32(8)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(HIDDEN)
        w[p + "self_attn.q_proj.weight"] = lin(HEADS * HEAD_DIM, HIDDEN, 1.5)
        w[p + "self_attn.k_proj.weight"] = lin(KV_HEADS * HEAD_DIM, HIDDEN, 1.5)
        w[p + "self_attn.v_proj.weight"] = lin(KV_HEADS * HEAD_DIM, HIDDEN)
        w[p + "self_attn.o_proj.weight"] = lin(HIDDEN, HEADS * HEAD_DIM)
        w[p + "self_attn.q_norm.weight"] = norm(HEAD_DIM, 0.0, 0.2)
        w[p + "self_attn.k_norm.weight"] = norm(HEAD_DIM, 0.0, 0.2)
        w[p + "post_attention_layernorm.weight"] = norm(HIDDEN, 1.0)
        w[p + "pre_feedforward_layernorm.weight"] = norm(HIDDEN)
        w[p + "mlp.gate_proj.weight"] = lin(FF, HIDDEN)
        w[p + "mlp.up_proj.weight"] = lin(FF, HIDDEN)
        w[p + "mlp.down_proj.weight"] = lin(HIDDEN, FF)
        w[p + "post_feedforward_layernorm.weight"] = norm(HIDDEN, 1.0)
    w["model.norm.weight"] = norm(HIDDEN)
    return {k: torch.from_numpy(v).to(torch.bfloat16).contiguous() for k, v in w.items()}


def load(window=WINDOW, layer_types=LAYER_TYPES):
    kw = {} if window == WINDOW else {"sliding_window": window}
    if layer_types is not LAYER_TYPES:
        kw["layer_types"] = layer_types
    m = Gemma3ForCausalLM.from_pretrained(MODEL, dtype=torch.float32, attn_implementation="eager", **kw)
    assert m.config._attn_implementation == "eager"
    assert list(m.config.layer_types) == list(layer_types), m.config.layer_types
    return m.eval()


@torch.no_grad()
def main():
    os.makedirs(MODEL, exist_ok=True)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(MODEL, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config(), f, indent=2, sort_keys=True)
        f.write("\n")
    w = weights()
    st = os.path.join(MODEL, "model.safetensors")
    save_file(w, st, metadata={"format": "pt"})
    back = load_file(st)
    assert all(torch.equal(back[k], w[k]) for k in w)
    model = load()
    # every tensor the model has is one the folder holds (the head is the embedding, tied)
    sd = model.state_dict()
    assert set(sd) - {"lm_head.weight"} == set(w), sorted(set(sd) ^ set(w))
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    full = load(window=4096)  # the same weights, the window wider than any case
    rng = np.random.default_rng(PROMPT_SEED)
    meta = {"transformers": transformers.__version__, "torch": torch.__version__,
            "model": {"source": os.path.relpath(MODEL, ROOT),
                      "sha256": {f: go.sha256(os.path.join(MODEL, f)) for f in sorted(os.listdir(MODEL))},
                      "load": "Gemma3ForCausalLM.from_pretrained(folder, dtype=float32, attn_implementation='eager')",
                      "layer_types": LAYER_TYPES, "sliding_window": WINDOW,
                      "rope_theta": {"full_attention": THETA_GLOBAL, "sliding_attention": THETA_LOCAL},
                      "query_pre_attn_scalar": QPAS,
                      "mask": "local layers: key j visible to query i iff j <= i and i - j < window"},
            "cases": []}
    manifest = []
    for case, n in PROMPTS:
        for draws in range(1, 1001):
            prompt = [int(t) for t in rng.integers(0, VOCAB, n)]
            gen, logits, margins = go.run_case(model, prompt)
            if min(margins) >= MIN_MARGIN and len(set(gen)) > 4:
                break
        else:
            raise SystemExit(f"{case}: no prompt with greedy margins >= {MIN_MARGIN}")
        seq = torch.tensor([prompt + gen[:-1]])
        tf = model(input_ids=seq, use_cache=False).logits[0].float().numpy()
        dev = float(np.abs(tf - logits).max())
        assert dev < 1e-4, f"{case}: cached and uncached logits differ by {dev}"
        against_full = float(np.abs(full(input_ids=seq, use_cache=False).logits[0].float().numpy() - tf).max())
        if n + 32 > WINDOW:
            assert against_full > 1e-2, f"{case}: the window does not change the logits ({against_full})"
        fn = f"{case}.bin"
        rest = go.write_case(os.path.join(OUT, fn), VOCAB, prompt, gen, logits, [])
        meta["cases"].append({"file": fn, "n_prompt": n, "n_gen": len(gen), "draws": draws,
                              "min_greedy_margin": min(margins), "distinct_greedy_tokens": len(set(gen)),
                              "cached_vs_full_forward": dev,
                              "window_vs_full_attention_max_logit_diff": against_full,
                              "rest_mass_max": float(rest.max())})
        manifest.append((fn, "tiny-gemma3-bf16", n, len(gen), 0))
        print(f"  {case:6s} {n:4d} tokens  margin {min(margins):6.3f} ({draws} draws), "
              f"window moves logits by {against_full:.3f} -> {gen}")
    with open(os.path.join(OUT, "MANIFEST"), "w", encoding="utf-8") as f:
        f.write("# file model n_prompt n_gen n_full  (written by scripts/make-tiny-gemma3.py; format: docs/ORACLE.md)\n")
        for row in manifest:
            f.write(" ".join(str(x) for x in row) + "\n")
    with open(os.path.join(OUT, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(d, x)) for d in (MODEL, OUT) for x in os.listdir(d))
    print(f"{MODEL}, {OUT}: {total} bytes")


if __name__ == "__main__":
    main()
