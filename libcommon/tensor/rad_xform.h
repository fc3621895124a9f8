/* rad_xform.h — the convert-time transforms of an architecture plugin's name map
 * (abi/rad_arch.h, RadNameMap), on encoded tensors: row slices and permutations, column
 * slices, concatenation, transposition, taps, weight-norm folding and EnCodec codebooks.
 *
 * Planning and moving are separate: each op has a `_shape` function that checks the inputs'
 * encodings and shapes (not their bytes) and says what the output will be (encoding, shape,
 * byte size), so the converter can lay out a container before any data moves; the op itself
 * then writes into a caller-allocated buffer of exactly that size.
 *
 * Whatever can be done on whole encoded rows or whole blocks is done without decoding, so a
 * quantised GGUF tensor crosses byte for byte (RadXShape.bytewise = 1, output encoding = the
 * input's). An op that needs the values decodes with rad_dequant and produces f32
 * (RadXShape.enc = RAD_ENC_F32, bytewise = 0); the caller re-encodes it to its target with
 * rad_convert_tensor. In detail:
 *   rows       any encoding, bytewise (a row of a block encoding is shape[rank-1]/block_elems
 *              whole blocks of every inner dim); rank 1 only for plain encodings.
 *   cols       plain encodings bytewise per row; block encodings bytewise when begin and end
 *              fall on block boundaries, refused otherwise.
 *   concat     inputs of one encoding: bytewise along any axis (an input's inner dims are whole
 *              blocks, so its slab is whole blocks too, even along the innermost dim); inputs
 *              of different encodings: decoded, f32.
 *   transpose  rank 2 only; plain encodings element by element, bytewise; block encodings are
 *              decoded and transposed to f32 (a block runs along the innermost dim, which a
 *              transpose turns into the outermost, so no block survives).
 *   tap        any encoding, bytewise.
 *   wnorm      f32 (w = v * (g / ||v||), as torch's _weight_norm with dim=0).
 *   ema        f32 (embed_sum / clamp(cluster_usage, min=eps)[:, None], EnCodec).
 *   copy       bytewise; with RadNameMap.add (Gemma's Hugging Face norm gammas, 1 + w) decoded
 *              and added in f32, as torch's `add + w.float()`, f32.
 * Extra memory is O(one row) (transpose of a block encoding: O(one input row)), never O(tensor).
 *
 * Every failure is one line naming the op, the tensor (name, shape, encoding) and the dims or
 * range at fault: RAD_E_SHAPE when shapes disagree with each other or with the op's
 * parameters; RAD_E_ARG for a bad parameter (unknown permutation or axis, empty range, NaN eps),
 * a bad input description (unknown encoding, rank, byte count that does not match the shape,
 * NULL data) or an output buffer of the wrong size; RAD_E_NOMEM. Inputs and outputs may have
 * any alignment; the output must not overlap an input. */
#ifndef RAD_XFORM_H
#define RAD_XFORM_H

#include <stdint.h>

#include "abi/rad_arch.h"
#include "abi/rad_types.h"
#include "libcommon/base/rad_err.h"
#include "libcommon/format/rad_model.h"

/* An input tensor. */
typedef struct RadXTensor {
    const char *name;             /* for messages; NULL reads "?" */
    RadEnc enc;                   /* encoding of data */
    uint32_t rank;                /* 1..RAD_MAX_RANK */
    uint64_t shape[RAD_MAX_RANK]; /* row-major, PyTorch order: shape[rank-1] contiguous */
    const void *data;             /* encoded bytes, any alignment (the _shape functions ignore it) */
    uint64_t nbytes;              /* bytes at data: exactly what enc needs for shape */
} RadXTensor;

/* What an op will produce. */
typedef struct RadXShape {
    RadEnc enc;                   /* the input's encoding (bytewise), or RAD_ENC_F32 */
    uint32_t rank;
    uint64_t shape[RAD_MAX_RANK];
    uint64_t n_elems;
    uint64_t nbytes;              /* the output buffer's exact size */
    int bytewise;                 /* 1: bytes moved, never decoded (exact for any encoding) */
} RadXShape;

/* A RadXTensor for a tensor of a RadModelFile whose (first plane's) bytes the caller holds. */
RadXTensor rad_xtensor_of(const RadTensor *t, const void *data, uint64_t nbytes);

/* ROWS: rows [begin, end) of dim 0 (end 0: to the end), then, with RAD_PERM_ROPE_UNINTERLEAVE,
 * permuted within each of `heads` heads of d = (end - begin) / heads rows (d even):
 * out[h*d + k*(d/2) + j] = in[begin + h*d + 2*j + k], k in {0, 1}, j < d/2 — the inverse of
 * llama.cpp's convert_hf_to_gguf permute. heads is ignored with RAD_PERM_NONE. Output: the same
 * encoding, shape [end - begin, shape[1..]]. */
int rad_xform_rows_shape(const RadXTensor *in, uint64_t begin, uint64_t end, RadRowPerm perm,
                         uint32_t heads, RadXShape *out, RadErr *e);
int rad_xform_rows(const RadXTensor *in, uint64_t begin, uint64_t end, RadRowPerm perm,
                   uint32_t heads, void *out, uint64_t out_bytes, RadErr *e);

/* COLS: elements [begin, end) of the innermost dim (end 0: to the end) of every row. Block
 * encodings need begin and end on block boundaries. Output: the same encoding, shape with the
 * innermost dim end - begin. */
int rad_xform_cols_shape(const RadXTensor *in, uint64_t begin, uint64_t end, RadXShape *out,
                         RadErr *e);
int rad_xform_cols(const RadXTensor *in, uint64_t begin, uint64_t end, void *out,
                   uint64_t out_bytes, RadErr *e);

/* CONCAT: in[0..n_in) along `axis` (negative counts from the end: -1 is the innermost). All
 * inputs have one rank and agree on every other dim. Output: their common encoding, or f32 when
 * they differ. */
int rad_xform_concat_shape(const RadXTensor *in, uint32_t n_in, int32_t axis, RadXShape *out,
                           RadErr *e);
int rad_xform_concat(const RadXTensor *in, uint32_t n_in, int32_t axis, void *out,
                     uint64_t out_bytes, RadErr *e);

/* TRANSPOSE: a rank-2 [R, C] tensor to [C, R]. Output: the same encoding when plain, else f32. */
int rad_xform_transpose_shape(const RadXTensor *in, RadXShape *out, RadErr *e);
int rad_xform_transpose(const RadXTensor *in, void *out, uint64_t out_bytes, RadErr *e);

/* TAP: slice `index` (0 <= index < shape[0]) of dim 0 of a tensor of rank >= 2. Output: the same
 * encoding, shape[1..]. */
int rad_xform_tap_shape(const RadXTensor *in, int64_t index, RadXShape *out, RadErr *e);
int rad_xform_tap(const RadXTensor *in, int64_t index, void *out, uint64_t out_bytes, RadErr *e);

/* WNORM: g (shape[0] = v's shape[0], every other dim 1, or rank 1) and v (rank >= 2) to
 * w = v * (g / ||v||) per output row (dim 0): the norm's sum of squares accumulates in double
 * and is rounded to f32 once; g / norm and the product are f32, in torch's order. A zero row
 * gives NaN/inf as torch does. Output: f32, v's shape. */
int rad_xform_wnorm_shape(const RadXTensor *g, const RadXTensor *v, RadXShape *out, RadErr *e);
int rad_xform_wnorm(const RadXTensor *g, const RadXTensor *v, void *out, uint64_t out_bytes,
                    RadErr *e);

/* EMA: embed_sum [K, ...] (rank >= 2) and cluster_usage (K elements) to
 * embed[k, ...] = embed_sum[k, ...] / max(cluster_usage[k], eps) in f32 (a NaN usage stays NaN,
 * as torch.clamp). Bit-identical to numpy's float32 expression. eps must not be NaN. Output:
 * f32, embed_sum's shape. */
int rad_xform_ema_shape(const RadXTensor *sum, const RadXTensor *usage, float eps,
                        RadXShape *out, RadErr *e);
int rad_xform_ema(const RadXTensor *sum, const RadXTensor *usage, float eps, void *out,
                  uint64_t out_bytes, RadErr *e);

/* A name-map entry applied to its resolved sources in[0..n_in), in the order of m->src (COPY:
 * the one alternative present). Takes kind, axis, begin, end, index, perm, heads, eps and add
 * (COPY only; a non-finite add or one on another kind is RAD_E_ARG) from m;
 * messages name m->dst. n_in must be what the kind takes (COPY, ROWS, COLS, TRANSPOSE, TAP: 1;
 * WNORM {g, v}, EMA {embed_sum, cluster_usage}: 2; CONCAT: at least 1). */
int rad_xform_map_shape(const RadNameMap *m, const RadXTensor *in, uint32_t n_in,
                        RadXShape *out, RadErr *e);
int rad_xform_map(const RadNameMap *m, const RadXTensor *in, uint32_t n_in, void *out,
                  uint64_t out_bytes, RadErr *e);

#endif
