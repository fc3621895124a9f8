/* r4d_host.c — libr4d's host-side logic (r4d_host.h): plain C11, tested on the CPU. */
#include "r4d_host.h"
#include "r4d_decode.h"

#include <math.h>
#include <string.h>

/* ---- parameters and operands ------------------------------------------------------------------ */

const RadParam *r4d_param(const RadKernelArgs *a, const char *name) {
    if (!a->params) return NULL;
    for (uint32_t i = 0; i < a->n_params; i++)
        if (a->params[i].name && strcmp(a->params[i].name, name) == 0) return &a->params[i];
    return NULL;
}
int r4d_pint(const RadKernelArgs *a, const char *name, int64_t *v) {
    const RadParam *p = r4d_param(a, name);
    if (!p || p->kind != RAD_PARAM_INT) return 0;
    *v = p->lo;
    return 1;
}
int r4d_pflt(const RadKernelArgs *a, const char *name, double *v) {
    const RadParam *p = r4d_param(a, name);
    if (!p || p->kind != RAD_PARAM_FLOAT) return 0;
    *v = p->f;
    return 1;
}
int r4d_preamble(const RadKernelArgs *a, uint32_t n_args) {
    if (!a || a->struct_size < offsetof(RadKernelArgs, deterministic) + sizeof a->deterministic) return RAD_E_ARG;
    if (a->n <= 0) return RAD_E_SHAPE;
    if (a->n_args != n_args || !a->args) return RAD_E_SHAPE;
    return RAD_OK;
}
int r4d_buf_ok(const RadKArg *b, uint64_t rows, uint64_t cols) {
    return b->data && b->dtype == RAD_F32 && b->rows >= rows && b->cols == cols && b->row_stride >= cols;
}
int r4d_raw_ok(const RadKArg *b, uint64_t n) {
    return b->data && b->planes[1] && b->dtype == RAD_I32 && b->rows >= n && b->cols == 1;
}
uint64_t r4d_row_bytes(RadDType e, uint64_t cols) {
    const uint64_t ours = RAD_ENC_PLAIN_FLOATS | RAD_ENC_GGML_BLOCKS | RAD_ENC_BIT(RAD_ENC_F8_E4M3);
    if ((unsigned)e >= 64 || !(ours & RAD_ENC_BIT(e))) return 0;
    const RadEncInfo *ei = rad_enc_info((RadEnc)e);
    if (!ei || cols == 0 || cols % ei->block_elems) return 0;
    return cols / ei->block_elems * ei->block_bytes;
}
int r4d_weight_ok(const RadKArg *w, uint64_t encs, int packed_ok, uint64_t rows, uint64_t cols) {
    if (!w->data || w->rows != rows || w->cols != cols) return 0;
    if (w->dtype & RAD_PACKED) {
        const RadDType base = (RadDType)(w->dtype & ~RAD_PACKED);
        return packed_ok && (unsigned)base < 64 && (RAD_ENC_PLAIN_FLOATS & RAD_ENC_BIT(base)) && (encs & RAD_ENC_BIT(base));
    }
    if ((unsigned)w->dtype >= 64 || !(encs & RAD_ENC_BIT(w->dtype))) return 0;
    const uint64_t rb = r4d_row_bytes(w->dtype, cols);
    return rb && (rows <= 1 || w->row_stride >= rb);
}

/* ---- packed weights ------------------------------------------------------------------------------- */

size_t r4d_pack_bf16_size(RadDType enc, uint64_t rows, uint64_t cols) {
    if (enc != RAD_F32 && enc != RAD_F16 && enc != RAD_BF16) return 0;
    if (!rows || !cols || rows > SIZE_MAX / 2 / cols) return 0;
    return (size_t)(rows * cols * 2);
}
int r4d_pack_bf16(RadDType enc, uint64_t rows, uint64_t cols, const void *src, uint64_t src_row_stride, uint16_t *dst) {
    if (!r4d_pack_bf16_size(enc, rows, cols) || !src || !dst) return RAD_E_ARG;
    const size_t el = enc == RAD_F32 ? 4 : 2;
    if (rows > 1 && src_row_stride < cols * el) return RAD_E_SHAPE;
    for (uint64_t r = 0; r < rows; r++) {
        const uint8_t *s = (const uint8_t *)src + r * src_row_stride;
        uint16_t *d = dst + r * cols;
        if (enc == RAD_BF16) {
            memcpy(d, s, cols * 2);
            continue;
        }
        for (uint64_t c = 0; c < cols; c++) {
            float v;
            if (enc == RAD_F32) {
                memcpy(&v, s + c * 4, 4);
            } else {
                uint16_t h;
                memcpy(&h, s + c * 2, 2);
                v = r4d_dec_f16(h);
            }
            d[c] = r4d_enc_bf16(v);
        }
    }
    return RAD_OK;
}

/* ---- GEMM plans ------------------------------------------------------------------------------------ */

int64_t r4d_m_bucket(int64_t m) {
    if (m <= 1) return 1;
    if (m > R4D_M_BUCKET_MAX) return (m + R4D_M_BUCKET_MAX - 1) / R4D_M_BUCKET_MAX * R4D_M_BUCKET_MAX;
    int64_t b = 1;
    while (b < m) b <<= 1;
    return b;
}
int64_t r4d_slab_rows(int64_t n, int64_t k, size_t elem, size_t cap) {
    if (n < 1 || k < 1 || !elem) return 0;
    const int64_t up = (n + 127) / 128 * 128;
    int64_t rows = (int64_t)(cap / ((size_t)k * elem)) / 128 * 128;
    if (rows < 128) rows = 128;
    return rows < up ? rows : up;
}
uint64_t r4d_gemm_key_hash(const R4dGemmKey *k) {
    const int64_t v[7] = {k->m_bucket, k->n, k->k, k->a_type, k->b_type, k->c_type, k->compute};
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the fields' values, not the struct's padding */
    for (int i = 0; i < 7; i++)
        for (int b = 0; b < 8; b++) h = (h ^ (uint8_t)((uint64_t)v[i] >> (8 * b))) * 1099511628211ull;
    return h;
}
static int key_eq(const R4dGemmKey *a, const R4dGemmKey *b) {
    return a->m_bucket == b->m_bucket && a->n == b->n && a->k == b->k && a->a_type == b->a_type && a->b_type == b->b_type &&
           a->c_type == b->c_type && a->compute == b->compute;
}
void *r4d_plan_find(const R4dPlanCache *c, const R4dGemmKey *k) {
    uint64_t i = r4d_gemm_key_hash(k) % R4D_PLAN_CAP;
    for (int p = 0; p < R4D_PLAN_CAP; p++, i = (i + 1) % R4D_PLAN_CAP) {
        if (!c->used[i]) return NULL;
        if (key_eq(&c->key[i], k)) return c->val[i];
    }
    return NULL;
}
int r4d_plan_put(R4dPlanCache *c, const R4dGemmKey *k, void *v) {
    if (c->n >= R4D_PLAN_CAP * 3 / 4 || r4d_plan_find(c, k)) return -1; /* keep probes short */
    uint64_t i = r4d_gemm_key_hash(k) % R4D_PLAN_CAP;
    while (c->used[i]) i = (i + 1) % R4D_PLAN_CAP;
    c->key[i] = *k, c->val[i] = v, c->used[i] = 1, c->n++;
    return 0;
}

/* ---- graphs and the attention's plan ------------------------------------------------------------------ */

int r4d_graph_key(const RadBatch *b, uint32_t splits, R4dGraphKey *out) {
    memset(out, 0, sizeof *out);
    if (!b || b->phase != RAD_PHASE_DECODE || b->n_tok != b->n_seq || b->n_spec) return 0;
    out->phase = (int32_t)b->phase, out->n_tok = b->n_tok, out->n_seq = b->n_seq, out->n_out = b->n_out, out->splits = splits;
    return 1;
}
int r4d_graph_key_eq(const R4dGraphKey *a, const R4dGraphKey *b) {
    return a->phase == b->phase && a->n_tok == b->n_tok && a->n_seq == b->n_seq && a->n_out == b->n_out && a->splits == b->splits;
}
uint32_t r4d_attn_splits(uint32_t n_rows, uint32_t n_head_kv, uint32_t max_keys, uint32_t n_sm) {
    if (!n_rows || !n_head_kv || max_keys < 2 * R4D_SPLIT_MIN_KEYS) return 1;
    const uint64_t blocks = (uint64_t)n_rows * n_head_kv, want = 2ull * (n_sm ? n_sm : 132); /* two blocks per SM */
    if (blocks >= want) return 1;
    uint64_t s = (want + blocks - 1) / blocks;
    const uint64_t by_keys = max_keys / R4D_SPLIT_MIN_KEYS;
    if (s > by_keys) s = by_keys;
    if (s > R4D_SPLIT_MAX) s = R4D_SPLIT_MAX;
    return s < 1 ? 1 : (uint32_t)s;
}

/* ---- the step image ---------------------------------------------------------------------------------- */

static size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

uint32_t r4d_flash_rows(uint32_t G) { return G && G <= R4D_FLASH_SLOTS ? R4D_FLASH_SLOTS / G : 0; }

size_t r4d_step_image_bytes(const RadBatch *b, const RadKvState *kv, uint32_t tile_rows) {
    const size_t plan = tile_rows ? up16((size_t)b->n_tok * sizeof(R4dFlashTile)) + up16((size_t)b->n_tok * 4) : 0;
    return 3 * up16((size_t)b->n_tok * 4) + up16((size_t)b->n_seq * kv->max_blocks * 4) + plan;
}

int r4d_step_image_fill(const RadBatch *b, const RadKvState *kv, int64_t window, uint32_t tile_rows, void *buf, size_t bytes,
                        R4dStepImage *img) {
    if (!b || !kv || !buf || !b->cu_seqlens || !b->q_lens || !b->ctx_lens || !kv->block_table || !kv->block_size) return RAD_E_ARG;
    const size_t need = r4d_step_image_bytes(b, kv, tile_rows);
    if (bytes < need) return RAD_E_SHAPE;
    if (b->cu_seqlens[0] != 0 || (uint32_t)b->cu_seqlens[b->n_seq] != b->n_tok) return RAD_E_ARG;
    for (uint32_t s = 0; s < b->n_seq; s++) {
        const int32_t q = b->q_lens[s], ctx = b->ctx_lens[s];
        if (q < 0 || b->cu_seqlens[s + 1] - b->cu_seqlens[s] != q || ctx < q) return RAD_E_ARG;
        if (q && (uint64_t)(ctx - 1) / kv->block_size >= kv->max_blocks) return RAD_E_ARG;
        /* every entry a row of s reads: from the first row's window start to its last slot */
        const int64_t first = ctx - q;
        const int64_t lo = window > 0 ? (first + 1 - window > 0 ? first + 1 - window : 0) : 0;
        for (int64_t blk = lo / kv->block_size; q && blk <= (ctx - 1) / (int64_t)kv->block_size; blk++) {
            const int32_t id = kv->block_table[(size_t)s * kv->max_blocks + (size_t)blk];
            if (id < 0 || (uint32_t)id >= kv->n_blocks) return RAD_E_ARG;
        }
    }
    uint8_t *p = buf;
    img->row_seq = (int32_t *)(void *)p, p += up16((size_t)b->n_tok * 4);
    img->row_slot = (int32_t *)(void *)p, p += up16((size_t)b->n_tok * 4);
    img->row_lo = (int32_t *)(void *)p, p += up16((size_t)b->n_tok * 4);
    img->table = (int32_t *)(void *)p, p += up16((size_t)b->n_seq * kv->max_blocks * 4);
    img->tiles = NULL, img->rest = NULL, img->n_tiles = 0, img->n_rest = b->n_tok;
    img->n_tok = b->n_tok, img->n_seq = b->n_seq, img->max_blocks = kv->max_blocks, img->bytes = need;
    for (uint32_t s = 0; s < b->n_seq; s++)
        for (int32_t t = b->cu_seqlens[s]; t < b->cu_seqlens[s + 1]; t++) {
            const int32_t j = b->ctx_lens[s] - b->q_lens[s] + (t - b->cu_seqlens[s]);
            img->row_seq[t] = (int32_t)s, img->row_slot[t] = j;
            img->row_lo[t] = window > 0 && j + 1 - window > 0 ? (int32_t)(j + 1 - window) : 0;
        }
    memcpy(img->table, kv->block_table, (size_t)b->n_seq * kv->max_blocks * 4);
    if (tile_rows) { /* the prefill plan: a sequence's run of rows in tiles, or each row to split-K */
        img->tiles = (R4dFlashTile *)(void *)p, p += up16((size_t)b->n_tok * sizeof(R4dFlashTile));
        img->rest = (int32_t *)(void *)p;
        img->n_rest = 0;
        for (uint32_t s = 0; s < b->n_seq; s++) {
            const int32_t t0 = b->cu_seqlens[s], q = b->q_lens[s];
            if (q >= R4D_FLASH_MIN_Q) {
                for (int32_t r = 0; r < q; r += (int32_t)tile_rows)
                    img->tiles[img->n_tiles++] = (R4dFlashTile){(int32_t)s, t0 + r, q - r < (int32_t)tile_rows ? q - r : (int32_t)tile_rows, 0};
            } else {
                for (int32_t r = 0; r < q; r++) img->rest[img->n_rest++] = t0 + r;
            }
        }
    }
    return RAD_OK;
}

/* ---- rope ------------------------------------------------------------------------------------------------ */

int r4d_rope_cfg(const RadKernelArgs *a, R4dRope *c) {
    if (!r4d_pint(a, "n_head", &c->n_head) || !r4d_pint(a, "head_dim", &c->head_dim) || !r4d_pint(a, "n_rot", &c->n_rot) ||
        !r4d_pflt(a, "theta", &c->theta) || !r4d_pint(a, "scaling", &c->scaling) || !r4d_pflt(a, "factor", &c->factor) ||
        !r4d_pflt(a, "low_freq_factor", &c->low) || !r4d_pflt(a, "high_freq_factor", &c->high) ||
        !r4d_pint(a, "orig_ctx", &c->orig_ctx))
        return RAD_E_ARG;
    if (c->n_head < 1 || c->head_dim < 2 || c->n_rot < 2 || c->n_rot > c->head_dim || c->n_rot % 2 || !(c->theta > 0.0))
        return RAD_E_ARG;
    if (c->scaling < 0 || c->scaling > 2 || (c->scaling >= 1 && !(c->factor > 0.0))) return RAD_E_ARG;
    if (c->scaling == 2 && (!(c->low > 0.0) || !(c->high > c->low) || c->orig_ctx < 1)) return RAD_E_ARG;
    return RAD_OK;
}

void r4d_rope_table(const R4dRope *c, float *inv_out) {
    for (int64_t i = 0; i < c->n_rot / 2; i++)
        inv_out[i] = rad_rope_inv_freq(i, c->n_rot, c->theta, c->scaling, c->factor, c->low, c->high, c->orig_ctx);
}
