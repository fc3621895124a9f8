#!/usr/bin/env python3
"""Writes the golden fixtures for libcommon/tensor/rad_encode.c and libcommon/tensor/rad_xform.c into
tests/fixtures/encode/.

The oracles are numpy and the `gguf` Python package (llama.cpp's gguf-py); run this with a
Python that has both (`pip install gguf numpy`):

    python3 scripts/gen-encode-fixtures.py [--out tests/fixtures/encode]

Deterministic for a given numpy/gguf version (fixed seed). Every file is raw little-endian data,
no header; the shapes are fixed here and repeated in tests/tensor/encode_test.c / tests/tensor/xform_test.c.

Encoding (tests/tensor/encode_test.c):
  values.f32        N f32 values: hand-picked hard cases for f16 and bf16 (ties at every
                    rounding position, the f16 subnormal range and its edges, the overflow edge
                    65504..65520, huge, f32 subnormals, ±0, ±inf, NaNs with payloads), then
                    random bit patterns and random normals
  values.f16        numpy's values.astype(np.float16), as u16
  values.bf16       round-to-nearest-even to bfloat16 computed from the definition (nearest of
                    the two neighbouring bf16 values in float64, ties to the even one; NaN ->
                    0x7fc0 | sign), as torch.Tensor.to(torch.bfloat16) / ml_dtypes do; when
                    ml_dtypes is importable it is checked against it too
  q8_0.f32          Q8_BLOCKS x 32 f32: special blocks (exact .5 ties, zeros, NaN, ±inf, tiny
                    amax whose 1/d overflows, amax giving an f16-subnormal d, amax past f16's
                    range) then random blocks at scales 1e-6 .. 1e4
  q8_0.bin          gguf.quants.quantize(q8_0.f32.reshape(-1, 32), Q8_0)

Transforms (tests/tensor/xform_test.c):
  rope_hf.f32       [ROPE_HEADS*ROPE_D, ROPE_COLS] Hugging Face q rows (random)
  rope_gguf.f32     llama.cpp's convert_hf_to_gguf permute of it (rope pairs interleaved)
  rope_gguf.q4_1    gguf's Q4_1 quantize of rope_gguf.f32 ([ROPE_Q_ROWS, ROPE_Q_COLS] below)
  rope_q4_1_hf.f32  the dequantised q4_1 rows, un-permuted: what rows+ROPE_UNINTERLEAVE then
                    dequant must give
  wnorm_g.f32 [6,1,1], wnorm_v.f32 [6,4,3], wnorm_w.f32: v * (g / ||v||) per row (float64,
                    rounded once; the test allows a few ulp)
  ema_sum.f32 [8,5], ema_usage.f32 [8], ema_out.f32: sum / np.maximum(usage, 1e-5)[:, None],
                    float32 throughout (bit-exact)
  tr_q8_0.bin [4,64] q8_0, tr_q8_0_t.f32 [64,4]: gguf dequantize of it, transposed
  cat_a.f16 [3,4], cat_b.f32 [2,4], cat_ab.f32 [5,4]: concatenate(a.astype(f32), b)

The rope un-interleave formula of abi/rad_arch.h (out[h*d + k*(d/2) + j] = in[h*d + 2*j + k])
and numpy's reshape(heads, d/2, 2).swapaxes(1, 2) of the GGUF rows are both checked here to
invert llama.cpp's permute before anything is written.
"""

import argparse
import os
import struct

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

SEED = 20250117
ROPE_HEADS, ROPE_D, ROPE_COLS = 3, 8, 5
ROPE_Q_HEADS, ROPE_Q_D, ROPE_Q_COLS = 4, 8, 64  # the q4_1 case: [32, 64]


def u32_to_f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def f32_from(vals):
    return np.asarray(vals, dtype=np.float64).astype(np.float32)


# --- values for f16 / bf16 ------------------------------------------------------------------

def hard_values():
    v = []
    # f16 ties: values exactly halfway between two f16 values, at several exponents, both
    # parities of the lower neighbour, both signs
    for e in (-14, -3, 0, 1, 7, 15):
        for m in (0, 1, 2, 3, 511, 512, 1022, 1023):
            lo = (1 + m / 1024) * 2.0 ** e
            half = 2.0 ** e / 2048
            for x in (lo + half, lo + half * (1 + 2 ** -10), lo + half * (1 - 2 ** -10)):
                v += [x, -x]
    # f16 subnormals and their edges: k * 2^-24, ties between them, 2^-25 (ties to 0), just above
    for k in (0.5, 0.75, 1, 1.5, 2.5, 3.5, 1023, 1023.5, 1024):
        v += [k * 2.0 ** -24, -k * 2.0 ** -24]
    v += [2.0 ** -25 * (1 + 2 ** -23), 2.0 ** -26, 2.0 ** -14 * (1 - 2 ** -12), 6.1e-5, 6.2e-5]
    # the overflow edge
    v += [65504, 65505, 65519, 65519.99, 65520, 65521, 65536, 1e5, 3.0e38, 1e30, -65520, -65519]
    # f32 extremes
    v += [float(np.finfo(np.float32).max), float(np.finfo(np.float32).tiny), 1e-45, 1e-40, -1e-40]
    # bf16 ties and overflow: 1 + k/256 ± half ulp
    for e in (-126, -20, 0, 5, 127):
        for m in (0, 1, 126, 127):
            lo = (1 + m / 128) * 2.0 ** e
            half = 2.0 ** e / 256
            if lo + 2 * half >= 2.0 ** 128:
                continue
            v += [lo + half, -(lo + half)]
    v += [0.0, -0.0, 1.0, -1.0, 0.1, 1 / 3, float("inf"), float("-inf")]
    a = f32_from(v)
    # bit patterns: ±0 exact, NaNs with and without payload, signalling, the bf16 max edge,
    # f32 subnormals
    bits = [0x80000000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FA00000, 0xFF812345, 0x7F802001,
            0x7FFFFFFF, 0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0xFF7F8000, 0x00000001, 0x00400000,
            0x807FFFFF, 0x3F808000, 0x3F818000, 0x3F808001, 0x3F817FFF, 0x387FE000, 0x387FF000,
            0x33000000, 0x33000001, 0x337FFFFF, 0x477FE000, 0x477FEFFF, 0x477FF000]
    return np.concatenate([a, u32_to_f32(bits)])


def bf16_rne(x):
    """float32 -> bfloat16 bits by the definition: the nearer neighbour, ties to even."""
    bits = x.view(np.uint32).astype(np.uint64)
    out = np.empty(x.shape, dtype=np.uint16)
    for i, (b, f) in enumerate(zip(bits, x)):
        b = int(b)
        sign = b & 0x80000000
        if np.isnan(f):
            out[i] = (sign >> 16) | 0x7FC0
            continue
        mag = b & 0x7FFFFFFF
        lo = mag & 0xFFFF0000
        hi = lo + 0x10000

        def val(m):
            if m >= 0x7F800000:
                return 2.0 ** 128  # the first value past the largest finite: rounding's target
            return float(np.uint32(m).view(np.float32))

        xv = float(np.uint32(mag).view(np.float32)) if mag < 0x7F800000 else float("inf")
        if mag >= 0x7F800000 or mag == lo:
            r = mag >> 16
        else:
            dlo, dhi = xv - val(lo), val(hi) - xv
            if dlo < dhi or (dlo == dhi and ((lo >> 16) & 1) == 0):
                r = lo >> 16
            else:
                r = hi >> 16
        out[i] = (sign >> 16) | r
    return out


# --- q8_0 blocks ----------------------------------------------------------------------------

def q8_special_blocks(rng):
    blocks = []
    b = np.zeros(32)
    b[0] = 127
    b[1:12] = [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5, -126.5, 3.49999, 63.5, -0.49]
    blocks.append(b)
    b = rng.integers(-254, 255, 32) + 0.0
    b[0] = 254  # d = 2: odd integers sit on .5 ties
    blocks.append(b)
    blocks.append(np.zeros(32))
    for special in (np.nan, np.inf, -np.inf):
        b = rng.standard_normal(32)
        b[5] = special
        blocks.append(b)
    for scale in (1e-38, 1e-37, 1e-36, 3e-6, 1e-5, 1e7, 1e37):
        blocks.append(rng.standard_normal(32) * scale)
    b = np.zeros(32)
    b[7] = -3.0  # a single non-zero, negative amax
    blocks.append(b)
    b = rng.standard_normal(32)
    b[::2] = -0.0
    blocks.append(b)
    return [f32_from(b) for b in blocks]


def q8_random_blocks(rng, n):
    out = []
    for i in range(n):
        scale = 10.0 ** rng.uniform(-6, 4)
        out.append(f32_from(rng.standard_normal(32) * scale))
    return out


# --- llama.cpp's permute (convert_hf_to_gguf.py, LlamaModel.permute) ---------------------------

def llama_permute(weights, n_head):
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2)
            .reshape(weights.shape))


def rope_uninterleave_np(w, heads):
    d = w.shape[0] // heads
    return w.reshape(heads, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def rope_uninterleave_formula(w, heads):
    d = w.shape[0] // heads
    out = np.empty_like(w)
    for h in range(heads):
        for k in range(2):
            for j in range(d // 2):
                out[h * d + k * (d // 2) + j] = w[h * d + 2 * j + k]
    return out


def write(out, name, arr):
    path = os.path.join(out, name)
    with open(path, "wb") as f:
        f.write(np.ascontiguousarray(arr).tobytes())
    return os.path.getsize(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/encode")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(SEED)
    sizes = {}

    # f16 / bf16
    vals = np.concatenate([
        hard_values(),
        rng.integers(0, 2 ** 32, 512, dtype=np.uint64).astype(np.uint32).view(np.float32),
        f32_from(rng.standard_normal(256) * 10.0 ** rng.uniform(-9, 6, 256)),
    ])
    with np.errstate(all="ignore"):
        f16 = vals.astype(np.float16).view(np.uint16)
    bf16 = bf16_rne(vals)
    try:
        import ml_dtypes  # optional cross-check
        got = vals.astype(ml_dtypes.bfloat16).view(np.uint16)
        nan = np.isnan(vals)
        assert (got[~nan] == bf16[~nan]).all(), "bf16 oracle disagrees with ml_dtypes"
    except ImportError:
        pass
    sizes["values.f32"] = write(args.out, "values.f32", vals)
    sizes["values.f16"] = write(args.out, "values.f16", f16)
    sizes["values.bf16"] = write(args.out, "values.bf16", bf16)

    # q8_0
    blocks = q8_special_blocks(rng)
    blocks += q8_random_blocks(rng, 64 - len(blocks))
    q_in = np.stack(blocks).astype(np.float32)
    with np.errstate(all="ignore"):
        q_out = gguf.quants.quantize(q_in, T.Q8_0)
    assert q_out.shape == (q_in.shape[0], 34), q_out.shape
    sizes["q8_0.f32"] = write(args.out, "q8_0.f32", q_in)
    sizes["q8_0.bin"] = write(args.out, "q8_0.bin", q_out)

    # rope
    hf = f32_from(rng.standard_normal((ROPE_HEADS * ROPE_D, ROPE_COLS)))
    gg = llama_permute(hf, ROPE_HEADS)
    assert not np.array_equal(gg, hf)
    assert np.array_equal(rope_uninterleave_np(gg, ROPE_HEADS), hf)
    assert np.array_equal(rope_uninterleave_formula(gg, ROPE_HEADS), hf)
    sizes["rope_hf.f32"] = write(args.out, "rope_hf.f32", hf)
    sizes["rope_gguf.f32"] = write(args.out, "rope_gguf.f32", gg)
    hfq = f32_from(rng.standard_normal((ROPE_Q_HEADS * ROPE_Q_D, ROPE_Q_COLS)))
    ggq = llama_permute(hfq, ROPE_Q_HEADS)
    q41 = gguf.quants.quantize(ggq, T.Q4_1)
    deq = gguf.quants.dequantize(q41, T.Q4_1)
    assert deq.shape == ggq.shape
    sizes["rope_gguf.q4_1"] = write(args.out, "rope_gguf.q4_1", q41)
    sizes["rope_q4_1_hf.f32"] = write(args.out, "rope_q4_1_hf.f32",
                                      rope_uninterleave_np(deq, ROPE_Q_HEADS).astype(np.float32))

    # wnorm (torch.nn.utils.weight_norm, dim=0: w = v * (g / ||v||) over all dims but 0)
    v = f32_from(rng.standard_normal((6, 4, 3)))
    g = f32_from(rng.uniform(0.5, 2.0, (6, 1, 1)))
    norm = np.sqrt((v.astype(np.float64) ** 2).sum(axis=(1, 2), keepdims=True))
    w = (v.astype(np.float64) * (g.astype(np.float64) / norm)).astype(np.float32)
    sizes["wnorm_g.f32"] = write(args.out, "wnorm_g.f32", g)
    sizes["wnorm_v.f32"] = write(args.out, "wnorm_v.f32", v)
    sizes["wnorm_w.f32"] = write(args.out, "wnorm_w.f32", w)

    # ema (EnCodec EuclideanCodebook: embed = embed_sum / cluster_usage.clamp(min=eps)[:, None])
    s = f32_from(rng.standard_normal((8, 5)) * 3)
    u = f32_from(rng.uniform(0.0, 4.0, 8))
    u[1], u[4], u[6] = 0.0, 1e-7, 1e-5
    eps = np.float32(1e-5)
    ema = s / np.maximum(u, eps)[:, None]
    assert ema.dtype == np.float32
    sizes["ema_sum.f32"] = write(args.out, "ema_sum.f32", s)
    sizes["ema_usage.f32"] = write(args.out, "ema_usage.f32", u)
    sizes["ema_out.f32"] = write(args.out, "ema_out.f32", ema)

    # transpose of a block encoding: dequantised, transposed
    tq = gguf.quants.quantize(f32_from(rng.standard_normal((4, 64))), T.Q8_0)
    sizes["tr_q8_0.bin"] = write(args.out, "tr_q8_0.bin", tq)
    sizes["tr_q8_0_t.f32"] = write(args.out, "tr_q8_0_t.f32",
                                   np.ascontiguousarray(gguf.quants.dequantize(tq, T.Q8_0).T))

    # concat of mixed encodings
    a = rng.standard_normal((3, 4)).astype(np.float16)
    b = f32_from(rng.standard_normal((2, 4)))
    sizes["cat_a.f16"] = write(args.out, "cat_a.f16", a)
    sizes["cat_b.f32"] = write(args.out, "cat_b.f32", b)
    sizes["cat_ab.f32"] = write(args.out, "cat_ab.f32",
                                np.concatenate([a.astype(np.float32), b], axis=0))

    total = sum(sizes.values())
    for k, n in sizes.items():
        print(f"{args.out}/{k}: {n} bytes")
    print(f"total {total} bytes; {len(vals)} values, {q_in.shape[0]} q8_0 blocks")


if __name__ == "__main__":
    main()
