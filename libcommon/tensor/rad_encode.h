/* rad_encode.h — encoding f32 values into a target encoding, and re-encoding a tensor from one
 * encoding to another: the data side of `rad-convert --quant keep|f32|bf16|f16|q8_0`.
 *
 * Targets: f32, f16, bf16 and q8_0. Each is bit-identical to a named oracle:
 *   f16   numpy's astype(np.float16): round to nearest even, overflow to ±inf, f16 subnormals,
 *         ±0 kept; a NaN keeps its sign and the top 10 bits of its payload (a payload that
 *         would vanish becomes 1), exactly as numpy's npy_floatbits_to_halfbits does.
 *   bf16  torch's .to(torch.bfloat16) (c10::BFloat16 round_to_nearest_even): round to nearest
 *         even, overflow to ±inf, ±0 kept; a NaN becomes the quiet NaN 0x7fc0 with its sign
 *         kept (0xffc0 when negative), as Eigen/ml_dtypes do (torch's scalar path writes
 *         0x7fc0 for either sign; NaN stays NaN either way).
 *   q8_0  gguf.quants.quantize(x, GGMLQuantizationType.Q8_0) of the gguf Python package,
 *         which matches GGML's quantize_row_q8_0_ref: per 32-element block, amax = max|x| in
 *         f32 (a NaN anywhere makes it NaN, as numpy's max), d = amax / 127 in f32,
 *         id = d == 0 ? 0 : 1 / d in f32, q = round-half-away-from-zero(x * id) stored as
 *         int8 the way numpy's float32 -> int8 cast does on x86-64 (truncate to int32, keep the
 *         low byte; NaN, ±inf and values outside int32 give 0), and d is stored as f16 (above).
 *   f32   a copy.
 * Integer, fp8, f64 and the other GGML block encodings are sources only (rad_dequant decodes
 * them); asking to encode into one is RAD_E_UNSUPPORTED.
 *
 * Buffers may have any alignment except `src` (a float array); multi-byte values are written
 * little-endian. Every failure is one line naming the encoding and the count at fault. */
#ifndef RAD_ENCODE_H
#define RAD_ENCODE_H

#include <stdint.h>

#include "abi/rad_types.h"
#include "libcommon/base/rad_err.h"

/* One value, as the oracles above. */
uint16_t rad_f32_to_f16(float f);
uint16_t rad_f32_to_bf16(float f);

/* True when rad_encode can produce enc. */
int rad_encode_supported(RadEnc enc);

/* Plans the output of encoding a tensor of `shape` (row-major, rank 0..RAD_MAX_RANK) into dst:
 * *out_bytes gets its byte size. Fails with
 *   RAD_E_UNSUPPORTED  dst is not an encode target;
 *   RAD_E_SHAPE        dst is a block encoding and the innermost dim is not a multiple of its
 *                      block ("q8_0: tensor 'x': innermost dim 100 is not a multiple of the
 *                      32-element block"), or a scalar is asked to be a block encoding;
 *   RAD_E_ARG          rank above RAD_MAX_RANK, or the element/byte count overflows 64 bits.
 * name (for the message) may be NULL. */
int rad_encode_plan(RadEnc dst, uint32_t rank, const uint64_t *shape, const char *name,
                    uint64_t *out_bytes, RadErr *e);

/* Encodes src[n_elems] into out as dst. out_bytes must be exactly the bytes n_elems elements
 * of dst occupy. Fails with RAD_E_UNSUPPORTED (dst not a target), RAD_E_SHAPE (n_elems not a
 * whole number of dst's blocks), RAD_E_ARG (out_bytes wrong, or a NULL buffer with
 * n_elems > 0). */
int rad_encode(RadEnc dst, const float *src, uint64_t n_elems, void *out, uint64_t out_bytes,
               RadErr *e);

/* Re-encodes n_elems elements from src (in, in_bytes bytes) to dst (out, out_bytes bytes).
 * dst == src is a byte copy, for any encoding. Otherwise the elements are decoded with
 * rad_dequant and encoded with rad_encode, a chunk at a time (constant extra memory), so the
 * result equals rad_encode(dst, dequant(in)) bit for bit. Fails as rad_dequant and rad_encode
 * do: RAD_E_SHAPE when n_elems is not a whole number of src's or dst's blocks, RAD_E_ARG when
 * in_bytes or out_bytes is not exactly the size of n_elems elements, RAD_E_UNSUPPORTED for a
 * dst that is not a target, RAD_E_NOMEM. The innermost-dim check needs the shape: call
 * rad_encode_plan first. */
int rad_convert_tensor(RadEnc dst, RadEnc src, const void *in, uint64_t in_bytes,
                       uint64_t n_elems, void *out, uint64_t out_bytes, RadErr *e);

#endif
