/* rad_enc.h — decoding of tensor encodings to f32: the plain types (f32, f16, bf16, f64, the
 * integers, fp8) and GGML's block quantisations (q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k,
 * q6_k), whose byte layouts are GGML's exactly (abi/rad_types.h lists them).
 *
 * Portable C, one element at a time: this is the reference the fast kernels are tested
 * against. Every multiply-add is written as two statements so no compiler contracts it into
 * an FMA: results are bit-identical to GGML's reference dequantize_row_* and to the gguf
 * Python package's numpy dequantize. */
#ifndef RAD_QUANT_H
#define RAD_QUANT_H

#include <stdint.h>

#include "abi/rad_types.h"
#include "libcommon/base/rad_err.h"

/* IEEE binary16 -> binary32, exact for every input (subnormals, ±inf, NaN payloads kept). */
float rad_f16_to_f32(uint16_t h);
/* bfloat16 -> binary32 (the top 16 bits of a float; exact). */
float rad_bf16_to_f32(uint16_t h);
/* OCP fp8: e4m3 ("fn": bias 7, no inf, S.1111.111 is NaN) and e5m2 (an f16's top byte). */
float rad_f8e4m3_to_f32(uint8_t b);
float rad_f8e5m2_to_f32(uint8_t b);

/* Decodes n_elems elements of encoding enc from src (src_bytes bytes, any alignment,
 * little-endian) into dst[n_elems]. The elements are a run of whole blocks along the
 * innermost dim (a whole tensor, or a whole number of rows).
 * Fails, with a one-line message naming the encoding, with
 *   RAD_E_SHAPE        n_elems is not a whole number of blocks;
 *   RAD_E_FORMAT       src_bytes is not exactly the bytes of n_elems elements;
 *   RAD_E_UNSUPPORTED  enc is not a known encoding;
 *   RAD_E_ARG          src or dst is NULL while n_elems > 0. */
int rad_dequant(RadEnc enc, const void *src, uint64_t src_bytes, float *dst, uint64_t n_elems,
                RadErr *e);

/* Rows [r0, r0 + nr) of a block-scaled f8_e4m3 weight of `cols` columns (abi/rad_types.h: codes
 * [rows, cols], scale [ceil(rows/128)][ceil(cols/128)] f32; both planes whole, from row 0) into
 * dst[nr][cols]: e4m3(code) · scale of its 128x128 block, one f32 product. scale NULL: the codes
 * alone. */
void rad_dequant_f8_blocks(const uint8_t *codes, const float *scale, uint64_t cols, uint64_t r0, uint64_t nr, float *dst);

/* Bytes that n_elems elements of enc occupy; RAD_E_SHAPE when n_elems is not a whole number
 * of blocks, RAD_E_UNSUPPORTED for an unknown enc, RAD_E_FORMAT when it overflows u64. */
int rad_enc_bytes(RadEnc enc, uint64_t n_elems, uint64_t *n_bytes, RadErr *e);

#endif
