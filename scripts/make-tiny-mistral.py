#!/usr/bin/env python3
"""Dev-time: writes tests/fixtures/tiny-mistral-bf16/, a random-weight Mistral in bf16 with a
sliding window of 24 tokens (config.json + model.safetensors; no tokenizer, prompts are token
ids), and its goldens, tests/fixtures/tiny-mistral-oracle/ (RADORCL1 files, docs/ORACLE.md),
from transformers' MistralForCausalLM, eager attention, f32 compute.

Shape: 2 layers, hidden 64, 4 query heads over 2 kv heads, head_dim 16, intermediate 192,
vocab 384, rope_theta 10000, rms_norm_eps 1e-5, untied head, sliding_window 24 (not a multiple
of the engine's 16-token KV block, so a block leaves the window part by part). Weights are
drawn as scripts/make-tiny-llama.py draws them (its own seed).

Cases: prompts of 10 (inside the window), 24 (exactly the window) and 150 tokens (six windows
past it), each with its 32-token greedy continuation (prompt and continuation both cross the
window's edge), top-64 log-probabilities at every position (no whole rows). The script checks
what it writes: the cached decode rows equal a full forward over prompt ++ continuation, and
the window changes the logits of the long case against the same weights with full attention
(so the goldens do test the window).

    /work/venv-hf/bin/python scripts/make-tiny-mistral.py
"""
import importlib.util
import json
import os

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import MistralForCausalLM

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MODEL = os.path.join(ROOT, "tests", "fixtures", "tiny-mistral-bf16")
OUT = os.path.join(ROOT, "tests", "fixtures", "tiny-mistral-oracle")

_spec = importlib.util.spec_from_file_location("gen_oracle", os.path.join(ROOT, "scripts", "gen-oracle.py"))
go = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(go)  # its run_case, write_case (the golden format) and sha256

SEED = 20250317
PROMPT_SEED = 11
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FF, VOCAB, WINDOW = 2, 64, 4, 2, 16, 192, 384, 24
PROMPTS = [("len10", 10), ("len24", 24), ("len150", 150)]
MIN_MARGIN = 0.05


def config(window):
    return {
        "_name_or_path": "radiance/tiny-mistral-bf16",
        "architectures": ["MistralForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": FF,
        "max_position_embeddings": 512,
        "model_type": "mistral",
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "sliding_window": window,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": VOCAB,
    }


def weights():
    rng = np.random.default_rng(SEED)

    def lin(out_f, in_f, gain=1.0):
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


def load(window):
    m = MistralForCausalLM.from_pretrained(MODEL, dtype=torch.float32, attn_implementation="eager",
                                           sliding_window=window)
    assert m.config._attn_implementation == "eager" and m.config.sliding_window == window
    return m.eval()


@torch.no_grad()
def main():
    os.makedirs(MODEL, exist_ok=True)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(MODEL, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config(WINDOW), f, indent=2)
        f.write("\n")
    save_file(weights(), os.path.join(MODEL, "model.safetensors"), metadata={"format": "pt"})
    model, full = load(WINDOW), load(None)
    rng = np.random.default_rng(PROMPT_SEED)
    meta = {"transformers": transformers.__version__, "torch": torch.__version__,
            "model": {"source": os.path.relpath(MODEL, ROOT),
                      "sha256": {f: go.sha256(os.path.join(MODEL, f)) for f in sorted(os.listdir(MODEL))},
                      "load": "MistralForCausalLM.from_pretrained(folder, dtype=float32, attn_implementation='eager')",
                      "sliding_window": WINDOW, "mask": "key j visible to query i iff j <= i and i - j < window"},
            "cases": []}
    manifest = []
    for case, n in PROMPTS:
        for draws in range(1, 1001):
            prompt = [int(t) for t in rng.integers(0, VOCAB, n)]
            gen, logits, margins = go.run_case(model, prompt)
            if min(margins) >= MIN_MARGIN:
                break
        else:
            raise SystemExit(f"{case}: no prompt with greedy margins >= {MIN_MARGIN}")
        # the cached rows (prefill + decode steps) are a full forward's, window and all
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
                              "min_greedy_margin": min(margins), "cached_vs_full_forward": dev,
                              "window_vs_full_attention_max_logit_diff": against_full,
                              "rest_mass_max": float(rest.max())})
        manifest.append((fn, "tiny-mistral-bf16", n, len(gen), 0))
        print(f"  {case:7s} {n:4d} tokens  margin {min(margins):6.3f} ({draws} draws), "
              f"window moves logits by {against_full:.3f} -> {gen}")
    with open(os.path.join(OUT, "MANIFEST"), "w", encoding="utf-8") as f:
        f.write("# file model n_prompt n_gen n_full  (written by scripts/make-tiny-mistral.py; format: docs/ORACLE.md)\n")
        for row in manifest:
            f.write(" ".join(str(x) for x in row) + "\n")
    with open(os.path.join(OUT, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(d, x)) for d in (MODEL, OUT) for x in os.listdir(d))
    print(f"{MODEL}, {OUT}: {total} bytes")


if __name__ == "__main__":
    main()
