#!/usr/bin/env python3
"""Writes a larger random-weight Llama as a GGUF, for benchmarks at another shape than the default
model's (bench/tune.sh). Not a test fixture: its weights are random, its text is noise; what
matters is the shapes and the encodings, which are the ones real Llama GGUFs use.

    python3 bench/make-llama-gguf.py [--src models/SmolLM2-135M-Instruct.Q4_1.gguf]
                                     [--out build/llama-big.gguf] [--layers 8] [--quant q4_1]

Needs the `gguf` package and numpy (llama.cpp's gguf-py; pip install gguf numpy, in a venv
outside the repository). The tokenizer, chat template and vocabulary (49152) are copied from
--src; the shape is TinyLlama-1.1B's per layer (d 2048, 32 heads of 64, 4 KV heads, FFN 5632) over
--layers layers; layer matrices in --quant (q4_1, q4_0 or q8_0), the embedding (tied as the head)
in q8_0, norms in f32. Seeded: the same arguments write the same bytes.
"""

import argparse

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

QUANT = {"q4_1": T.Q4_1, "q4_0": T.Q4_0, "q8_0": T.Q8_0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--out", default="build/llama-big.gguf")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--quant", default="q4_1", choices=sorted(QUANT))
    a = ap.parse_args()
    d, n_head, n_kv, hd, ff = 2048, 32, 4, 64, 5632
    src = gguf.GGUFReader(a.src)
    w = gguf.GGUFWriter(a.out, "llama")
    # the tokenizer and chat template, as the source has them
    for f in src.fields.values():
        if not f.name.startswith("tokenizer."):
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            et = f.types[1]
            if et == gguf.GGUFValueType.STRING:
                vals = [bytes(f.parts[i]).decode("utf-8", "surrogateescape") for i in f.data]
            else:
                vals = [f.parts[i].tolist()[0] for i in f.data]
            w.add_key_value(f.name, vals, vt, sub_type=et)
        elif vt == gguf.GGUFValueType.STRING:
            w.add_key_value(f.name, bytes(f.parts[f.data[0]]).decode("utf-8"), vt)
        else:
            w.add_key_value(f.name, f.parts[f.data[0]].tolist()[0], vt)
    n_vocab = len(src.fields["tokenizer.ggml.tokens"].data)
    w.add_name(f"random-llama-{a.layers}x{d}")
    w.add_context_length(2048)
    w.add_embedding_length(d)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(int({"q4_1": 3, "q4_0": 2, "q8_0": 7}[a.quant]))
    rng = np.random.default_rng(20261202)

    def mat(name, rows, cols, qt, scale=0.02):
        x = (rng.standard_normal((rows, cols), dtype=np.float32) * scale).astype(np.float32)
        q = gguf.quants.quantize(x, qt)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qt)

    def vec(name, n):
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32))

    mat("token_embd.weight", n_vocab, d, T.Q8_0, 0.05)
    vec("output_norm.weight", d)
    qt = QUANT[a.quant]
    for l in range(a.layers):
        p = f"blk.{l}."
        vec(p + "attn_norm.weight", d)
        mat(p + "attn_q.weight", n_head * hd, d, qt)
        mat(p + "attn_k.weight", n_kv * hd, d, qt)
        mat(p + "attn_v.weight", n_kv * hd, d, qt)
        mat(p + "attn_output.weight", d, n_head * hd, qt)
        vec(p + "ffn_norm.weight", d)
        mat(p + "ffn_gate.weight", ff, d, qt)
        mat(p + "ffn_up.weight", ff, d, qt)
        mat(p + "ffn_down.weight", d, ff, qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{a.out}: {a.layers} layers, d {d}, FFN {ff}, vocab {n_vocab}, {a.quant}")


if __name__ == "__main__":
    main()
