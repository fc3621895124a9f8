#!/usr/bin/env python3
"""Writes the golden fixtures for libcommon/tensor/rad_enc.c and libcommon/format/rad_gguf.c into tests/fixtures/gguf/.

The oracle is the `gguf` Python package (llama.cpp's gguf-py) and numpy: run this with a Python
that has both (`pip install gguf numpy`); nothing here assumes a particular interpreter path.

    python3 scripts/gen-gguf-fixtures.py [--out tests/fixtures/gguf]
                                         [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
                                         [--corpus fuzz/corpus/fuzz_gguf]

Output (all little-endian, deterministic for a given gguf/numpy version: fixed seed):
  quant_<enc>.bin    random-but-valid encoded blocks (random code bytes; f16 scales drawn from a
                     sane range, so no inf/nan); 8 blocks of 32 elements, 4 of 256 for K-quants,
                     256 elements for the plain encodings (f16/bf16 include ±0, subnormals, ±inf
                     and a quiet NaN on purpose)
  quant_<enc>.f32    gguf.quants.dequantize of it as f32 (f64: numpy's astype(float32), since
                     gguf-py has no f64 dequantize)
  tiny.gguf          written by gguf.GGUFWriter: every metadata value type (nested arrays too),
                     alignment 64, one tensor per encoding above (its data is quant_<enc>.bin)
                     plus i8/i16/i32/i64 tensors and a rank-3 and a rank-4 tensor
  tiny.expect        what a reader must find in tiny.gguf (format below)
  --corpus DIR:      fuzz seeds: tiny.gguf and small variants (one tensor, v2, alignment 16,
                     tokenizer + chat template, metadata only)
  smollm2.slices     slices of real tensors of the default model, and smollm2_<n>.f32 with the
                     gguf package's dequantize of each (kept as they are when the model is absent)

tiny.expect, one record a line, fields separated by a single space (the last field may hold
spaces):
  version N | alignment N | data_offset N | n_tensors N
  kv KEY VALUE       every GGUF key/value, verbatim    (m->raw)
  meta KEY VALUE     the docs/KEYS.md mapping          (m->meta)
  tok KEY VALUE      (m->tok)          chat KEY VALUE  (m->chat)
  tensor NAME ENC D0xD1x.. OFFSET NBYTES   shape row-major (reverse of GGUF ne), offset from
                                           the data area
VALUE is typed at every level: u8:200  f32:1.5 (%.9g)  f64:... (%.17g)  bool:true
string:"..." (bytes outside 0x20..0x7e and " and \\ as \\xNN)  array:[u32:1,u32:2]
"""

import argparse
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V

SEED = 20240607
QK_K = 256

# enc name -> (ggml type, block elems, block bytes, [byte offsets of f16 scales], n_blocks)
QUANTS = {
    "q8_0": (T.Q8_0, 32, 34, [0], 8),
    "q4_0": (T.Q4_0, 32, 18, [0], 8),
    "q4_1": (T.Q4_1, 32, 20, [0, 2], 8),
    "q5_0": (T.Q5_0, 32, 22, [0], 8),
    "q5_1": (T.Q5_1, 32, 24, [0, 2], 8),
    "q4_k": (T.Q4_K, 256, 144, [0, 2], 4),
    "q5_k": (T.Q5_K, 256, 176, [0, 2], 4),
    "q6_k": (T.Q6_K, 256, 210, [208], 4),
}

F16_SPECIALS = [0x0000, 0x8000, 0x0001, 0x8001, 0x0200, 0x03FF, 0x0400, 0x3C00, 0xBC00,
                0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x3555, 0x0155]
BF16_SPECIALS = [0x0000, 0x8000, 0x0001, 0x007F, 0x0080, 0x3F80, 0xBF80, 0x7F7F, 0xFF7F,
                 0x7F80, 0xFF80, 0x7FC0]


def sane_f16(rng, n, lo, hi, signed):
    v = rng.uniform(lo, hi, n)
    if signed:
        v *= rng.choice([-1.0, 1.0], n)
    return v.astype(np.float16)


def make_quant(rng, name):
    qt, be, bb, scale_offs, nb = QUANTS[name]
    blocks = rng.integers(0, 256, (nb, bb), dtype=np.uint8)
    for k, off in enumerate(scale_offs):
        # d: a small positive scale (or signed for the symmetric formats); m/dmin: signed
        signed = k > 0 or name in ("q8_0", "q4_0", "q5_0", "q6_k")
        hi = 0.05 if name.endswith("_k") else 0.5
        vals = sane_f16(rng, nb, 1e-3, hi, signed)
        blocks[:, off:off + 2] = vals.view(np.uint8).reshape(nb, 2)
    data = blocks.reshape(-1)
    out = gguf.quants.dequantize(data, qt).astype("<f4")
    assert out.size == nb * be
    shape = (nb, be)  # rows of one block each
    return data, out, shape, qt


def make_plain(rng, name):
    if name == "f32":
        v = rng.standard_normal(256).astype("<f4")
        return v.view(np.uint8), v.copy(), (8, 32), T.F32, v
    if name == "f16":
        bits = rng.standard_normal(256).astype(np.float16).view(np.uint16).copy()
        bits[:len(F16_SPECIALS)] = F16_SPECIALS
        raw = bits.astype("<u2")
        out = gguf.quants.dequantize(raw.view(np.uint8), T.F16).astype("<f4")
        return raw.view(np.uint8), out, (8, 32), T.F16, raw.view(np.float16)
    if name == "bf16":
        bits = (rng.standard_normal(256).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        bits[:len(BF16_SPECIALS)] = BF16_SPECIALS
        raw = bits.astype("<u2")
        out = gguf.quants.dequantize(raw.view(np.uint8), T.BF16).astype("<f4")
        return raw.view(np.uint8), out, (8, 32), T.BF16, None
    if name == "f64":
        v = (rng.standard_normal(256) * 1e3).astype("<f8")
        v[:4] = [0.0, -0.0, 1e-300, 3.4028235e+38]  # underflows to 0; rounds to FLT_MAX
        out = v.astype("<f4")  # gguf-py has no f64 dequantize: numpy's rounding is the oracle
        return v.view(np.uint8), out, (8, 32), T.F64, v
    raise KeyError(name)


def esc(b):
    out = []
    for c in b:
        if 0x20 <= c <= 0x7E and c not in (0x22, 0x5C):
            out.append(chr(c))
        else:
            out.append("\\x%02x" % c)
    return '"' + "".join(out) + '"'


TYPE_NAMES = {V.UINT8: "u8", V.INT8: "i8", V.UINT16: "u16", V.INT16: "i16", V.UINT32: "u32",
              V.INT32: "i32", V.FLOAT32: "f32", V.BOOL: "bool", V.STRING: "string",
              V.ARRAY: "array", V.UINT64: "u64", V.INT64: "i64", V.FLOAT64: "f64"}


def render(vtype, val, sub=None):
    """One value as tiny.expect spells it (the C test renders RadValue the same way)."""
    t = TYPE_NAMES[vtype]
    if vtype == V.STRING:
        return t + ":" + esc(val.encode("utf-8") if isinstance(val, str) else bytes(val))
    if vtype == V.BOOL:
        return t + ":" + ("true" if val else "false")
    if vtype == V.FLOAT32:
        return t + ":" + "%.9g" % float(np.float32(val))
    if vtype == V.FLOAT64:
        return t + ":" + "%.17g" % float(val)
    if vtype == V.ARRAY:
        et = sub if sub is not None else V.get_type(val[0])
        return t + ":[" + ",".join(render(et, x) for x in val) + "]"
    return t + ":" + str(int(val))


def write_tiny(out_dir, blobs):
    path = os.path.join(out_dir, "tiny.gguf")
    w = gguf.GGUFWriter(path, arch="llama")
    kvs = []  # (key, vtype, value, sub_type) in file order

    def add(key, vtype, val, sub=None):
        w.add_key_value(key, val, vtype, sub)
        kvs.append((key, vtype, val, sub))

    # GGUFWriter adds general.architecture itself, first
    kvs.append(("general.architecture", V.STRING, "llama", None))
    add("general.name", V.STRING, "tiny fixture")
    add("general.file_type", V.UINT32, 15)  # MOSTLY_Q4_K_M
    w.add_custom_alignment(64)
    kvs.append(("general.alignment", V.UINT32, 64, None))
    add("llama.block_count", V.UINT32, 2)
    add("llama.context_length", V.UINT32, 128)
    add("llama.embedding_length", V.UINT32, 64)
    add("llama.feed_forward_length", V.UINT32, 256)
    add("llama.attention.head_count", V.UINT32, 4)
    add("llama.attention.head_count_kv", V.UINT32, 2)
    add("llama.attention.layer_norm_rms_epsilon", V.FLOAT32, 1e-5)
    add("llama.rope.freq_base", V.FLOAT32, 500000.0)
    add("llama.rope.dimension_count", V.UINT32, 16)
    add("llama.rope.scaling.type", V.STRING, "linear")
    add("llama.rope.scaling.factor", V.FLOAT32, 2.0)
    # one of every value type
    add("test.u8", V.UINT8, 200)
    add("test.i8", V.INT8, -100)
    add("test.u16", V.UINT16, 60000)
    add("test.i16", V.INT16, -30000)
    add("test.u32", V.UINT32, 4000000000)
    add("test.i32", V.INT32, -2000000000)
    add("test.f32", V.FLOAT32, 1.5)
    add("test.bool", V.BOOL, True)
    add("test.string", V.STRING, "h\u00e9llo \u2603 \"q\" \\")
    add("test.empty_string", V.STRING, "")
    add("test.u64", V.UINT64, 2**63 + 5)
    add("test.i64", V.INT64, -(2**62) - 7)
    add("test.f64", V.FLOAT64, 3.141592653589793)
    add("test.arr_u8", V.ARRAY, [1, 2, 255], V.UINT8)
    add("test.arr_i16", V.ARRAY, [-1, 2, -32768], V.INT16)
    add("test.arr_u64", V.ARRAY, [0, 2**64 - 1], V.UINT64)
    add("test.arr_i64", V.ARRAY, [-(2**63), 2**63 - 1], V.INT64)
    add("test.arr_f32", V.ARRAY, [0.5, -1.25, 3.0e-8], V.FLOAT32)
    add("test.arr_f64", V.ARRAY, [0.1, -2.5e300], V.FLOAT64)
    add("test.arr_bool", V.ARRAY, [True, False, True], V.BOOL)
    add("test.arr_str", V.ARRAY, ["a", "bc", "", "\u00fc"], V.STRING)
    add("test.arr_arr", V.ARRAY, [[1, 2], [3, 4, 5]])
    add("test.arr_arr_str", V.ARRAY, [["x"], ["y", "z"]])
    add("test.arr_arr_arr", V.ARRAY, [[[7]], [[8, 9], [10]]])
    # tokenizer and chat
    tokens = ["<unk>", "<s>", "</s>", "a", "b", "ab", "<|im_start|>", "<|im_end|>"]
    add("tokenizer.ggml.model", V.STRING, "gpt2")
    add("tokenizer.ggml.pre", V.STRING, "default")
    add("tokenizer.ggml.tokens", V.ARRAY, tokens, V.STRING)
    add("tokenizer.ggml.scores", V.ARRAY, [0.0, 0.0, 0.0, -1.0, -2.0, -3.0, 0.0, 0.0], V.FLOAT32)
    add("tokenizer.ggml.token_type", V.ARRAY, [2, 3, 3, 1, 1, 1, 3, 3], V.INT32)
    add("tokenizer.ggml.merges", V.ARRAY, ["a b"], V.STRING)
    add("tokenizer.ggml.bos_token_id", V.UINT32, 1)
    add("tokenizer.ggml.eos_token_id", V.UINT32, 7)
    add("tokenizer.ggml.unknown_token_id", V.UINT32, 0)
    add("tokenizer.ggml.padding_token_id", V.UINT32, 2)
    add("tokenizer.ggml.eot_token_id", V.UINT32, 7)
    add("tokenizer.ggml.add_bos_token", V.BOOL, True)
    add("tokenizer.ggml.add_eos_token", V.BOOL, False)
    add("tokenizer.ggml.add_space_prefix", V.BOOL, False)
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                "<|im_end|>\n{% endfor %}")
    add("tokenizer.chat_template", V.STRING, template)

    tensors = []  # (name, ggml type, row-major shape, bytes)
    for enc, (raw, shape, qt) in blobs.items():
        tensors.append(("t." + enc, qt, shape, raw))
    rng = np.random.default_rng(SEED + 1)
    extra = [
        ("t.i8", T.I8, (2, 3, 4, 5), rng.integers(-128, 128, (2, 3, 4, 5)).astype(np.int8)),
        ("t.i16", T.I16, (16,), rng.integers(-32768, 32768, 16).astype("<i2")),
        ("t.i32", T.I32, (3, 5), rng.integers(-2**31, 2**31, (3, 5)).astype("<i4")),
        ("t.i64", T.I64, (4,), np.array([-2**63, -1, 0, 2**53 + 1], dtype="<i8")),
        ("t.f32_3d", T.F32, (2, 4, 32), rng.standard_normal((2, 4, 32)).astype("<f4")),
    ]
    for name, qt, shape, arr in extra:
        tensors.append((name, qt, shape, arr))

    for name, qt, shape, data in tensors:
        if data.dtype == np.uint8:
            # a uint8 array with raw_dtype: its shape is in bytes, rows of the real shape
            w.add_tensor(name, data.reshape(tuple(shape[:-1]) + (-1,)), raw_dtype=qt)
        else:
            w.add_tensor(name, data.reshape(shape))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # what a reader must find
    r = gguf.GGUFReader(path)
    lines = ["version 3", "alignment 64", "data_offset %d" % r.data_offset,
             "n_tensors %d" % len(tensors)]
    keys = [k for k, *_ in kvs]
    assert keys == [k for k in r.fields if not k.startswith("GGUF.")], "key order differs"
    for key, vt, val, sub in kvs:
        lines.append("kv %s %s" % (key, render(vt, val, sub)))

    # docs/KEYS.md mapping, spelled out for this file
    meta = [
        ("model.arch_id", render(V.STRING, "llama")),
        ("model.name", render(V.STRING, "tiny fixture")),
        ("model.quant", render(V.STRING, "q4_k_m")),
        ("model.n_layers", render(V.UINT32, 2)),
        ("model.n_embd", render(V.UINT32, 64)),
        ("model.n_head", render(V.UINT32, 4)),
        ("model.n_head_kv", render(V.UINT32, 2)),
        ("model.head_dim", render(V.UINT32, 16)),
        ("model.n_ff", render(V.UINT32, 256)),
        ("model.n_vocab", render(V.UINT32, len(tokens))),
        ("model.n_ctx_train", render(V.UINT32, 128)),
        ("model.n_expert", render(V.UINT32, 0)),
        ("model.n_expert_used", render(V.UINT32, 0)),
        ("model.rms_eps", render(V.FLOAT32, 1e-5)),
        ("model.rope_theta", render(V.FLOAT32, 500000.0)),
        ("model.tie_embeddings", render(V.BOOL, True)),
        ("rope.dimension_count", render(V.UINT32, 16)),
        ("rope.scaling.type", render(V.STRING, "linear")),
        ("rope.scaling.factor", render(V.FLOAT32, 2.0)),
    ]
    tok = [
        ("tokenizer.model", render(V.STRING, "gpt2")),
        ("tokenizer.pre", render(V.STRING, "default")),
        ("tokenizer.tokens", render(V.ARRAY, tokens, V.STRING)),
        ("tokenizer.scores", render(V.ARRAY, [0.0, 0.0, 0.0, -1.0, -2.0, -3.0, 0.0, 0.0], V.FLOAT32)),
        ("tokenizer.token_type", render(V.ARRAY, [2, 3, 3, 1, 1, 1, 3, 3], V.INT32)),
        ("tokenizer.merges", render(V.ARRAY, ["a b"], V.STRING)),
        ("tokenizer.bos_id", render(V.INT32, 1)),
        ("tokenizer.eos_id", render(V.INT32, 7)),
        ("tokenizer.unk_id", render(V.INT32, 0)),
        ("tokenizer.pad_id", render(V.INT32, 2)),
        ("tokenizer.eot_id", render(V.INT32, 7)),
        ("tokenizer.add_bos", render(V.BOOL, True)),
        ("tokenizer.add_eos", render(V.BOOL, False)),
        ("tokenizer.add_space_prefix", render(V.BOOL, False)),
    ]
    chat = [
        ("chat.template", render(V.STRING, template)),
        ("chat.kind", render(V.STRING, "chatml")),
        ("chat.bos", render(V.STRING, "<s>")),
        ("chat.eos", render(V.STRING, "<|im_end|>")),
    ]
    lines += ["meta %s %s" % kv for kv in meta]
    lines += ["tok %s %s" % kv for kv in tok]
    lines += ["chat %s %s" % kv for kv in chat]
    by_name = {t.name: t for t in r.tensors}
    for name, qt, shape, data in tensors:
        t = by_name[name]
        assert int(t.tensor_type) == int(qt)
        assert list(reversed([int(x) for x in t.shape])) == list(shape), (name, t.shape, shape)
        lines.append("tensor %s %s %s %d %d" % (name, qt.name.lower(), "x".join(map(str, shape)),
                                                t.data_offset - r.data_offset, t.n_bytes))
    with open(os.path.join(out_dir, "tiny.expect"), "w") as f:
        f.write("\n".join(lines) + "\n")


def write_model_slices(out_dir, model):
    if not os.path.exists(model):
        print("note: %s absent; smollm2.slices kept as it is" % model, file=sys.stderr)
        return
    r = gguf.GGUFReader(model)
    by_name = {t.name: t for t in r.tensors}
    # (tensor, row, first column, count): whole blocks of a real row, away from the edges
    picks = [("blk.0.ffn_down.weight", 100, 768, 256),
             ("blk.29.attn_q.weight", 575, 0, 96),
             ("token_embd.weight", 1234, 64, 128)]
    lines = []
    for i, (name, row, col, count) in enumerate(picks):
        t = by_name[name]
        ne0 = int(t.shape[0])  # GGUF ne[0]: the row length
        rows = np.asarray(t.data).reshape(-1, np.asarray(t.data).shape[-1])
        deq = gguf.quants.dequantize(rows[row:row + 1], t.tensor_type).reshape(-1)
        assert deq.size == ne0
        vals = deq[col:col + count].astype("<f4")
        fname = "smollm2_%d.f32" % i
        vals.tofile(os.path.join(out_dir, fname))
        lines.append("slice %s %s %d %d %s" % (name, t.tensor_type.name.lower(),
                                               row * ne0 + col, count, fname))
    with open(os.path.join(out_dir, "smollm2.slices"), "w") as f:
        f.write("\n".join(lines) + "\n")


def write_small(path, alignment=None, tensors=(), kvs=(), version=3):
    w = gguf.GGUFWriter(path, arch="llama")
    if alignment:
        w.add_custom_alignment(alignment)
    for key, vt, val, sub in kvs:
        w.add_key_value(key, val, vt, sub)
    for name, arr, qt in tensors:
        if qt is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if version != 3:
        with open(path, "r+b") as f:
            f.seek(4)
            f.write(np.array([version], dtype="<u4").tobytes())


def write_corpus(corpus, out_dir):
    os.makedirs(corpus, exist_ok=True)
    rng = np.random.default_rng(SEED + 2)
    with open(os.path.join(out_dir, "tiny.gguf"), "rb") as f:
        tiny = f.read()
    with open(os.path.join(corpus, "tiny.gguf"), "wb") as f:
        f.write(tiny)
    f32 = rng.standard_normal((2, 8)).astype("<f4")
    q8 = np.fromfile(os.path.join(out_dir, "quant_q8_0.bin"), dtype=np.uint8).reshape(8, 34)[:2]
    q4k = np.fromfile(os.path.join(out_dir, "quant_q4_k.bin"), dtype=np.uint8).reshape(4, 144)[:1]
    write_small(os.path.join(corpus, "one_tensor.gguf"), tensors=[("w", f32, None)])
    write_small(os.path.join(corpus, "v2.gguf"), tensors=[("w", f32, None)], version=2)
    write_small(os.path.join(corpus, "align16.gguf"), alignment=16,
                tensors=[("a", q8, T.Q8_0), ("b", q4k, T.Q4_K), ("c", f32[:1, :3].copy(), None)])
    write_small(os.path.join(corpus, "tokenizer.gguf"), kvs=[
        ("llama.block_count", V.UINT32, 1, None),
        ("llama.attention.head_count", V.UINT32, 2, None),
        ("tokenizer.ggml.model", V.STRING, "llama", None),
        ("tokenizer.ggml.tokens", V.ARRAY, ["<s>", "</s>", "x"], V.STRING),
        ("tokenizer.ggml.token_type", V.ARRAY, [3, 3, 1], V.INT32),
        ("tokenizer.ggml.bos_token_id", V.UINT32, 0, None),
        ("tokenizer.ggml.eos_token_id", V.UINT32, 1, None),
        ("tokenizer.chat_template", V.STRING, "[INST] {{ m }} [/INST]", None),
        ("x.nested", V.ARRAY, [[[1, 2]], [[3]]], None),
    ])
    write_small(os.path.join(corpus, "meta_only.gguf"), kvs=[("general.name", V.STRING, "m", None)])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/gguf")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--corpus", default="fuzz/corpus/fuzz_gguf")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(SEED)
    blobs = {}
    for name in ["f32", "f16", "bf16", "f64"]:
        raw, out, shape, qt, _ = make_plain(rng, name)
        raw.tofile(os.path.join(a.out, "quant_%s.bin" % name))
        out.tofile(os.path.join(a.out, "quant_%s.f32" % name))
        blobs[name] = (raw, shape, qt)
    for name in QUANTS:
        raw, out, shape, qt = make_quant(rng, name)
        raw.tofile(os.path.join(a.out, "quant_%s.bin" % name))
        out.tofile(os.path.join(a.out, "quant_%s.f32" % name))
        blobs[name] = (raw, shape, qt)
    write_tiny(a.out, blobs)
    write_model_slices(a.out, a.model)
    if a.corpus:
        write_corpus(a.corpus, a.out)


if __name__ == "__main__":
    main()
