/* ref_gemm.h — what ref_gemm.c (the "exact" variant), ref_gemm_q8.c (the "q8act" and "q8tile"
 * variants) and ref_gemm_tile.c share: the operand checks of gemm_nt / logits_gemm, the
 * quantised rows, and the tiled many-row path. */
#ifndef REF_GEMM_H
#define REF_GEMM_H

#include "ref_common.h"
#include "ref_quant.h"

typedef struct RefGemmArgs {
    const RadKArg *w, *x, *y;
    int64_t M, N, K;
} RefGemmArgs;

/* Parameters N, K and operands W [N, K] (an encoding of `encs`), x [M, K], y [M, N]: RAD_OK,
 * RAD_E_SHAPE or RAD_E_ARG (docs/OPS.md: gemm_nt). */
static inline int ref_gemm_args(const RadKernelArgs *a, uint64_t encs, RefGemmArgs *g) {
    int rc = ref_preamble(a, 3);
    if (rc) return rc;
    int64_t N, K;
    if (!ref_pint(a, "N", &N) || !ref_pint(a, "K", &K) || N < 1 || K < 1) return RAD_E_ARG;
    g->w = &a->args[0];
    g->x = &a->args[1];
    g->y = &a->args[2];
    g->M = a->n;
    g->N = N;
    g->K = K;
    if (!ref_weight_ok(g->w, encs, (uint64_t)N, (uint64_t)K)) return RAD_E_SHAPE;
    if (!ref_buf_ok(g->x, (uint64_t)g->M, (uint64_t)K) || !ref_buf_ok(g->y, (uint64_t)g->M, (uint64_t)N)) return RAD_E_SHAPE;
    return RAD_OK;
}

/* The portable dot of the exact GEMMs: eight lanes, lane l summing k ≡ l (mod 8) in ascending k
 * (a rounded product, then an add), acc += over [0, n); ref_red8 their tree. */
static inline void ref_dot8_acc(const float *x, const float *w, int64_t n, float acc[8]) {
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int l = 0; l < 8; l++) {
            const float p = x[k + l] * w[k + l];
            acc[l] = acc[l] + p;
        }
    for (int l = 0; k + l < n; l++) {
        const float p = x[k + l] * w[k + l];
        acc[l] = acc[l] + p;
    }
}
static inline float ref_red8(const float a[8]) {
    const float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
    const float t0 = s0 + s2, t1 = s1 + s3;
    return t0 + t1;
}

/* gemm_nt2 / gemm_nt3 (docs/OPS.md): parameters N0, N1[, N2], K; weights W_i [N_i, K], then
 * x [M, K], then y_i [M, N_i]; the parts' count is n_args / 2. Fills g[0 .. *n_parts). */
#define REF_GEMM_MAX_PARTS 3
static inline int ref_gemm_multi_args(const RadKernelArgs *a, uint64_t encs, RefGemmArgs *g, int *n_parts) {
    if (!a || (a->n_args != 5 && a->n_args != 7)) return RAD_E_SHAPE;
    int rc = ref_preamble(a, a->n_args);
    if (rc) return rc;
    static const char *const names[REF_GEMM_MAX_PARTS] = {"N0", "N1", "N2"};
    const int np = (int)(a->n_args / 2);
    int64_t K;
    if (!ref_pint(a, "K", &K) || K < 1) return RAD_E_ARG;
    for (int i = 0; i < np; i++) {
        int64_t N;
        if (!ref_pint(a, names[i], &N) || N < 1) return RAD_E_ARG;
        g[i].w = &a->args[i];
        g[i].x = &a->args[np];
        g[i].y = &a->args[np + 1 + i];
        g[i].M = a->n;
        g[i].N = N;
        g[i].K = K;
        if (!ref_weight_ok(g[i].w, encs, (uint64_t)N, (uint64_t)K)) return RAD_E_SHAPE;
        if (!ref_buf_ok(g[i].x, (uint64_t)g[i].M, (uint64_t)K) || !ref_buf_ok(g[i].y, (uint64_t)g[i].M, (uint64_t)N))
            return RAD_E_SHAPE;
    }
    *n_parts = np;
    return RAD_OK;
}

/* The parts of one multi-weight GEMM as one column space: the parts' columns in units of
 * `align` columns of one part (a part's last unit may be short). With the GEMM's own align, a
 * job part's boundaries fall where a one-weight split would put them, so every output is
 * computed as gemm_nt computes it; with align 1 a unit is a column. */
typedef struct RefGemmUnits {
    int n;                                  /* parts */
    int64_t N[REF_GEMM_MAX_PARTS];          /* columns of each part */
    int64_t u0[REF_GEMM_MAX_PARTS + 1];     /* first unit of each part; u0[n]: all units */
    int64_t align;
    int64_t cols;                           /* all parts' columns */
} RefGemmUnits;

static inline void ref_gemm_units_init(RefGemmUnits *u, const int64_t *N, int n, int64_t align) {
    u->n = n;
    u->align = align;
    u->u0[0] = 0;
    u->cols = 0;
    for (int i = 0; i < n; i++) {
        u->N[i] = N[i];
        u->u0[i + 1] = u->u0[i] + (N[i] + align - 1) / align;
        u->cols += N[i];
    }
}

typedef void (*ref_units_fn)(const void *ctx, int part, int64_t c0, int64_t c1);

/* Calls fn(ctx, part, c0, c1) for each part's columns within units [b, e). */
static inline void ref_gemm_units_each(const RefGemmUnits *u, int64_t b, int64_t e, ref_units_fn fn, const void *ctx) {
    for (int i = 0; i < u->n && b < e; i++) {
        const int64_t lo = b > u->u0[i] ? b : u->u0[i], hi = e < u->u0[i + 1] ? e : u->u0[i + 1];
        if (lo >= hi) continue;
        const int64_t c0 = (lo - u->u0[i]) * u->align, c1 = (hi - u->u0[i]) * u->align;
        fn(ctx, i, c0, c1 < u->N[i] ? c1 : u->N[i]);
    }
}

/* The same for job part tid of nth (the units split evenly). */
static inline void ref_gemm_units_run(const RefGemmUnits *u, int tid, int nth, ref_units_fn fn, const void *ctx) {
    int64_t b, e;
    ref_split(u->u0[u->n], tid, nth, 1, &b, &e);
    ref_gemm_units_each(u, b, e, fn, ctx);
}

/* One row of x quantised to 8 bits (ref_gemm_q8.c): codes q[K] (64-byte aligned), then per
 * 32-element block b the scale layouts the row's readers need (NULL: not in this row). */
typedef struct RefQRow {
    const int8_t *q;
    const float *ds;      /* 32-element weight formats: [2 * nb] pairs (d_b, d_b · Σq_b) */
    const float *d, *s;   /* K-quants: [nb] each */
    const int16_t *bsums; /* K-quants: [K / 16] Σq per 16 elements */
    const int32_t *isum;  /* the tiled path: [nb] Σq_b as an integer (offset codes' correction) */
} RefQRow;

/* The portable q4_k / q5_k dots' step for stored super-block b (q4_k: qh NULL, codes qs; q5_k:
 * the fifth bit of sub-block j from bit j of qh[l]; scales at w + 4): acc plus, per 32-element
 * sub-block j, d·dx_j·sc_j·Σ(code·q) − dmin·m_j·s_j, in this order of roundings (no FMA). The
 * portable q8act dots (ref_gemm_q8.c) and the packed q4_k layout's portable reader
 * (ref_gemm_x8k.c) are this, so their bits are equal by construction. */
static inline float ref_k4_block_dot(const uint8_t *w, const uint8_t *qh, const uint8_t *qs, const RefQRow *x, int64_t b, float acc) {
    uint8_t sc[8], mn[8];
    ref_scales_k4(w + 4, sc, mn);
    const int8_t *xq = x->q + 256 * b;
    const float d = ref_f16_f32(ref_rd16(w)), dmin = ref_f16_f32(ref_rd16(w + 2));
    float sp = 0.0f, sm = 0.0f;
    for (int j = 0; j < 8; j++) {
        int s = 0;
        for (int l = 0; l < 32; l++) {
            const int lo = j & 1 ? qs[32 * (j / 2) + l] >> 4 : qs[32 * (j / 2) + l] & 15;
            s += (qh ? lo | (((qh[l] >> j) & 1) << 4) : lo) * xq[32 * j + l];
        }
        const float p = x->d[8 * b + j] * (float)(sc[j] * s), pm = (float)mn[j] * x->s[8 * b + j];
        sp = sp + p;
        sm = sm + pm;
    }
    const float t = d * sp, tm = dmin * sm;
    acc = acc + t;
    acc = acc - tm;
    return acc;
}
static inline float ref_q4_k_block_dot(const uint8_t *w, const RefQRow *x, int64_t b, float acc) {
    return ref_k4_block_dot(w, NULL, w + 16, x, b, acc);
}
static inline float ref_q5_k_block_dot(const uint8_t *w, const RefQRow *x, int64_t b, float acc) {
    return ref_k4_block_dot(w, w + 16, w + 48, x, b, acc);
}

/* What a packed block (ref_gemm_x8.c: 8 rows' block) holds where, for encoding e (bb 0: e is
 * not packed). */
typedef struct RefX8Fmt {
    int bb;    /* stored bytes of one row's block (the packed block is 8 of them) */
    int qo;    /* stored: the code bytes */
    int ho;    /* stored: the fifth bits (q5), else -1 */
    int m;     /* has m (q4_1, q5_1): packed m[8] at 16 */
    int bo;    /* packed: the fifth-bit masks (q5), else -1 */
    int co;    /* packed: the code chunks */
    int nch;   /* code chunks: 4, q8_0 8 */
    int z;     /* the codes' offset: q4_0 8, q5_0 16, else 0 (q8_0's codes are signed) */
} RefX8Fmt;

static inline RefX8Fmt ref_x8_fmt(RadDType e) {
    RefX8Fmt f = {0, 0, -1, 0, -1, 16, 4, 0};
    switch ((int)e) {
    case RAD_Q4_0: f.bb = 18, f.qo = 2, f.z = 8; break;
    case RAD_Q4_1: f.bb = 20, f.qo = 4, f.m = 1, f.co = 32; break;
    case RAD_Q5_0: f.bb = 22, f.ho = 2, f.qo = 6, f.bo = 16, f.co = 48, f.z = 16; break;
    case RAD_Q5_1: f.bb = 24, f.ho = 4, f.qo = 8, f.m = 1, f.bo = 32, f.co = 64; break;
    case RAD_Q8_0: f.bb = 34, f.qo = 2, f.nch = 8; break;
    default: break;
    }
    return f;
}

/* The packed layouts (ref_gemm_x8.c; q4_0, q4_1, q5_0, q5_1, q8_0, e without RAD_PACKED; q4_k
 * goes on to ref_x8k_dot): one group of eight weight rows at wg against the rm quantised rows
 * x[0 .. rm) (their (d, s) pairs; q4_0 and q5_0 their integer sums too): out[8 r + j] for row j of
 * the group. pf (or NULL): the group's bytes are prefetched that far ahead as they are read. */
void ref_x8_dot(int isa, RadDType e, const uint8_t *wg, int rm, const RefQRow *x, int64_t K, float *out, const uint8_t *pf);

/* The packed q4_k layout (ref_gemm_x8k.c; "x8k": groups of 8 rows, K % 256 == 0): its bytes
 * (0: not packed there; below AVX-512 VNNI a state keeps q4_k stored), its pack, and one group
 * at wg against rm quantised rows (their d[], s[]): out[8 r + j], as ref_x8_dot. */
#define REF_X8K_SB (8 * 144) /* bytes of one group's super-block */
size_t ref_x8k_pack_size(void *state, RadDType enc, uint64_t rows, uint64_t cols);
int ref_x8k_pack(void *state, RadDType enc, uint64_t rows, uint64_t cols, const void *src, uint64_t src_row_stride, void *dst);
void ref_x8k_dot(int isa, const uint8_t *wg, int rm, const RefQRow *x, int64_t K, float *out, const uint8_t *pf);
#if REF_X86
/* A packed q4_k super-block's 96 scale bytes (at wg + 32) as 6-bit values: sc[8i + j], mn[8i + j]
 * are sub-block i's scale and min of row j (ref_scale_min_k4's, for eight rows at once). */
REF_AVX2 REF_INLINE void ref_x8k_scales(const uint8_t *s, uint8_t sc[64], uint8_t mn[64]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m6 = _mm256_set1_epi8(0x3f), m30 = _mm256_set1_epi8(0x30);
    const __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)s);        /* bytes 0-3: sc 0-3, top bits of sc 4-7 */
    const __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(s + 32)); /* bytes 4-7: mn 0-3, top bits of mn 4-7 */
    const __m256i c = _mm256_loadu_si256((const __m256i *)(const void *)(s + 64)); /* bytes 8-11: low bits of sc 4-7 | mn 4-7 */
    _mm256_storeu_si256((__m256i *)(void *)sc, _mm256_and_si256(a, m6));
    _mm256_storeu_si256((__m256i *)(void *)(sc + 32), _mm256_or_si256(_mm256_and_si256(c, m4), _mm256_and_si256(_mm256_srli_epi16(a, 2), m30)));
    _mm256_storeu_si256((__m256i *)(void *)mn, _mm256_and_si256(b, m6));
    _mm256_storeu_si256((__m256i *)(void *)(mn + 32),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4), _mm256_and_si256(_mm256_srli_epi16(b, 2), m30)));
}
#endif

/* The tiled many-row path (ref_gemm_tile.c): rows [0, M) of x (row(rows, i)) against weight
 * columns [c0, c1) of w (unpacked, one of REF_ENCS_Q8ACT), into y. Each output is the portable
 * q8act dot's, bit for bit. 0 when it cannot run here (no AVX-512 VNNI build, no scratch): the
 * caller computes those columns itself. */
typedef struct RefTileArgs {
    const RadKArg *w, *y;
    int64_t M, K;
    const void *rows;
    RefQRow (*row)(const void *rows, int64_t i);
} RefTileArgs;
int ref_tile_range(const RefTileArgs *g, int64_t c0, int64_t c1);

#endif
