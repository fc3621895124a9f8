#!/usr/bin/env python3
"""Writes the random-weight Llamas tests/gpu/check.sh runs libr4d on (the GPU machine cannot
download a checkpoint, and the default model is larger than what travels to it). numpy only.

    python3 tests/gpu/make-models.py --out DIR [--layers 22] [--small]

DIR/llama-bf16/      a Hugging Face folder (config.json, model.safetensors in bf16, no tokenizer:
                     prompts are token ids). TinyLlama-1.1B's shape: d 2048, 32 heads of 64 over 4
                     KV heads (GQA 8), FFN 5632, vocab 32000, --layers layers (22: 1.1B weights,
                     2.2 GB). rad-convert makes the bf16 and q8_0 containers of it; transformers
                     is its oracle (tests/gpu/oracle.py).
DIR/llama-fp8/       with --fp8: the bf16 folder's weights as a block-scaled fp8 checkpoint
                     (DeepSeek/Qwen3-FP8's layout: each linear's e4m3 codes and a weight_scale_inv
                     per 128x128 block, amax / 448; embedding, norms and head in bf16), for the
                     fp8 GEMMs (rad-convert makes a llama_fp8 container of it).
DIR/llama-q4k.gguf   the same shape as llama.cpp writes a Q4_K_M file: layer matrices in q4_k
                     (ffn_down and attn_v in q6_k), the embedding in q8_0, the head in q6_k, norms
                     in f32; a SentencePiece vocabulary of byte pieces and made-up words (the
                     server takes text). Random but valid blocks (sane f16 scales), not a quantisation of the
                     bf16 weights: what it is for is the kernels' shapes and encodings.
--small              a 2-layer model of d 256 (checks this script and rad-convert on a CPU).

Weights are N(0, 1/fan_in) (so activations stay near unit scale through the layers), the head
scaled by 4 so greedy choices have margins; norms 1 + N(0, 0.1). Seeded: same bytes every run.
"""
import argparse
import json
import os
import struct

import numpy as np

SEED = 20261207


def bf16_bits(x):
    """f32 array -> uint16 bf16 bits, round to nearest even (NaN-free input)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def shapes(c):
    d, hd, ff, V = c["hidden_size"], c["hidden_size"] // c["num_attention_heads"], c["intermediate_size"], c["vocab_size"]
    kv = c["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", (V, d), d)]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (d,), 0), (p + "self_attn.q_proj.weight", (d, d), d),
                (p + "self_attn.k_proj.weight", (kv, d), d), (p + "self_attn.v_proj.weight", (kv, d), d),
                (p + "self_attn.o_proj.weight", (d, d), d), (p + "post_attention_layernorm.weight", (d,), 0),
                (p + "mlp.gate_proj.weight", (ff, d), d), (p + "mlp.up_proj.weight", (ff, d), d),
                (p + "mlp.down_proj.weight", (d, ff), ff)]
    out += [("model.norm.weight", (d,), 0), ("lm_head.weight", (V, d), d)]
    return out


def tensor(rng, name, shape, fan_in):
    if fan_in == 0:  # a norm
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    scale = (4.0 if name == "lm_head.weight" else 1.0) / np.sqrt(fan_in)
    if name == "model.embed_tokens.weight":
        scale = 1.0
    return (scale * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)


def write_hf(out, c):
    os.makedirs(out, exist_ok=True)
    cfg = dict(c, architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu", rms_norm_eps=1e-5,
               rope_theta=10000.0, max_position_embeddings=2048, tie_word_embeddings=False, torch_dtype="bfloat16",
               bos_token_id=1, eos_token_id=2)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    sh = shapes(c)
    header, off = {}, 0
    for name, s, _ in sh:
        n = int(np.prod(s)) * 2
        header[name] = {"dtype": "BF16", "shape": list(s), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    rng = np.random.default_rng(SEED)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for name, s, fan in sh:  # tensor by tensor: 1.1B weights never sit in memory at once
            f.write(bf16_bits(tensor(rng, name, s, fan)).tobytes())


# ---- the same weights as a block-scaled fp8 checkpoint ---------------------------------------------

LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# every finite positive e4m3fn value, ascending, code 0x00 .. 0x7e
E4M3 = np.array([(m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
                 for e in range(16) for m in range(8) if not (e == 15 and m == 7)], dtype=np.float64)


def e4m3_codes(x):
    """f32 array (|x| <= 448) -> uint8 e4m3fn codes, the nearest value (ties to the lower code)."""
    a = np.abs(x).astype(np.float64)
    i = np.clip(np.searchsorted(E4M3, a), 1, len(E4M3) - 1)
    i -= (a - E4M3[i - 1]) <= (E4M3[i] - a)
    return (i.astype(np.uint8) | np.where(x < 0, 0x80, 0).astype(np.uint8)).astype(np.uint8)


def fp8_blocks(w):
    """f32 [N, K] -> (codes uint8 [N, K], scale f32 [ceil(N/128), ceil(K/128)])."""
    n, k = w.shape
    bn, bk = -(-n // 128), -(-k // 128)
    scale = np.empty((bn, bk), np.float32)
    codes = np.empty((n, k), np.uint8)
    for i in range(bn):
        for j in range(bk):
            blk = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            s = np.float32(max(float(np.abs(blk).max()), 1e-12) / 448.0)
            scale[i, j] = s
            codes[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = e4m3_codes(np.clip(blk / s, -448, 448))
    return codes, scale


def write_hf_fp8(out, c):
    os.makedirs(out, exist_ok=True)
    cfg = dict(c, architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu", rms_norm_eps=1e-5,
               rope_theta=10000.0, max_position_embeddings=2048, tie_word_embeddings=False, torch_dtype="bfloat16",
               bos_token_id=1, eos_token_id=2,
               quantization_config={"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                    "weight_block_size": [128, 128]})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    sh = shapes(c)
    header, off, plan = {}, 0, []
    for name, s, fan in sh:
        if name.split(".")[-2] in LINEAR:
            n = int(np.prod(s))
            header[name] = {"dtype": "F8_E4M3", "shape": list(s), "data_offsets": [off, off + n]}
            off += n
            sb = [-(-s[0] // 128), -(-s[1] // 128)]
            header[name + "_scale_inv"] = {"dtype": "F32", "shape": sb, "data_offsets": [off, off + 4 * sb[0] * sb[1]]}
            off += 4 * sb[0] * sb[1]
        else:
            n = int(np.prod(s)) * 2
            header[name] = {"dtype": "BF16", "shape": list(s), "data_offsets": [off, off + n]}
            off += n
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    rng = np.random.default_rng(SEED)  # the bf16 folder's draws, in its order
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for name, s, fan in sh:
            w = tensor(rng, name, s, fan)
            if name.split(".")[-2] in LINEAR:
                codes, scale = fp8_blocks(w)
                f.write(codes.tobytes())
                f.write(scale.astype("<f4").tobytes())
            else:
                f.write(bf16_bits(w).tobytes())


# ---- a GGUF with random K-quant blocks ------------------------------------------------------------

GGML = {"f32": (0, 1, 4), "q8_0": (8, 32, 34), "q4_k": (12, 256, 144), "q6_k": (14, 256, 210)}


def sane_f16(rng, n, lo, hi):
    return (rng.uniform(lo, hi, n).astype(np.float16) * np.where(rng.random(n) < 0.5, -1, 1).astype(np.float16)).view(np.uint16)


def blocks(rng, enc, n_elems):
    """Random valid blocks: code bytes random, f16 scales in a range where weights are O(0.05)."""
    t, be, bb = GGML[enc]
    nb = n_elems // be
    b = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    if enc == "q8_0":
        b[:, 0:2] = sane_f16(rng, nb, 2e-4, 6e-4).view(np.uint8).reshape(nb, 2)
    elif enc == "q4_k":  # d, dmin first
        b[:, 0:2] = np.abs(sane_f16(rng, nb, 1e-4, 3e-4).view(np.float16)).view(np.uint16).view(np.uint8).reshape(nb, 2)
        b[:, 2:4] = np.abs(sane_f16(rng, nb, 1e-4, 3e-4).view(np.float16)).view(np.uint16).view(np.uint8).reshape(nb, 2)
    elif enc == "q6_k":  # d last
        b[:, 208:210] = sane_f16(rng, nb, 2e-5, 6e-5).view(np.uint8).reshape(nb, 2)
    return b.tobytes()


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_arr(elem_type, items):
    return struct.pack("<IQ", elem_type, len(items)) + b"".join(items)


def spm_vocab(V):
    """A SentencePiece vocabulary of V pieces: <unk> <s> </s>, the 256 byte pieces, then words."""
    toks, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    toks += ["<0x%02X>" % b for b in range(256)]
    scores += [0.0] * 256
    types += [6] * 256
    letters = "etaoinshrdlucmfwypvbgkqjxz"
    i = 0
    while len(toks) < V:
        w, k = "", i
        while True:
            w += letters[k % 26]
            k //= 26
            if not k:
                break
        toks.append("\u2581" + w)
        scores.append(-float(len(toks)))
        types.append(1)
        i += 1
    return toks, scores, types


def write_gguf(path, c):
    d, L, ff, V = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"]
    H, KV = c["num_attention_heads"], c["num_key_value_heads"]
    kvd = KV * (d // H)
    kv = [("general.architecture", 8, gguf_str("llama")), ("general.name", 8, gguf_str("random-llama-q4k")),
          ("llama.block_count", 4, struct.pack("<I", L)), ("llama.context_length", 4, struct.pack("<I", 2048)),
          ("llama.embedding_length", 4, struct.pack("<I", d)), ("llama.feed_forward_length", 4, struct.pack("<I", ff)),
          ("llama.attention.head_count", 4, struct.pack("<I", H)), ("llama.attention.head_count_kv", 4, struct.pack("<I", KV)),
          ("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)),
          ("llama.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-5)), ("llama.vocab_size", 4, struct.pack("<I", V))]
    toks, scores, types = spm_vocab(V)  # a tokenizer, so the server can take text
    kv += [("tokenizer.ggml.model", 8, gguf_str("llama")),
           ("tokenizer.ggml.tokens", 9, gguf_arr(8, [gguf_str(t) for t in toks])),
           ("tokenizer.ggml.scores", 9, gguf_arr(6, [struct.pack("<f", x) for x in scores])),
           ("tokenizer.ggml.token_type", 9, gguf_arr(5, [struct.pack("<i", x) for x in types])),
           ("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 1)), ("tokenizer.ggml.eos_token_id", 4, struct.pack("<I", 2)),
           ("tokenizer.ggml.unknown_token_id", 4, struct.pack("<I", 0))]
    ts = [("token_embd.weight", (V, d), "q8_0")]
    for i in range(L):
        p = f"blk.{i}."
        ts += [(p + "attn_norm.weight", (d,), "f32"), (p + "attn_q.weight", (d, d), "q4_k"), (p + "attn_k.weight", (kvd, d), "q4_k"),
               (p + "attn_v.weight", (kvd, d), "q6_k"), (p + "attn_output.weight", (d, d), "q4_k"),
               (p + "ffn_norm.weight", (d,), "f32"), (p + "ffn_gate.weight", (ff, d), "q4_k"), (p + "ffn_up.weight", (ff, d), "q4_k"),
               (p + "ffn_down.weight", (d, ff), "q6_k")]
    ts += [("output_norm.weight", (d,), "f32"), ("output.weight", (V, d), "q6_k")]
    align = 32
    info, off = b"", 0
    for name, s, enc in ts:
        t, be, bb = GGML[enc]
        n = int(np.prod(s))
        ne = list(reversed(s))  # GGUF: innermost first
        info += gguf_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne)
        info += struct.pack("<IQ", t, off)
        off += (n // be * bb + align - 1) // align * align
    head = b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(kv))
    head += b"".join(gguf_str(k) + struct.pack("<I", t) + v for k, t, v in kv) + info
    head += b"\0" * ((align - len(head) % align) % align)
    rng = np.random.default_rng(SEED + 1)
    with open(path, "wb") as f:
        f.write(head)
        for name, s, enc in ts:
            t, be, bb = GGML[enc]
            n = int(np.prod(s))
            if enc == "f32":
                data = (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32).tobytes()
            else:
                data = blocks(rng, enc, n)
            f.write(data + b"\0" * ((align - len(data) % align) % align))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--fp8", action="store_true", help="also DIR/llama-fp8 (block-scaled fp8)")
    a = ap.parse_args()
    c = dict(hidden_size=2048, num_attention_heads=32, num_key_value_heads=4, intermediate_size=5632, vocab_size=32000,
             num_hidden_layers=a.layers)
    if a.small:
        c.update(hidden_size=256, num_attention_heads=8, num_key_value_heads=2, intermediate_size=512, vocab_size=1024,
                 num_hidden_layers=2)
    os.makedirs(a.out, exist_ok=True)
    write_hf(os.path.join(a.out, "llama-bf16"), c)
    write_gguf(os.path.join(a.out, "llama-q4k.gguf"), c)
    if a.fp8:
        write_hf_fp8(os.path.join(a.out, "llama-fp8"), c)


if __name__ == "__main__":
    main()
