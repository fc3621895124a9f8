/* rad_xform.c — name-map transforms on encoded tensors. See rad_xform.h.
 *
 * Byte arithmetic: an input's byte count is checked against its shape once (xt_check,
 * xt_data), so every offset computed afterwards is a part of a checked total and cannot
 * overflow. Output sizes are computed with the same overflow checks before anything is written.
 * Decoded values reach the output through memcpy (the output may have any alignment). */
#include "libcommon/tensor/rad_xform.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/tensor/rad_enc.h"

/* Elements decoded at a time when an op streams through a tensor (whole rows, at least one). */
#define PIECE_ELEMS (64u * 1024u)

/* --- describing and checking inputs -------------------------------------------------------- */

/* "tensor 'name' [4x64 q4_1]" into buf, for messages. */
static const char *xt_desc(const RadXTensor *t, char *buf, size_t size) {
    const RadEncInfo *ei = rad_enc_info(t->enc);
    int n = snprintf(buf, size, "tensor '%s' [", t->name ? t->name : "?");
    uint32_t rank = t->rank <= RAD_MAX_RANK ? t->rank : 0;
    for (uint32_t i = 0; i < rank && n >= 0 && (size_t)n < size; i++)
        n += snprintf(buf + n, size - (size_t)n, "%s%llu", i ? "x" : "",
                      (unsigned long long)t->shape[i]);
    if (n >= 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, " %s]", ei ? ei->name : "?");
    return buf;
}
#define DESC(t) xt_desc((t), dbuf, sizeof dbuf)

/* Checks t's description (not its bytes): a known encoding, rank 1..RAD_MAX_RANK, the innermost
 * dim whole blocks, counts within 64 bits. Gives the element and byte counts. */
static int xt_check(const char *op, const RadXTensor *t, uint64_t *n_elems, uint64_t *n_bytes,
                    RadErr *e) {
    char dbuf[200];
    if (!t) return rad_err_set(e, RAD_E_ARG, "%s: NULL input tensor", op);
    const RadEncInfo *ei = rad_enc_info(t->enc);
    if (!ei)
        return rad_err_set(e, RAD_E_ARG, "%s: tensor '%s': unknown encoding %d", op,
                           t->name ? t->name : "?", (int)t->enc);
    if (t->rank < 1 || t->rank > RAD_MAX_RANK)
        return rad_err_set(e, RAD_E_ARG, "%s: tensor '%s': rank %u is outside 1..%d", op,
                           t->name ? t->name : "?", t->rank, RAD_MAX_RANK);
    if (t->shape[t->rank - 1] % ei->block_elems)
        return rad_err_set(e, RAD_E_SHAPE,
                           "%s: %s: innermost dim %llu is not a multiple of the %s block (%u)", op,
                           DESC(t), (unsigned long long)t->shape[t->rank - 1], ei->name,
                           ei->block_elems);
    uint64_t n = 1;
    for (uint32_t i = 0; i < t->rank; i++) {
        if (t->shape[i] != 0 && n > UINT64_MAX / t->shape[i])
            return rad_err_set(e, RAD_E_ARG, "%s: %s: element count overflows 64 bits", op,
                               DESC(t));
        n *= t->shape[i];
    }
    if (n / ei->block_elems > UINT64_MAX / ei->block_bytes)
        return rad_err_set(e, RAD_E_ARG, "%s: %s: byte count overflows 64 bits", op, DESC(t));
    if (n_elems) *n_elems = n;
    if (n_bytes) *n_bytes = n / ei->block_elems * ei->block_bytes;
    return RAD_OK;
}

/* Checks t's bytes: exactly `want` of them, and a data pointer when there are any. */
static int xt_data(const char *op, const RadXTensor *t, uint64_t want, RadErr *e) {
    char dbuf[200];
    if (t->nbytes != want)
        return rad_err_set(e, RAD_E_ARG, "%s: %s: needs %llu bytes, given %llu", op, DESC(t),
                           (unsigned long long)want, (unsigned long long)t->nbytes);
    if (want && !t->data) return rad_err_set(e, RAD_E_ARG, "%s: %s: NULL data", op, DESC(t));
    return RAD_OK;
}

/* Fills the output description: elements and bytes of enc for shape, with overflow checks. */
static int xs_set(const char *op, RadXShape *o, RadEnc enc, uint32_t rank, const uint64_t *shape,
                  int bytewise, RadErr *e) {
    const RadEncInfo *ei = rad_enc_info(enc);
    memset(o, 0, sizeof *o);
    o->enc = enc;
    o->rank = rank;
    o->bytewise = bytewise;
    uint64_t n = 1;
    for (uint32_t i = 0; i < rank; i++) {
        if (shape[i] != 0 && n > UINT64_MAX / shape[i])
            return rad_err_set(e, RAD_E_ARG, "%s: output element count overflows 64 bits", op);
        n *= shape[i];
        o->shape[i] = shape[i];
    }
    if (n / ei->block_elems > UINT64_MAX / ei->block_bytes)
        return rad_err_set(e, RAD_E_ARG, "%s: output byte count overflows 64 bits", op);
    o->n_elems = n;
    o->nbytes = n / ei->block_elems * ei->block_bytes;
    return RAD_OK;
}

static int out_check(const char *op, const RadXShape *s, void *out, uint64_t out_bytes,
                     RadErr *e) {
    if (out_bytes != s->nbytes)
        return rad_err_set(e, RAD_E_ARG, "%s: the output needs %llu bytes, given %llu", op,
                           (unsigned long long)s->nbytes, (unsigned long long)out_bytes);
    if (s->nbytes && !out) return rad_err_set(e, RAD_E_ARG, "%s: NULL output", op);
    return RAD_OK;
}

static int is_plain(RadEnc enc) { return rad_enc_info(enc)->block_elems == 1; }

/* Bytes of n elements of enc (n whole blocks; the caller knows it fits). */
static uint64_t enc_bytes(RadEnc enc, uint64_t n) {
    const RadEncInfo *ei = rad_enc_info(enc);
    return n / ei->block_elems * ei->block_bytes;
}

/* A decode buffer reused across calls; free p when done. */
typedef struct Scratch {
    float *p;   /* NULL until first use */
    uint64_t n; /* floats p holds */
} Scratch;

/* Decodes n elements of enc at src into dst as little-endian f32 bytes, at most PIECE_ELEMS
 * (rounded down to whole rows of row_elems, whole blocks, > 0; at least one row) at a time. */
static int decode_to(const char *op, RadEnc enc, const uint8_t *src, uint64_t n,
                     uint64_t row_elems, uint8_t *dst, Scratch *sc, RadErr *e) {
    if (n == 0) return RAD_OK;
    uint64_t piece = row_elems >= PIECE_ELEMS ? row_elems : PIECE_ELEMS / row_elems * row_elems;
    if (piece > n) piece = n;
    if (sc->n < piece) {
        if (piece > SIZE_MAX / sizeof(float))
            return rad_err_set(e, RAD_E_NOMEM, "%s: a row of %llu elements does not fit in memory",
                               op, (unsigned long long)row_elems);
        float *p = realloc(sc->p, (size_t)piece * sizeof *p);
        if (!p) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", op);
        sc->p = p;
        sc->n = piece;
    }
    int rc = RAD_OK;
    for (uint64_t i = 0; i < n && rc == RAD_OK; i += piece) {
        const uint64_t k = n - i < piece ? n - i : piece;
        rc = rad_dequant(enc, src + enc_bytes(enc, i), enc_bytes(enc, k), sc->p, k, e);
        if (rc == RAD_OK) memcpy(dst + 4 * i, sc->p, (size_t)k * 4);
    }
    return rc;
}

/* Decodes n elements at src into a fresh float array (the caller frees it). */
static int decode_alloc(const char *op, RadEnc enc, const uint8_t *src, uint64_t n, float **out,
                        RadErr *e) {
    *out = NULL;
    if (n > SIZE_MAX / sizeof(float))
        return rad_err_set(e, RAD_E_NOMEM, "%s: %llu elements do not fit in memory", op,
                           (unsigned long long)n);
    float *p = malloc(n ? (size_t)n * sizeof *p : 1);
    if (!p) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", op);
    int rc = rad_dequant(enc, src, enc_bytes(enc, n), p, n, e);
    if (rc) {
        free(p);
        return rc;
    }
    *out = p;
    return RAD_OK;
}

RadXTensor rad_xtensor_of(const RadTensor *t, const void *data, uint64_t nbytes) {
    RadXTensor x;
    memset(&x, 0, sizeof x);
    x.name = t->name;
    x.enc = t->enc;
    x.rank = t->rank;
    for (uint32_t i = 0; i < t->rank && i < RAD_MAX_RANK; i++) x.shape[i] = t->shape[i];
    x.data = data;
    x.nbytes = nbytes;
    return x;
}

/* Resolves [begin, end) (end 0: to n) against a dim of n; refuses an empty or reversed range
 * (RAD_E_ARG) and one past the dim (RAD_E_SHAPE). */
static int range_check(const char *op, const char *what, const RadXTensor *t, uint64_t n,
                       uint64_t begin, uint64_t *end, RadErr *e) {
    char dbuf[200];
    const uint64_t en = *end ? *end : n;
    if (en > n)
        return rad_err_set(e, RAD_E_SHAPE, "%s: %s: %s [%llu, %llu) past its %llu %s", op,
                           DESC(t), what, (unsigned long long)begin, (unsigned long long)en,
                           (unsigned long long)n, what);
    if (begin >= en)
        return rad_err_set(e, RAD_E_ARG, "%s: %s: empty %s range [%llu, %llu)", op, DESC(t), what,
                           (unsigned long long)begin, (unsigned long long)en);
    *end = en;
    return RAD_OK;
}

/* --- rows --------------------------------------------------------------------------------- */

int rad_xform_rows_shape(const RadXTensor *in, uint64_t begin, uint64_t end, RadRowPerm perm,
                         uint32_t heads, RadXShape *out, RadErr *e) {
    static const char op[] = "rows";
    char dbuf[200];
    int rc = xt_check(op, in, NULL, NULL, e);
    if (rc) return rc;
    if (in->rank == 1 && !is_plain(in->enc))
        return rad_err_set(e, RAD_E_SHAPE, "%s: %s: a rank-1 %s tensor has no whole rows", op,
                           DESC(in), rad_enc_info(in->enc)->name);
    rc = range_check(op, "rows", in, in->shape[0], begin, &end, e);
    if (rc) return rc;
    const uint64_t n = end - begin;
    if (perm == RAD_PERM_ROPE_UNINTERLEAVE) {
        if (heads == 0)
            return rad_err_set(e, RAD_E_ARG, "%s: %s: rope un-interleave with 0 heads", op,
                               DESC(in));
        if (n % heads || (n / heads) % 2)
            return rad_err_set(e, RAD_E_SHAPE,
                               "%s: %s: rope un-interleave of %llu rows in %u heads needs an even "
                               "head size",
                               op, DESC(in), (unsigned long long)n, heads);
    } else if (perm != RAD_PERM_NONE) {
        return rad_err_set(e, RAD_E_ARG, "%s: %s: unknown row permutation %d", op, DESC(in),
                           (int)perm);
    }
    uint64_t shape[RAD_MAX_RANK];
    memcpy(shape, in->shape, sizeof shape);
    shape[0] = n;
    return xs_set(op, out, in->enc, in->rank, shape, 1, e);
}

int rad_xform_rows(const RadXTensor *in, uint64_t begin, uint64_t end, RadRowPerm perm,
                   uint32_t heads, void *out, uint64_t out_bytes, RadErr *e) {
    static const char op[] = "rows";
    RadXShape s;
    uint64_t nb;
    int rc = rad_xform_rows_shape(in, begin, end, perm, heads, &s, e);
    if (!rc) rc = xt_check(op, in, NULL, &nb, e);
    if (!rc) rc = xt_data(op, in, nb, e);
    if (!rc) rc = out_check(op, &s, out, out_bytes, e);
    if (rc || s.nbytes == 0) return rc;
    const uint64_t n = s.shape[0];
    const uint64_t row = s.nbytes / n; /* bytes of one row: n > 0 (range_check) */
    const uint8_t *x = (const uint8_t *)in->data + begin * row;
    uint8_t *y = out;
    if (perm == RAD_PERM_NONE) {
        memcpy(y, x, (size_t)s.nbytes);
        return RAD_OK;
    }
    const uint64_t d = n / heads, half = d / 2;
    for (uint64_t h = 0; h < heads; h++)
        for (uint64_t k = 0; k < 2; k++)
            for (uint64_t j = 0; j < half; j++)
                memcpy(y + (h * d + k * half + j) * row, x + (h * d + 2 * j + k) * row,
                       (size_t)row);
    return RAD_OK;
}

/* --- cols --------------------------------------------------------------------------------- */

int rad_xform_cols_shape(const RadXTensor *in, uint64_t begin, uint64_t end, RadXShape *out,
                         RadErr *e) {
    static const char op[] = "cols";
    char dbuf[200];
    int rc = xt_check(op, in, NULL, NULL, e);
    if (rc) return rc;
    const uint64_t c = in->shape[in->rank - 1];
    rc = range_check(op, "columns", in, c, begin, &end, e);
    if (rc) return rc;
    const RadEncInfo *ei = rad_enc_info(in->enc);
    if (begin % ei->block_elems || end % ei->block_elems)
        return rad_err_set(e, RAD_E_SHAPE,
                           "%s: %s: columns [%llu, %llu) do not fall on %s's %u-element block "
                           "boundaries",
                           op, DESC(in), (unsigned long long)begin, (unsigned long long)end,
                           ei->name, ei->block_elems);
    uint64_t shape[RAD_MAX_RANK];
    memcpy(shape, in->shape, sizeof shape);
    shape[in->rank - 1] = end - begin;
    return xs_set(op, out, in->enc, in->rank, shape, 1, e);
}

int rad_xform_cols(const RadXTensor *in, uint64_t begin, uint64_t end, void *out,
                   uint64_t out_bytes, RadErr *e) {
    static const char op[] = "cols";
    RadXShape s;
    uint64_t n_in, nb;
    int rc = rad_xform_cols_shape(in, begin, end, &s, e);
    if (!rc) rc = xt_check(op, in, &n_in, &nb, e);
    if (!rc) rc = xt_data(op, in, nb, e);
    if (!rc) rc = out_check(op, &s, out, out_bytes, e);
    if (rc || s.nbytes == 0) return rc;
    const uint64_t c = in->shape[in->rank - 1];
    const uint64_t rows = n_in / c; /* c > 0: the range is not empty */
    const uint64_t in_row = enc_bytes(in->enc, c);
    const uint64_t off = enc_bytes(in->enc, begin);
    const uint64_t len = s.nbytes / rows;
    const uint8_t *x = in->data;
    uint8_t *y = out;
    for (uint64_t r = 0; r < rows; r++) memcpy(y + r * len, x + r * in_row + off, (size_t)len);
    return RAD_OK;
}

/* --- concat ------------------------------------------------------------------------------- */

int rad_xform_concat_shape(const RadXTensor *in, uint32_t n_in, int32_t axis, RadXShape *out,
                           RadErr *e) {
    static const char op[] = "concat";
    char dbuf[200], dbuf0[200];
    if (n_in == 0 || !in) return rad_err_set(e, RAD_E_ARG, "%s: no inputs", op);
    for (uint32_t i = 0; i < n_in; i++) {
        int rc = xt_check(op, &in[i], NULL, NULL, e);
        if (rc) return rc;
    }
    const uint32_t rank = in[0].rank;
    const int64_t ax = axis < 0 ? (int64_t)axis + rank : axis;
    if (ax < 0 || ax >= (int64_t)rank)
        return rad_err_set(e, RAD_E_ARG, "%s: %s: axis %d is outside a rank-%u tensor", op,
                           DESC(&in[0]), (int)axis, rank);
    uint64_t shape[RAD_MAX_RANK];
    memcpy(shape, in[0].shape, sizeof shape);
    int same_enc = 1;
    for (uint32_t i = 1; i < n_in; i++) {
        if (in[i].rank != rank)
            return rad_err_set(e, RAD_E_SHAPE, "%s: %s has rank %u, %s rank %u", op, DESC(&in[i]),
                               in[i].rank, xt_desc(&in[0], dbuf0, sizeof dbuf0), rank);
        for (uint32_t d = 0; d < rank; d++) {
            if (d == ax || in[i].shape[d] == in[0].shape[d]) continue;
            return rad_err_set(e, RAD_E_SHAPE,
                               "%s along axis %lld: %s differs from %s in dim %u (%llu vs %llu)",
                               op, (long long)ax, DESC(&in[i]), xt_desc(&in[0], dbuf0, sizeof dbuf0),
                               d, (unsigned long long)in[i].shape[d],
                               (unsigned long long)in[0].shape[d]);
        }
        if (shape[ax] > UINT64_MAX - in[i].shape[ax])
            return rad_err_set(e, RAD_E_ARG, "%s: dim %lld overflows 64 bits", op, (long long)ax);
        shape[ax] += in[i].shape[ax];
        if (in[i].enc != in[0].enc) same_enc = 0;
    }
    return xs_set(op, out, same_enc ? in[0].enc : RAD_ENC_F32, rank, shape, same_enc, e);
}

int rad_xform_concat(const RadXTensor *in, uint32_t n_in, int32_t axis, void *out,
                     uint64_t out_bytes, RadErr *e) {
    static const char op[] = "concat";
    RadXShape s;
    int rc = rad_xform_concat_shape(in, n_in, axis, &s, e);
    for (uint32_t i = 0; !rc && i < n_in; i++) {
        uint64_t nb;
        rc = xt_check(op, &in[i], NULL, &nb, e);
        if (!rc) rc = xt_data(op, &in[i], nb, e);
    }
    if (!rc) rc = out_check(op, &s, out, out_bytes, e);
    if (rc || s.nbytes == 0) return rc;
    const uint32_t ax = (uint32_t)(axis < 0 ? (int64_t)axis + s.rank : axis);
    uint64_t outer = 1;
    for (uint32_t d = 0; d < ax; d++) outer *= s.shape[d];
    uint8_t *y = out;
    Scratch sc = {NULL, 0};
    /* Each input contributes, per outer index, a slab of prod(shape[ax..]) elements: whole
     * blocks, since the innermost dim of every input is. */
    for (uint64_t o = 0; o < outer && !rc; o++) {
        for (uint32_t i = 0; i < n_in && !rc; i++) {
            uint64_t slab = 1;
            for (uint32_t d = ax; d < in[i].rank; d++) slab *= in[i].shape[d];
            if (slab == 0) continue;
            const uint64_t sb = enc_bytes(in[i].enc, slab);
            const uint8_t *x = (const uint8_t *)in[i].data + o * sb;
            if (s.bytewise) {
                memcpy(y, x, (size_t)sb);
                y += sb;
            } else {
                rc = decode_to(op, in[i].enc, x, slab, in[i].shape[in[i].rank - 1], y, &sc, e);
                y += 4 * slab;
            }
        }
    }
    free(sc.p);
    return rc;
}

/* --- transpose ---------------------------------------------------------------------------- */

int rad_xform_transpose_shape(const RadXTensor *in, RadXShape *out, RadErr *e) {
    static const char op[] = "transpose";
    char dbuf[200];
    int rc = xt_check(op, in, NULL, NULL, e);
    if (rc) return rc;
    if (in->rank != 2)
        return rad_err_set(e, RAD_E_SHAPE, "%s: %s: rank %u, not 2", op, DESC(in), in->rank);
    const uint64_t shape[2] = {in->shape[1], in->shape[0]};
    const int plain = is_plain(in->enc);
    return xs_set(op, out, plain ? in->enc : RAD_ENC_F32, 2, shape, plain, e);
}

int rad_xform_transpose(const RadXTensor *in, void *out, uint64_t out_bytes, RadErr *e) {
    static const char op[] = "transpose";
    RadXShape s;
    uint64_t nb;
    int rc = rad_xform_transpose_shape(in, &s, e);
    if (!rc) rc = xt_check(op, in, NULL, &nb, e);
    if (!rc) rc = xt_data(op, in, nb, e);
    if (!rc) rc = out_check(op, &s, out, out_bytes, e);
    if (rc || s.nbytes == 0) return rc;
    const uint64_t R = in->shape[0], C = in->shape[1];
    const uint8_t *x = in->data;
    uint8_t *y = out;
    if (s.bytewise) {
        /* element by element, in 32x32 tiles so both sides stay in cache */
        const size_t es = rad_enc_info(in->enc)->block_bytes;
        enum { T = 32 };
        for (uint64_t r0 = 0; r0 < R; r0 += T)
            for (uint64_t c0 = 0; c0 < C; c0 += T) {
                const uint64_t r1 = r0 + T < R ? r0 + T : R, c1 = c0 + T < C ? c0 + T : C;
                for (uint64_t r = r0; r < r1; r++)
                    for (uint64_t c = c0; c < c1; c++)
                        memcpy(y + (c * R + r) * es, x + (r * C + c) * es, es);
            }
        return RAD_OK;
    }
    /* a block encoding: decode one input row at a time and scatter it into a column */
    float *row;
    if (C > SIZE_MAX / sizeof *row)
        return rad_err_set(e, RAD_E_NOMEM, "%s: a row of %llu elements does not fit in memory", op,
                           (unsigned long long)C);
    row = malloc((size_t)C * sizeof *row);
    if (!row) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", op);
    const uint64_t rb = enc_bytes(in->enc, C);
    for (uint64_t r = 0; r < R && !rc; r++) {
        rc = rad_dequant(in->enc, x + r * rb, rb, row, C, e);
        for (uint64_t c = 0; c < C && !rc; c++) memcpy(y + (c * R + r) * 4, &row[c], 4);
    }
    free(row);
    return rc;
}

/* --- tap ---------------------------------------------------------------------------------- */

int rad_xform_tap_shape(const RadXTensor *in, int64_t index, RadXShape *out, RadErr *e) {
    static const char op[] = "tap";
    char dbuf[200];
    int rc = xt_check(op, in, NULL, NULL, e);
    if (rc) return rc;
    if (in->rank < 2)
        return rad_err_set(e, RAD_E_SHAPE, "%s: %s: rank %u, needs at least 2", op, DESC(in),
                           in->rank);
    if (index < 0)
        return rad_err_set(e, RAD_E_ARG, "%s: %s: negative index %lld", op, DESC(in),
                           (long long)index);
    if ((uint64_t)index >= in->shape[0])
        return rad_err_set(e, RAD_E_SHAPE, "%s: %s: index %lld past dim 0 (%llu)", op, DESC(in),
                           (long long)index, (unsigned long long)in->shape[0]);
    return xs_set(op, out, in->enc, in->rank - 1, in->shape + 1, 1, e);
}

int rad_xform_tap(const RadXTensor *in, int64_t index, void *out, uint64_t out_bytes, RadErr *e) {
    static const char op[] = "tap";
    RadXShape s;
    uint64_t nb;
    int rc = rad_xform_tap_shape(in, index, &s, e);
    if (!rc) rc = xt_check(op, in, NULL, &nb, e);
    if (!rc) rc = xt_data(op, in, nb, e);
    if (!rc) rc = out_check(op, &s, out, out_bytes, e);
    if (rc || s.nbytes == 0) return rc;
    memcpy(out, (const uint8_t *)in->data + (uint64_t)index * s.nbytes, (size_t)s.nbytes);
    return RAD_OK;
}

/* --- wnorm -------------------------------------------------------------------------------- */

/* g holds one value per row of a tensor with `rows` rows: shape [rows] or [rows, 1, ...]. */
static int per_row_check(const char *op, const char *role, const RadXTensor *t,
                         const RadXTensor *of, RadErr *e) {
    char dbuf[200], dbuf2[200];
    int ok = t->shape[0] == of->shape[0];
    for (uint32_t d = 1; d < t->rank; d++) ok = ok && t->shape[d] == 1;
    if (!ok)
        return rad_err_set(e, RAD_E_SHAPE, "%s: %s %s is not one value per row of %s (%llu rows)",
                           op, role, DESC(t), xt_desc(of, dbuf2, sizeof dbuf2),
                           (unsigned long long)of->shape[0]);
    return RAD_OK;
}

int rad_xform_wnorm_shape(const RadXTensor *g, const RadXTensor *v, RadXShape *out, RadErr *e) {
    static const char op[] = "wnorm";
    char dbuf[200];
    int rc = xt_check(op, g, NULL, NULL, e);
    if (!rc) rc = xt_check(op, v, NULL, NULL, e);
    if (rc) return rc;
    if (v->rank < 2)
        return rad_err_set(e, RAD_E_SHAPE, "%s: v %s: rank %u, needs at least 2", op, DESC(v),
                           v->rank);
    rc = per_row_check(op, "g", g, v, e);
    if (rc) return rc;
    return xs_set(op, out, RAD_ENC_F32, v->rank, v->shape, 0, e);
}

int rad_xform_wnorm(const RadXTensor *g, const RadXTensor *v, void *out, uint64_t out_bytes,
                    RadErr *e) {
    static const char op[] = "wnorm";
    RadXShape s;
    uint64_t gn, gb, vb;
    int rc = rad_xform_wnorm_shape(g, v, &s, e);
    if (!rc) rc = xt_check(op, g, &gn, &gb, e);
    if (!rc) rc = xt_data(op, g, gb, e);
    if (!rc) rc = xt_check(op, v, NULL, &vb, e);
    if (!rc) rc = xt_data(op, v, vb, e);
    if (!rc) rc = out_check(op, &s, out, out_bytes, e);
    if (rc || s.nbytes == 0) return rc;
    const uint64_t rows = v->shape[0], row = s.n_elems / rows;
    float *gv = NULL, *vr = NULL;
    rc = decode_alloc(op, g->enc, g->data, gn, &gv, e);
    if (!rc && row > SIZE_MAX / sizeof *vr)
        rc = rad_err_set(e, RAD_E_NOMEM, "%s: a row of %llu elements does not fit in memory", op,
                         (unsigned long long)row);
    if (!rc && !(vr = malloc((size_t)row * sizeof *vr)))
        rc = rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", op);
    const uint64_t rb = enc_bytes(v->enc, row);
    uint8_t *y = out;
    for (uint64_t r = 0; r < rows && !rc; r++) {
        rc = rad_dequant(v->enc, (const uint8_t *)v->data + r * rb, rb, vr, row, e);
        if (rc) break;
        double ss = 0.0;
        for (uint64_t j = 0; j < row; j++) {
            const double t = (double)vr[j];
            const double sq = t * t;
            ss = ss + sq;
        }
        const float norm = (float)sqrt(ss);
        const float scale = gv[r] / norm;
        for (uint64_t j = 0; j < row; j++) {
            const float w = vr[j] * scale;
            memcpy(y + (r * row + j) * 4, &w, 4);
        }
    }
    free(vr);
    free(gv);
    return rc;
}

/* --- ema ---------------------------------------------------------------------------------- */

int rad_xform_ema_shape(const RadXTensor *sum, const RadXTensor *usage, float eps,
                        RadXShape *out, RadErr *e) {
    static const char op[] = "ema";
    char dbuf[200];
    int rc = xt_check(op, sum, NULL, NULL, e);
    if (!rc) rc = xt_check(op, usage, NULL, NULL, e);
    if (rc) return rc;
    if (sum->rank < 2)
        return rad_err_set(e, RAD_E_SHAPE, "%s: embed_sum %s: rank %u, needs at least 2", op,
                           DESC(sum), sum->rank);
    rc = per_row_check(op, "cluster_usage", usage, sum, e);
    if (rc) return rc;
    if (isnan(eps)) return rad_err_set(e, RAD_E_ARG, "%s: %s: eps is NaN", op, DESC(sum));
    return xs_set(op, out, RAD_ENC_F32, sum->rank, sum->shape, 0, e);
}

int rad_xform_ema(const RadXTensor *sum, const RadXTensor *usage, float eps, void *out,
                  uint64_t out_bytes, RadErr *e) {
    static const char op[] = "ema";
    RadXShape s;
    uint64_t un, ub, sb;
    int rc = rad_xform_ema_shape(sum, usage, eps, &s, e);
    if (!rc) rc = xt_check(op, usage, &un, &ub, e);
    if (!rc) rc = xt_data(op, usage, ub, e);
    if (!rc) rc = xt_check(op, sum, NULL, &sb, e);
    if (!rc) rc = xt_data(op, sum, sb, e);
    if (!rc) rc = out_check(op, &s, out, out_bytes, e);
    if (rc || s.nbytes == 0) return rc;
    float *u = NULL;
    rc = decode_alloc(op, usage->enc, usage->data, un, &u, e);
    if (rc) return rc;
    /* decode embed_sum straight into the output as f32, then divide in place */
    const uint64_t rows = sum->shape[0], row = s.n_elems / rows;
    Scratch sc = {NULL, 0};
    rc = decode_to(op, sum->enc, sum->data, s.n_elems, sum->shape[sum->rank - 1], out, &sc, e);
    free(sc.p);
    uint8_t *y = out;
    for (uint64_t r = 0; r < rows && !rc; r++) {
        const float c = u[r] < eps ? eps : u[r]; /* torch.clamp(min=eps): NaN stays NaN */
        for (uint64_t j = 0; j < row; j++) {
            float v;
            memcpy(&v, y + (r * row + j) * 4, 4);
            v = v / c;
            memcpy(y + (r * row + j) * 4, &v, 4);
        }
    }
    free(u);
    return rc;
}

/* --- the name map ------------------------------------------------------------------------- */

static const char *map_kind_name(RadMapKind k) {
    switch (k) {
    case RAD_MAP_COPY: return "copy";
    case RAD_MAP_CONCAT: return "concat";
    case RAD_MAP_WNORM: return "wnorm";
    case RAD_MAP_ROWS: return "rows";
    case RAD_MAP_TRANSPOSE: return "transpose";
    case RAD_MAP_EMA: return "ema";
    case RAD_MAP_TAP: return "tap";
    case RAD_MAP_COLS: return "cols";
    }
    return NULL;
}

/* Checks m and n_in; gives the kind's name. */
static int map_check(const RadNameMap *m, const RadXTensor *in, uint32_t n_in, RadErr *e) {
    if (!m) return rad_err_set(e, RAD_E_ARG, "name map: NULL entry");
    const char *dst = m->dst ? m->dst : "?";
    const char *kn = map_kind_name(m->kind);
    if (!kn)
        return rad_err_set(e, RAD_E_ARG, "name map '%s': unknown kind %d", dst, (int)m->kind);
    uint32_t want = (m->kind == RAD_MAP_WNORM || m->kind == RAD_MAP_EMA) ? 2 : 1;
    if (m->kind == RAD_MAP_CONCAT ? n_in < 1 : n_in != want)
        return rad_err_set(e, RAD_E_ARG, "name map '%s': %s takes %s%u source%s, given %u", dst,
                           kn, m->kind == RAD_MAP_CONCAT ? "at least " : "", want,
                           want == 1 ? "" : "s", n_in);
    if (!in) return rad_err_set(e, RAD_E_ARG, "name map '%s': NULL sources", dst);
    if (m->add != 0 && (m->kind != RAD_MAP_COPY || !isfinite(m->add)))
        return rad_err_set(e, RAD_E_ARG, "name map '%s': add %g on a %s entry (add takes a COPY entry and a finite "
                           "value)", dst, (double)m->add, kn);
    return RAD_OK;
}

/* COPY with `add` (Gemma's HF norm gammas: 1 + w): the source decoded to f32, piece by piece
 * into the output, then add in f32, as torch's `1.0 + w.float()`. Shape only (out_shape) or for
 * real. */
static int map_copy_add(const RadXTensor *in, float add, RadXShape *out_shape, void *out,
                        uint64_t out_bytes, RadErr *e) {
    const char *op = "copy+add";
    uint64_t n, nb;
    int rc = xt_check(op, in, &n, &nb, e);
    if (rc) return rc;
    RadXShape s;
    if ((rc = xs_set(op, out_shape ? out_shape : &s, RAD_ENC_F32, in->rank, in->shape, 0, e)) || out_shape) return rc;
    if ((rc = xt_data(op, in, nb, e)) || (rc = out_check(op, &s, out, out_bytes, e))) return rc;
    Scratch sc = {NULL, 0};
    rc = decode_to(op, in->enc, in->data, n, in->shape[in->rank - 1], out, &sc, e);
    free(sc.p);
    uint8_t *y = out;
    for (uint64_t i = 0; i < n && !rc; i++) {
        float v;
        memcpy(&v, y + 4 * i, 4);
        v = v + add;
        memcpy(y + 4 * i, &v, 4);
    }
    return rc;
}

/* Runs the entry's op, shape only (out_shape) or for real (out_shape NULL). */
static int map_do(const RadNameMap *m, const RadXTensor *in, uint32_t n_in, RadXShape *out_shape,
                  void *out, uint64_t out_bytes, RadErr *e) {
    int rc = map_check(m, in, n_in, e);
    if (rc) return rc;
    RadErr le = {0};
    switch (m->kind) {
    case RAD_MAP_COPY:
        if (m->add != 0) {
            rc = map_copy_add(&in[0], m->add, out_shape, out, out_bytes, &le);
        } else if (out_shape) {
            uint64_t n;
            rc = xt_check("copy", &in[0], NULL, &n, &le);
            if (!rc) rc = xs_set("copy", out_shape, in[0].enc, in[0].rank, in[0].shape, 1, &le);
        } else {
            uint64_t nb;
            rc = xt_check("copy", &in[0], NULL, &nb, &le);
            if (!rc) rc = xt_data("copy", &in[0], nb, &le);
            RadXShape s;
            if (!rc) rc = xs_set("copy", &s, in[0].enc, in[0].rank, in[0].shape, 1, &le);
            if (!rc) rc = out_check("copy", &s, out, out_bytes, &le);
            if (!rc && nb) memcpy(out, in[0].data, (size_t)nb);
        }
        break;
    case RAD_MAP_CONCAT:
        rc = out_shape ? rad_xform_concat_shape(in, n_in, m->axis, out_shape, &le)
                       : rad_xform_concat(in, n_in, m->axis, out, out_bytes, &le);
        break;
    case RAD_MAP_WNORM:
        rc = out_shape ? rad_xform_wnorm_shape(&in[0], &in[1], out_shape, &le)
                       : rad_xform_wnorm(&in[0], &in[1], out, out_bytes, &le);
        break;
    case RAD_MAP_ROWS:
        rc = out_shape ? rad_xform_rows_shape(&in[0], m->begin, m->end, m->perm, m->heads,
                                              out_shape, &le)
                       : rad_xform_rows(&in[0], m->begin, m->end, m->perm, m->heads, out,
                                        out_bytes, &le);
        break;
    case RAD_MAP_TRANSPOSE:
        rc = out_shape ? rad_xform_transpose_shape(&in[0], out_shape, &le)
                       : rad_xform_transpose(&in[0], out, out_bytes, &le);
        break;
    case RAD_MAP_EMA:
        rc = out_shape ? rad_xform_ema_shape(&in[0], &in[1], m->eps, out_shape, &le)
                       : rad_xform_ema(&in[0], &in[1], m->eps, out, out_bytes, &le);
        break;
    case RAD_MAP_TAP:
        rc = out_shape ? rad_xform_tap_shape(&in[0], m->index, out_shape, &le)
                       : rad_xform_tap(&in[0], m->index, out, out_bytes, &le);
        break;
    case RAD_MAP_COLS:
        rc = out_shape ? rad_xform_cols_shape(&in[0], m->begin, m->end, out_shape, &le)
                       : rad_xform_cols(&in[0], m->begin, m->end, out, out_bytes, &le);
        break;
    }
    if (rc) return rad_err_set(e, rc, "'%s': %s", m->dst ? m->dst : "?", le.msg);
    return RAD_OK;
}

int rad_xform_map_shape(const RadNameMap *m, const RadXTensor *in, uint32_t n_in,
                        RadXShape *out, RadErr *e) {
    if (!out) return rad_err_set(e, RAD_E_ARG, "name map: NULL output shape");
    return map_do(m, in, n_in, out, NULL, 0, e);
}

int rad_xform_map(const RadNameMap *m, const RadXTensor *in, uint32_t n_in, void *out,
                  uint64_t out_bytes, RadErr *e) {
    return map_do(m, in, n_in, NULL, out, out_bytes, e);
}
