/* arch_test: drives plugins' declare the way the core does (rad_graph_declare, the planner, the
 * selector's encoding check), pins the Llama plugin's graph at two sizes, and checks every
 * refusal of the loader and the builder. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/plugin/rad_graph.h"
#include "libcommon/base/rad_dict.h"
#include "libcommon/plugin/rad_plugins.h"

static char build_dir[256];
static void setup(void) {
    const char *b = getenv("RAD_BUILD");
    snprintf(build_dir, sizeof build_dir, "%s", b ? b : "build");
}

static void load(RadPluginSet *s, const char *rel) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", build_dir, rel);
    RadErr e = {0};
    cr_assert_eq(rad_plugins_load_file(s, p, &e), RAD_OK, "%s", e.msg);
}

/* ---- an in-test plugin: the builder's rules without a .so ---------------------------------- */

typedef int (*DeclFn)(RadBuilder *, const RadModelMeta *, const RadBuildCtx *);
static RadPluginInfo test_info = {sizeof(RadPluginInfo), RAD_PLUGIN_ARCH, RAD_ABI_MAJOR, RAD_ABI_MINOR, "intest", "0", "in-test"};
static RadPlugin in_test(DeclFn d) {
    RadPlugin p;
    memset(&p, 0, sizeof p);
    p.info = &test_info;
    p.arch_id = "intest";
    p.quant = "";
    p.declare = d;
    return p;
}
static const RadBuildCtx CTX = {.struct_size = sizeof(RadBuildCtx), .world_size = 1, .max_tok = 64, .max_seqs = 8,
                                .max_ctx = 256, .max_mixed_tok = 64, .kv_dtype = RAD_F32, .scope = ""};
static const RadModelMeta META = {.struct_size = sizeof(RadModelMeta), .arch_id = "intest", .name = "", .quant = ""};

/* Every required weight present, stored as declared (RAD_ANY: as *user, else f32); optional
 * weights absent. */
static RadEnc lookup_all(void *user, const char *name, const RadWeightDecl *d, const RadGMap *maps, int n_maps,
                         uint32_t *rank, uint64_t *shape) {
    (void)name, (void)maps, (void)n_maps;
    if (d->optional) return RAD_ENC_COUNT;
    RadEnc any = user ? *(const RadEnc *)user : RAD_ENC_F32;
    *rank = d->rank;
    memcpy(shape, d->shape, d->rank * sizeof *shape);
    return d->dtype == RAD_ANY ? any : (RadEnc)d->dtype;
}

static RadBufDecl act(uint64_t rows, uint64_t cols) {
    return (RadBufDecl){.dtype = RAD_F32, .rank = 2, .shape = {rows, cols}, .kind = RAD_BUF_TRANSIENT};
}

/* Six ops in a chain a->b->c->d, a lane-1 window around ops 1..3 in which op 2 writes the
 * concurrent `side`; `early` and `late` are used only before and after the window. */
static int decl_lanes(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m;
    RadBufDecl d = act(c->max_tok, 128);
    rad_buf a = rad_decl_buffer(b, "a", &d), x = rad_decl_buffer(b, "b", &d), y = rad_decl_buffer(b, "c", &d),
            z = rad_decl_buffer(b, "d", &d), side = rad_decl_buffer(b, "side", &d), late = rad_decl_buffer(b, "late", &d),
            early = rad_decl_buffer(b, "early", &d);
    RadParamList p = RAD_PARAMS(RAD_RANGE("M", 1, c->max_tok), RAD_INT("N", 128));
    rad_op o0 = RAD_OP(b, "add", p, RAD_NO_WEIGHTS);
    rad_op_reads(b, o0, RAD_BUFS(early), 1);
    rad_op_writes(b, o0, RAD_BUFS(a), 1);
    rad_buf_concurrent(b, side);
    rad_lane1_window_begin(b);
    rad_op o1 = RAD_OP(b, "add", p, RAD_NO_WEIGHTS);
    rad_op_reads(b, o1, RAD_BUFS(a), 1);
    rad_op_writes(b, o1, RAD_BUFS(x), 1);
    rad_op o2 = RAD_OP(b, "add", p, RAD_NO_WEIGHTS);
    rad_op_reads(b, o2, RAD_BUFS(x), 1);
    rad_op_writes(b, o2, RAD_BUFS(side), 1);
    rad_op o3 = RAD_OP(b, "add", p, RAD_NO_WEIGHTS);
    rad_op_reads(b, o3, RAD_BUFS(x), 1);
    rad_op_writes(b, o3, RAD_BUFS(y), 1);
    rad_lane1_window_end(b);
    rad_op o4 = RAD_OP(b, "add", p, RAD_NO_WEIGHTS);
    rad_op_reads(b, o4, RAD_BUFS(y, side), 2);
    rad_op_writes(b, o4, RAD_BUFS(z), 1);
    rad_op o5 = RAD_OP(b, "add", p, RAD_NO_WEIGHTS);
    rad_op_reads(b, o5, RAD_BUFS(z), 1);
    rad_op_writes(b, o5, RAD_BUFS(late), 1);
    return 0;
}

static const RadGBuf *buf(const RadGraph *g, const char *n) {
    for (int i = 0; i < g->n_bufs; i++)
        if (strcmp(g->bufs[i].name, n) == 0) return &g->bufs[i];
    cr_assert_fail("no buffer %s", n);
    return NULL;
}

static int overlap_bytes(const RadGBuf *a, const RadGBuf *b) {
    return a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
}

/* The plan keeps every value intact, checked by running the program's accesses in order: a
 * buffer read (or the logits, read by the host after the step) must not have been overwritten
 * by a buffer sharing its bytes since its own last write, and no op reads one buffer while it
 * writes another over the same bytes. Independent of how the planner computes liveness. */
static void assert_plan_sound(const RadGraph *g) {
    int *last_write = malloc((size_t)g->n_bufs * sizeof *last_write);
    for (int i = 0; i < g->n_bufs; i++) last_write[i] = -1;
    for (int i = 0; i <= g->n_ops; i++) {
        const RadGOp *o = i < g->n_ops ? &g->ops[i] : NULL;
        uint32_t nr = o ? o->n_reads : (g->logits.id >= 0 ? 1 : 0);
        for (uint32_t r = 0; r < nr; r++) {
            int a = o ? o->reads[r].id : g->logits.id;
            const RadGBuf *A = &g->bufs[a];
            if (A->d.kind != RAD_BUF_TRANSIENT || last_write[a] < 0) continue;
            for (int c = 0; c < g->n_bufs; c++) {
                const RadGBuf *C = &g->bufs[c];
                if (c == a || C->d.kind != RAD_BUF_TRANSIENT || !overlap_bytes(A, C)) continue;
                cr_assert(last_write[c] < last_write[a], "op %d reads %s (written at op %d), but %s, sharing its bytes, was written "
                          "at op %d", i, A->name, last_write[a], C->name, last_write[c]);
                for (uint32_t w = 0; o && w < o->n_writes; w++)
                    cr_assert(o->writes[w].id != c, "op %d reads %s and writes %s over the same bytes", i, A->name, C->name);
            }
        }
        for (uint32_t w = 0; o && w < o->n_writes; w++) last_write[o->writes[w].id] = i;
    }
    free(last_write);
}

Test(builder, lane1_window_liveness, .init = setup) {
    RadPlugin p = in_test(decl_lanes);
    RadGraph g;
    RadErr e = {0};
    cr_assert_eq(rad_graph_declare(&g, &p, &META, &CTX, NULL, lookup_all, NULL, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_graph_plan(&g, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(g.lane1_begin, 1);
    cr_assert_eq(g.lane1_end, 3);
    cr_assert(g.ops[1].lane1 && g.ops[2].lane1 && g.ops[3].lane1 && !g.ops[0].lane1 && !g.ops[4].lane1);
    const RadGBuf *side = buf(&g, "side"), *early = buf(&g, "early"), *late = buf(&g, "late");
    /* side is touched from lane 1: live from the window's first op (1), not from its first use
     * (2), to its last read (4) */
    cr_assert_eq(side->first, 1);
    cr_assert_eq(side->last, 4);
    cr_assert(!overlap_bytes(side, buf(&g, "a")) && !overlap_bytes(side, buf(&g, "b")) && !overlap_bytes(side, buf(&g, "c")));
    /* used only outside the window, early (op 0) and late (op 5) reuse bytes of buffers live
     * at other times */
    cr_assert(early->first == 0 && early->last == 0 && late->first == 5 && late->last == 5);
    int early_shares = 0, late_shares = 0;
    for (int i = 0; i < g.n_bufs; i++) {
        if (&g.bufs[i] != early && g.bufs[i].first > 0 && overlap_bytes(early, &g.bufs[i])) early_shares = 1;
        if (&g.bufs[i] != late && g.bufs[i].last < 5 && overlap_bytes(late, &g.bufs[i])) late_shares = 1;
    }
    cr_assert(early_shares && late_shares, "buffers live at disjoint times should share bytes");
    assert_plan_sound(&g);
    cr_assert_lt(g.arena_bytes, g.naive_bytes);
    rad_graph_free(&g);
}

/* ---- the builder's refusals ----------------------------------------------------------------- */

static int decl_two_ranges(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m;
    RAD_OP(b, "add", RAD_PARAMS(RAD_RANGE("M", 1, c->max_tok), RAD_RANGE("N", 1, 8)), RAD_NO_WEIGHTS);
    return 0;
}
static int decl_weight_twice(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m, (void)c;
    RadWeightDecl d = {.dtype = RAD_F32, .rank = 1, .shape = {8}};
    rad_decl_weight(b, "w", &d);
    rad_decl_weight(b, "w", &d);
    return 0;
}
static int decl_narrowing(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m, (void)c;
    RadWeightDecl d = {.dtype = RAD_F16, .rank = 1, .shape = {8}, .source = "stored_as_f32"};
    rad_decl_weight(b, "w", &d);
    return 0;
}
static int decl_window_open(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m, (void)c;
    rad_lane1_window_begin(b);
    return 0;
}
static int decl_plugin_refuses(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m, (void)c;
    rad_declare_fail(b, "n_head_kv 5 does not divide n_head 9");
    return 1;
}
static int decl_add_on_rows(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m, (void)c;
    const char *const src[] = {"model.norm.weight", NULL};
    RadNameMap e = {.kind = RAD_MAP_ROWS, .dst = "output_norm.weight", .src = src, .add = 1.0f};
    return rad_decl_name_map(b, &e);
}
static int decl_add_nan(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m, (void)c;
    const char *const src[] = {"model.norm.weight", NULL};
    RadNameMap e = {.kind = RAD_MAP_COPY, .dst = "output_norm.weight", .src = src, .add = INFINITY};
    return rad_decl_name_map(b, &e);
}
static int decl_refine_unknown(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m, (void)c;
    RadDrafterDecl d = {.struct_size = sizeof d, .depth = 2};
    rad_declare_drafter(b, &d);
    return b->api->drafter_refine(b, 7); /* no refinement the ABI names */
}
static RadEnc lookup_f32(void *user, const char *name, const RadWeightDecl *d, const RadGMap *maps, int n_maps,
                         uint32_t *rank, uint64_t *shape) {
    (void)user, (void)name, (void)maps, (void)n_maps;
    *rank = d->rank;
    memcpy(shape, d->shape, d->rank * sizeof *shape);
    return RAD_ENC_F32;
}
static RadEnc lookup_none(void *user, const char *name, const RadWeightDecl *d, const RadGMap *maps, int n_maps,
                          uint32_t *rank, uint64_t *shape) {
    (void)user, (void)name, (void)d, (void)maps, (void)n_maps, (void)rank, (void)shape;
    return RAD_ENC_COUNT;
}
static RadEnc lookup_wrong_shape(void *user, const char *name, const RadWeightDecl *d, const RadGMap *maps, int n_maps,
                                 uint32_t *rank, uint64_t *shape) {
    (void)user, (void)name, (void)maps, (void)n_maps;
    *rank = 1;
    shape[0] = 9;
    return (RadEnc)d->dtype;
}

static void expect_refusal(DeclFn d, RadWeightLookup l, const char *needle) {
    RadPlugin p = in_test(d);
    RadGraph g;
    RadErr e = {0};
    cr_assert_neq(rad_graph_declare(&g, &p, &META, &CTX, NULL, l, NULL, &e), RAD_OK, "accepted (%s)", needle);
    cr_assert(strstr(e.msg, needle) != NULL, "'%s' not in: %s", needle, e.msg);
    cr_assert(strstr(e.msg, "intest") != NULL, "plugin not named: %s", e.msg);
    rad_graph_free(&g);
}

Test(builder, refusals_name_what_is_wrong, .init = setup) {
    expect_refusal(decl_two_ranges, lookup_all, "2 ranged parameters");
    expect_refusal(decl_weight_twice, lookup_all, "weight 'w' declared twice");
    expect_refusal(decl_narrowing, lookup_f32, "stored as f32, declared f16");
    expect_refusal(decl_weight_twice, lookup_none, "weight 'w': missing");
    expect_refusal(decl_weight_twice, lookup_wrong_shape, "shape mismatch: declared [8], stored [9]");
    expect_refusal(decl_window_open, lookup_all, "lane-1 window was never closed");
    expect_refusal(decl_plugin_refuses, lookup_all, "n_head_kv 5 does not divide n_head 9");
    expect_refusal(decl_add_on_rows, lookup_all, "name map 'output_norm.weight': add 1 needs a COPY entry");
    expect_refusal(decl_add_nan, lookup_all, "name map 'output_norm.weight': add inf needs a COPY entry and a finite value");
    expect_refusal(decl_refine_unknown, lookup_all, "drafter refinement 7 is none the ABI names");
}

/* ---- uneven tensor-parallel splits (rad_weight_shard_span / _parts) -------------------------
 * At world_size 2 a stacked [a|b] of 5 and 3 rows, and a plain weight of 7 stored rows: each
 * rank declares its own (divided) rows and asks which rows of the stored tensor are its. The
 * ranks' spans must tile each part and the whole with nothing dropped or shared (a part split
 * by integer division once lost its last row). */
typedef struct { uint64_t b, l; int rc; } Span;
static Span spans[2][3];  /* [rank][part 0, part 1, whole of the plain weight] */
static uint32_t shard_rank;
static const uint64_t PARTS[2] = {5, 3};
static int decl_uneven(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m;
    uint64_t mine = 0, base, len;
    for (int i = 0; i < 2; i++) base = PARTS[i] / 2, len = base + (c->rank < PARTS[i] % 2), mine += len;
    RadWeightDecl st = {.dtype = RAD_F32, .rank = 2, .shape = {mine, 4}, .shard = RAD_SHARD_ROW, .n_row_parts = 2,
                        .row_parts = PARTS};
    rad_weight w = rad_decl_weight(b, "stack", &st);
    RadWeightDecl pl = {.dtype = RAD_F32, .rank = 2, .shape = {c->rank == 0 ? 4 : 3, 4}, .shard = RAD_SHARD_ROW};
    rad_weight v = rad_decl_weight(b, "plain", &pl);
    for (uint32_t i = 0; i < 2; i++) {
        Span *s = &spans[c->rank][i];
        s->rc = rad_weight_shard_parts(b, w, i, &s->b, &s->l);
    }
    Span *s = &spans[c->rank][2];
    s->rc = rad_weight_shard_span(b, v, &s->b, &s->l);
    return 0;
}
/* Stored shapes are undivided: 8 rows of the stack, 7 of the plain weight. */
static RadEnc lookup_undivided(void *user, const char *name, const RadWeightDecl *d, const RadGMap *maps, int n_maps,
                               uint32_t *rank, uint64_t *shape) {
    (void)user, (void)maps, (void)n_maps;
    *rank = d->rank;
    memcpy(shape, d->shape, d->rank * sizeof *shape);
    shape[0] = strcmp(name, "stack") == 0 ? 8 : 7;
    return RAD_ENC_F32;
}

Test(builder, shard_spans_tile_uneven_splits, .init = setup) {
    RadPlugin p = in_test(decl_uneven);
    for (shard_rank = 0; shard_rank < 2; shard_rank++) {
        RadBuildCtx c = CTX;
        c.world_size = 2, c.rank = shard_rank;
        RadGraph g;
        RadErr e = {0};
        cr_assert_eq(rad_graph_declare(&g, &p, &META, &c, NULL, lookup_undivided, NULL, &e), RAD_OK, "rank %u: %s",
                     shard_rank, e.msg);
        rad_graph_free(&g);
    }
    const uint64_t start[3] = {0, 5, 0}, total[3] = {5, 3, 7};
    for (int i = 0; i < 3; i++) {
        const Span *a = &spans[0][i], *b = &spans[1][i];
        cr_assert(a->rc == RAD_OK && b->rc == RAD_OK, "part %d: rc %d, %d", i, a->rc, b->rc);
        cr_assert_eq(a->b, start[i], "part %d: rank 0 starts at %" PRIu64, i, a->b);
        cr_assert_eq(b->b, a->b + a->l, "part %d: rank 1 starts at %" PRIu64 ", rank 0 ends at %" PRIu64, i, b->b, a->b + a->l);
        cr_assert_eq(a->l + b->l, total[i], "part %d: the ranks own %" PRIu64 " of %" PRIu64 " rows", i, a->l + b->l, total[i]);
    }
    cr_assert_eq(spans[0][0].l + spans[0][1].l, 5, "rank 0 owns %" PRIu64 " stacked rows, declared 5",
                 spans[0][0].l + spans[0][1].l);
}

/* A rank that declares rows it does not own is refused naming the weight. */
static int decl_wrong_share(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m, (void)c;
    RadWeightDecl pl = {.dtype = RAD_F32, .rank = 2, .shape = {3, 4}, .shard = RAD_SHARD_ROW};
    rad_weight v = rad_decl_weight(b, "plain", &pl);
    uint64_t s, l;
    return rad_weight_shard_span(b, v, &s, &l) ? 1 : 0;
}
Test(builder, shard_span_refuses_a_share_it_does_not_own, .init = setup) {
    RadPlugin p = in_test(decl_wrong_share);
    RadBuildCtx c = CTX;
    c.world_size = 2, c.rank = 0; /* 7 stored rows: rank 0 owns [0, 4), not 3 */
    RadGraph g;
    RadErr e = {0};
    cr_assert_neq(rad_graph_declare(&g, &p, &META, &c, NULL, lookup_undivided, NULL, &e), RAD_OK, "accepted");
    cr_assert(strstr(e.msg, "weight 'plain': rank 0 of 2 owns rows [0, 4) of 7 but declares 3"), "%s", e.msg);
    rad_graph_free(&g);
}

/* ---- the metadata getters (abi/rad_meta.h) ------------------------------------------------ */

static const char *const MK[] = {"n", "f", "s", "yes", "no", "bad", "arr", "farr", "neg", "big", "frac", "inf", "sp", "empty"};
static const char *const MV[] = {"8192", "0.5", "text", "true", "0", "x1", "[1, 2, 3]", "0.5,2", "-1", "4294967296",
                                 "1.5", "inf", "7  ", "[]"};
static const RadModelMeta MM = {.struct_size = sizeof(RadModelMeta), .arch_id = "intest", .name = "", .quant = "",
                                .n_kv = 14, .kv_key = MK, .kv_val = MV};

Test(meta, typed_getters_take_defaults_and_report_malformed) {
    uint32_t u;
    float f;
    double d;
    int64_t i;
    bool t;
    const char *s;
    cr_assert(rad_meta_u32(&MM, "n", 7, &u) == 1 && u == 8192);
    cr_assert(rad_meta_u32(&MM, "absent", 7, &u) == 0 && u == 7);
    cr_assert(rad_meta_u32(&MM, "sp", 0, &u) == 1 && u == 7, "trailing spaces are allowed");
    const char *not_u32[] = {"neg", "big", "frac", "bad", "inf", "s", "arr"};
    for (size_t k = 0; k < sizeof not_u32 / sizeof *not_u32; k++) {
        cr_assert_eq(rad_meta_u32(&MM, not_u32[k], 7, &u), -1, "%s read as a u32", not_u32[k]);
        cr_assert_eq(u, 7, "%s: the default is not written", not_u32[k]);
    }
    cr_assert(rad_meta_f32(&MM, "f", 1, &f) == 1 && f == 0.5f);
    cr_assert(rad_meta_f32(&MM, "inf", 1, &f) == -1 && f == 1, "a float is finite");
    cr_assert(rad_meta_f32(&MM, "bad", 1, &f) == -1 && f == 1);
    cr_assert(rad_meta_f64(&MM, "frac", 0, &d) == 1 && d == 1.5);
    cr_assert(rad_meta_f64(&MM, "absent", 2.5, &d) == 0 && d == 2.5);
    cr_assert(rad_meta_i64(&MM, "neg", 0, &i) == 1 && i == -1);
    cr_assert(rad_meta_i64(&MM, "yes", 0, &i) == 1 && i == 1, "a flag reads as a count");
    cr_assert(rad_meta_i64(&MM, "frac", 3, &i) == -1 && i == 3);
    cr_assert(rad_meta_bool(&MM, "yes", false, &t) == 1 && t);
    cr_assert(rad_meta_bool(&MM, "no", true, &t) == 1 && !t);
    cr_assert(rad_meta_bool(&MM, "bad", true, &t) == -1 && t);
    cr_assert(rad_meta_bool(&MM, "absent", true, &t) == 0 && t);
    cr_assert(rad_meta_str(&MM, "s", "d", &s) == 1 && !strcmp(s, "text"));
    cr_assert(rad_meta_str(&MM, "absent", "d", &s) == 0 && !strcmp(s, "d"));
    /* arrays, with or without brackets; a short cap or a wrong element is malformed */
    uint32_t ua[4], n;
    float fa[4];
    cr_assert(rad_meta_u32s(&MM, "arr", ua, 4, &n) == 1 && n == 3 && ua[0] == 1 && ua[2] == 3);
    cr_assert(rad_meta_u32s(&MM, "arr", ua, 2, &n) == -1 && n == 0);
    cr_assert(rad_meta_f32s(&MM, "farr", fa, 4, &n) == 1 && n == 2 && fa[0] == 0.5f && fa[1] == 2);
    cr_assert(rad_meta_u32s(&MM, "farr", ua, 4, &n) == -1 && n == 0, "0.5 is not a u32");
    cr_assert(rad_meta_u32s(&MM, "n", ua, 4, &n) == 1 && n == 1 && ua[0] == 8192);
    cr_assert(rad_meta_u32s(&MM, "empty", ua, 4, &n) == 1 && n == 0);
    cr_assert(rad_meta_u32s(&MM, "bad", ua, 4, &n) == -1);
    cr_assert(rad_meta_u32s(&MM, "absent", ua, 4, &n) == 0 && n == 0);
    /* the table: every entry, and none from a producer built before it existed */
    const char *k, *v;
    cr_assert_eq(rad_meta_count(&MM), 14);
    cr_assert(rad_meta_entry(&MM, 13, &k, &v) && !strcmp(k, "empty") && !strcmp(v, "[]"));
    cr_assert(!rad_meta_entry(&MM, 14, &k, &v));
    RadModelMeta old = MM;
    old.struct_size = offsetof(RadModelMeta, n_kv);
    cr_assert(rad_meta_count(&old) == 0 && rad_meta_find(&old, "n") == NULL);
    cr_assert(rad_meta_count(NULL) == 0 && rad_meta_find(NULL, "n") == NULL);
}

/* The core's table (rad_meta_table_fill): scalars as text, short numeric arrays as "[a, b]" the
 * array getters read; token lists and string arrays stay out. */
Test(meta, the_core_writes_short_numeric_arrays_the_getters_read) {
    RadDict kv;
    RadErr e = {0};
    rad_dict_init(&kv);
    const uint32_t win[3] = {4096, 0, 4096};
    const float fr[2] = {0.25f, 1e-7f};
    const int32_t neg[2] = {-3, 5};
    static int32_t big[2000];
    const char *const toks[2] = {"a", "b"};
    cr_assert_eq(rad_dict_set_arr(&kv, "attention.window", RAD_VAL_U32, win, 3, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_dict_set_arr(&kv, "f", RAD_VAL_F32, fr, 2, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_dict_set_arr(&kv, "neg", RAD_VAL_I32, neg, 2, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_dict_set_arr(&kv, "tokenizer.token_type", RAD_VAL_I32, big, 2000, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_dict_set_strarr(&kv, "tokenizer.tokens", toks, 2, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_dict_set_u32(&kv, "n", 7, &e), RAD_OK, "%s", e.msg);
    const uint8_t slide[4] = {1, 0, 1, 1}; /* GGUF's per-layer flags (config.json's layer_types) */
    cr_assert_eq(rad_dict_set_arr(&kv, "attention.sliding_window_pattern", RAD_VAL_BOOL, slide, 4, &e), RAD_OK, "%s", e.msg);
    RadModelMeta m = {.struct_size = sizeof m};
    char **k = NULL, **v = NULL;
    cr_assert_eq(rad_meta_table_fill(&m, &kv, NULL, &k, &v, &e), RAD_OK, "%s", e.msg);
    uint32_t u[4], n;
    float f[2];
    cr_assert(rad_meta_u32s(&m, "attention.window", u, 4, &n) == 1 && n == 3 && u[0] == 4096 && u[1] == 0,
              "%s", rad_meta_find(&m, "attention.window"));
    cr_assert(rad_meta_f32s(&m, "f", f, 2, &n) == 1 && n == 2 && f[0] == 0.25f && f[1] == 1e-7f, "exact: %s",
              rad_meta_find(&m, "f"));
    cr_assert_str_eq(rad_meta_find(&m, "neg"), "[-3, 5]");
    cr_assert(rad_meta_u32s(&m, "neg", u, 4, &n) == -1, "-3 is not a u32");
    cr_assert_null(rad_meta_find(&m, "tokenizer.token_type"), "a long array stays in the container");
    cr_assert_null(rad_meta_find(&m, "tokenizer.tokens"), "a string array stays in the container");
    cr_assert_str_eq(rad_meta_find(&m, "n"), "7");
    cr_assert_str_eq(rad_meta_find(&m, "attention.sliding_window_pattern"), "[true, false, true, true]");
    cr_assert(rad_meta_u32s(&m, "attention.sliding_window_pattern", u, 4, &n) == 1 && n == 4 && u[0] == 1 && u[1] == 0 &&
              u[3] == 1, "booleans read as 1/0");
    cr_assert(rad_meta_u32s(&m, "attention.sliding_window_pattern", u, 3, &n) == -1 && n == 0, "longer than cap");
    cr_assert(rad_meta_f32s(&m, "attention.sliding_window_pattern", f, 2, &n) == -1, "booleans are not floats");
    cr_assert_eq(rad_meta_count(&m), 5);
    rad_meta_table_free(&m, k, v);
    rad_dict_free(&kv);
}

static int decl_need_missing(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    uint32_t v;
    (void)c;
    return rad_meta_need_u32(b, m, "attention.window", &v);
}
static int decl_need_malformed(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    float f;
    (void)c;
    return rad_meta_need_f32(b, m, "bad", &f);
}
static int decl_need_present(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    uint32_t v, a[3], n;
    bool t;
    (void)c;
    if (rad_meta_need_u32(b, m, "n", &v) || rad_meta_need_bool(b, m, "yes", &t) || rad_meta_need_u32s(b, m, "arr", a, 3, &n))
        return RAD_E_ARG;
    return v == 8192 && t && n == 3 ? 0 : RAD_E_ARG;
}

static void declare_mm(DeclFn fn, int want_ok, const char *needle) {
    RadPlugin p = in_test(fn);
    RadGraph g;
    RadErr e = {0};
    int rc = rad_graph_declare(&g, &p, &MM, &CTX, NULL, lookup_all, NULL, &e);
    if (want_ok) {
        cr_assert_eq(rc, RAD_OK, "%s", e.msg);
    } else {
        cr_assert_neq(rc, RAD_OK, "accepted (%s)", needle);
        cr_assert(strstr(e.msg, needle) && strstr(e.msg, "intest"), "'%s' not in: %s", needle, e.msg);
    }
    rad_graph_free(&g);
}

/* The spec's three names read the same table: 1 and the value, or 0 and *out untouched. */
Test(meta, the_spec_getters_gets_geti_getf, .init = setup) {
    const char *sv = "untouched";
    int64_t iv = -7;
    double fv = -7;
    cr_assert(rad_meta_gets(&MM, "s", &sv) == 1 && strcmp(sv, "text") == 0, "gets s: %s", sv);
    cr_assert(rad_meta_geti(&MM, "n", &iv) == 1 && iv == 8192, "geti n: %lld", (long long)iv);
    cr_assert(rad_meta_geti(&MM, "yes", &iv) == 1 && iv == 1, "geti yes: %lld", (long long)iv);
    cr_assert(rad_meta_getf(&MM, "f", &fv) == 1 && fv == 0.5, "getf f: %g", fv);
    iv = -7, fv = -7, sv = "untouched";
    cr_assert(rad_meta_geti(&MM, "bad", &iv) == 0 && iv == -7, "geti of 'x1' read %lld", (long long)iv);
    cr_assert(rad_meta_getf(&MM, "s", &fv) == 0 && fv == -7, "getf of 'text' read %g", fv);
    cr_assert(rad_meta_gets(&MM, "absent", &sv) == 0 && strcmp(sv, "untouched") == 0, "gets of an absent key");
}

Test(meta, required_keys_are_refused_through_the_builder_by_name, .init = setup) {
    declare_mm(decl_need_missing, 0, "metadata key attention.window is missing");
    declare_mm(decl_need_malformed, 0, "metadata key bad is 'x1', not a finite float");
    declare_mm(decl_need_present, 1, NULL);
}

/* ---- the loader's rules, with the real Llama plugins --------------------------------------- */

Test(loader, exact_match_imports_and_refusals, .init = setup) {
    RadPluginSet s = {0};
    load(&s, "plugins/arch_llama.so");
    load(&s, "plugins/arch_llama_ggml.so");
    const RadPlugin *p;
    RadErr e = {0};
    cr_assert_eq(rad_plugins_find_arch(&s, "llama", "", "native", &p, &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(p->info->name, "llama");
    cr_assert_eq(p->serves_imports, 0);
    cr_assert_eq(rad_plugins_find_arch(&s, "llama", "ggml", "native", &p, &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(p->info->name, "llama_ggml");
    /* an imported GGUF quantisation: the family's importing plugin */
    cr_assert_eq(rad_plugins_find_arch(&s, "llama", "q4_1", "import:gguf", &p, &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(p->info->name, "llama_ggml");
    /* the same descriptor made natively: exact match only, no fallback */
    cr_assert_eq(rad_plugins_find_arch(&s, "llama", "q4_1", "native", &p, &e), RAD_E_NOTFOUND);
    cr_assert(strstr(e.msg, "no plugin for ('llama', \"q4_1\")") && strstr(e.msg, "llama_ggml(llama, \"ggml\")"), "%s", e.msg);
    rad_err_clear(&e);
    cr_assert_eq(rad_plugins_find_arch(&s, "qwen9", "", "native", &p, &e), RAD_E_NOTFOUND);
    cr_assert(strstr(e.msg, "unknown architecture 'qwen9'; installed: llama(llama, \"\")") != NULL, "%s", e.msg);
    /* the same plugin twice: names must be unique */
    char path[512];
    snprintf(path, sizeof path, "%s/plugins/arch_llama.so", build_dir);
    rad_err_clear(&e);
    cr_assert_eq(rad_plugins_load_file(&s, path, &e), RAD_E_ARG);
    cr_assert(strstr(e.msg, "two plugins named 'llama'") != NULL, "%s", e.msg);
    /* a second plugin that serves imports: refused by name */
    load(&s, "test-plugins/arch_importer.so");
    rad_err_clear(&e);
    cr_assert_eq(rad_plugins_find_arch(&s, "llama", "q4_1", "import:gguf", &p, &e), RAD_E_ARG);
    cr_assert(strstr(e.msg, "'llama_ggml' and 'llama_awq_test'") != NULL, "%s", e.msg);
    /* but its own descriptor still matches exactly */
    cr_assert_eq(rad_plugins_find_arch(&s, "llama", "awq", "native", &p, &e), RAD_OK);
    rad_plugins_free(&s);
}

static RadModelMeta smollm2_meta(void) {
    return (RadModelMeta){.struct_size = sizeof(RadModelMeta), .arch_id = "llama", .name = "SmolLM2-135M", .quant = "",
                          .n_layers = 30, .n_embd = 576, .n_head = 9, .n_head_kv = 3, .head_dim = 64, .n_ff = 1536,
                          .n_vocab = 49152, .n_ctx_train = 8192, .rms_eps = 1e-5f, .rope_theta = 100000.0f};
}

static const char *const L3_KEYS[] = {"rope.scaling.type", "rope.scaling.factor", "rope.scaling.low_freq_factor",
                                      "rope.scaling.high_freq_factor", "rope.scaling.original_context_length",
                                      "model.tie_embeddings", "chat.kind"};
static const char *const L3_VALS[] = {"llama3", "8", "1", "4", "8192", "false", "llama3"};
static RadModelMeta llama3_8b_meta(void) {
    return (RadModelMeta){.struct_size = sizeof(RadModelMeta), .arch_id = "llama", .name = "Llama-3.1-8B", .quant = "",
                          .n_layers = 32, .n_embd = 4096, .n_head = 32, .n_head_kv = 8, .head_dim = 128, .n_ff = 14336,
                          .n_vocab = 128256, .n_ctx_train = 131072, .rms_eps = 1e-5f, .rope_theta = 500000.0f,
                          .n_kv = 7, .kv_key = L3_KEYS, .kv_val = L3_VALS};
}

Test(loader, probe_bits_refuse_flags_naming_the_plugin, .init = setup) {
    RadPluginSet s = {0};
    load(&s, "plugins/arch_llama.so");
    RadModelMeta m = smollm2_meta();
    RadArchProbe pr;
    RadErr e = {0};
    RadDeployFlags none = {0};
    cr_assert_eq(rad_plugin_check_flags(&s.p[0], &m, &none, &pr, &e), RAD_OK, "%s", e.msg);
    const RadDeployFlags flags[] = {{.kv_quant = RAD_KVQ_V4}, {.tp_attn_rows = 1}, {.state_f16 = 1}, {.kv_resident = 1}};
    const char *names[] = {"--kv-cache-dtype fp8_v4", "--tp-attn-split rows", "--state-cache-dtype f16", "--kv-resident"};
    for (int i = 0; i < 4; i++) {
        rad_err_clear(&e);
        cr_assert_eq(rad_plugin_check_flags(&s.p[0], &m, &flags[i], &pr, &e), RAD_E_ARG, "%s accepted", names[i]);
        cr_assert(strstr(e.msg, names[i]) && strstr(e.msg, "plugin 'llama'"), "%s", e.msg);
    }
    /* llama serves a control vector (arch/common/rad_cvec.h); a plugin without the probe bit
     * (the test importer has no probe: every bit 0) is refused by name */
    const RadDeployFlags cv = {.control_vector = 1};
    cr_assert_eq(rad_plugin_check_flags(&s.p[0], &m, &cv, &pr, &e), RAD_OK, "%s", e.msg);
    cr_assert(pr.control_vector_ok);
    load(&s, "test-plugins/arch_importer.so");
    rad_err_clear(&e);
    cr_assert_eq(rad_plugin_check_flags(&s.p[1], &m, &cv, &pr, &e), RAD_E_ARG, "--control-vector accepted by %s",
                 s.p[1].info->name);
    cr_assert(strstr(e.msg, "--control-vector: plugin 'llama_awq_test' does not serve it"), "%s", e.msg);
    rad_plugins_free(&s);
}

/* A block drafter's probe (draft_depth_fixed): its trained block is the only --spec-depth served;
 * without the bit (llama), any depth passes the probe check. */
Test(loader, a_block_drafters_depth_is_the_only_one_served, .init = setup) {
    RadPluginSet s = {0};
    load(&s, "test-plugins/arch_blockdraft.so");
    load(&s, "plugins/arch_llama.so");
    RadModelMeta m = smollm2_meta();
    RadArchProbe pr;
    RadErr e = {0};
    const RadDeployFlags own = {.spec_depth = 3}, other = {.spec_depth = 5}, none = {0};
    cr_assert_eq(rad_plugin_check_flags(&s.p[0], &m, &own, &pr, &e), RAD_OK, "%s", e.msg);
    cr_assert(pr.draft_depth == 3 && pr.draft_depth_fixed);
    cr_assert_eq(rad_plugin_check_flags(&s.p[0], &m, &none, &pr, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_plugin_check_flags(&s.p[0], &m, &other, &pr, &e), RAD_E_ARG, "--spec-depth 5 accepted");
    cr_assert(strstr(e.msg, "--spec-depth 5: plugin 'blockdraft_test'") && strstr(e.msg, "blocks of 3"), "%s", e.msg);
    rad_err_clear(&e);
    cr_assert_eq(rad_plugin_check_flags(&s.p[1], &m, &other, &pr, &e), RAD_OK, "%s", e.msg);
    rad_plugins_free(&s);
}

/* Declares the plugin at ctx, every weight present as declared (RAD_ANY stored as `any`). */
static int declare(const RadPlugin *p, const RadModelMeta *m, const RadBuildCtx *ctx, const RadPluginSet *libs, RadEnc any,
                   RadGraph *g, RadErr *e) {
    const RadSelectOpts sel = {.libs = libs}; /* the engine's defaults: max tolerance 1e-3, not deterministic */
    return rad_graph_declare(g, p, m, ctx, &sel, lookup_all, &any, e);
}

static void pin(const RadGraph *g, const char *golden) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    rad_graph_dump(g, f);
    fclose(f);
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/arch/%s", golden);
    if (getenv("RAD_UPDATE_GOLDEN")) { /* a reviewed change of the declared graph */
        FILE *o = fopen(path, "w");
        fwrite(buf, 1, n, o);
        fclose(o);
    }
    FILE *gf = fopen(path, "rb");
    cr_assert_not_null(gf, "%s missing (RAD_UPDATE_GOLDEN=1 writes it)", path);
    char *want = calloc(1, n + 2);
    size_t got = fread(want, 1, n + 1, gf);
    fclose(gf);
    if (got != n || memcmp(want, buf, n) != 0) {
        size_t i = 0;
        while (i < n && i < got && want[i] == buf[i]) i++;
        size_t ls = i;
        while (ls > 0 && buf[ls - 1] != '\n') ls--;
        cr_assert_fail("declared graph differs from %s at byte %zu: '%.120s'", path, i, buf + ls);
    }
    free(want);
    free(buf);
}

static const RadBuildCtx SERVE = {.struct_size = sizeof(RadBuildCtx), .world_size = 1, .max_tok = 512, .max_seqs = 16,
                                  .max_ctx = 8192, .max_mixed_tok = 512, .kv_dtype = RAD_BF16, .state_dtype = RAD_F32, .scope = ""};

Test(llama, smollm2_graph_pinned_and_planned, .init = setup) {
    RadPluginSet s = {0};
    load(&s, "plugins/arch_llama.so");
    RadModelMeta m = smollm2_meta();
    RadGraph g;
    RadErr e = {0};
    cr_assert_eq(declare(&s.p[0], &m, &SERVE, NULL, RAD_ENC_BF16, &g, &e), RAD_OK, "%s", e.msg);
    /* what the oracle's config implies: 30 layers x 9 weights + embedding, final norm, head */
    cr_assert_eq(g.n_w - (rad_graph_weight(&g, "rope_freqs.weight") >= 0), 3 + 9 * 30);
    cr_assert_eq(g.n_layer_kv, 30);
    cr_assert_eq(g.n_kvs, 1);
    cr_assert_eq(g.kvs[0].d.n_head_kv, 3);
    cr_assert_eq(g.kvs[0].d.head_dim, 64);
    int q = rad_graph_weight(&g, "blk.29.attn_q.weight"), k = rad_graph_weight(&g, "blk.29.attn_k.weight");
    cr_assert(q >= 0 && g.w[q].d.shape[0] == 576 && g.w[q].d.shape[1] == 576);
    cr_assert(k >= 0 && g.w[k].d.shape[0] == 192);
    /* the head is COPY from its own names only; absent here (no optional weight is stored), the
     * model is tied and logits_gemm reads the embedding itself: a tied head is stored once */
    const RadGMap *head = rad_graph_map_for(&g, "output.weight", 0);
    cr_assert(head && head->m.kind == RAD_MAP_COPY && head->n_src == 1 && !strcmp(head->m.src[0], "lm_head.weight"));
    int ow = rad_graph_weight(&g, "output.weight"), te = rad_graph_weight(&g, "tok_embd.weight"), tied = 0;
    cr_assert(ow >= 0 && te >= 0 && g.w[ow].d.optional && g.w[ow].enc == RAD_ENC_COUNT);
    for (int i = 0; i < g.n_ops; i++)
        if (!strcmp(g.ops[i].op, "logits_gemm")) tied = g.ops[i].n_w == 1 && g.ops[i].w[0].id == te;
    cr_assert(tied, "a tied head's logits_gemm reads tok_embd.weight");
    cr_assert(g.logits.id >= 0);
    cr_assert_eq(rad_graph_plan(&g, &e), RAD_OK, "%s", e.msg);
    assert_plan_sound(&g);
    /* live runs per layer: the MLP's scratch reuses the attention's bytes (10.6 of 16.3 MB) */
    cr_assert_lt(g.arena_bytes * 10, g.naive_bytes * 7, "arena %" PRIu64 " of %" PRIu64 " bytes", g.arena_bytes, g.naive_bytes);
    cr_assert(overlap_bytes(buf(&g, "mlp.gate"), buf(&g, "attn.q")) || overlap_bytes(buf(&g, "mlp.up"), buf(&g, "attn.q")) ||
              overlap_bytes(buf(&g, "mlp.act"), buf(&g, "attn.q")), "attention and MLP scratch share nothing");
    pin(&g, "llama-smollm2-135m.graph");
    rad_graph_free(&g);
    rad_plugins_free(&s);
}

Test(llama, llama3_8b_graph_pinned, .init = setup) {
    RadPluginSet s = {0};
    load(&s, "plugins/arch_llama.so");
    RadModelMeta m = llama3_8b_meta();
    RadGraph g;
    RadErr e = {0};
    cr_assert_eq(declare(&s.p[0], &m, &SERVE, NULL, RAD_ENC_BF16, &g, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(g.n_layer_kv, 32);
    cr_assert_eq(g.kvs[0].d.n_head_kv, 8);
    cr_assert_eq(g.kvs[0].d.head_dim, 128);
    int o = rad_graph_weight(&g, "output.weight");
    cr_assert(o >= 0 && g.w[o].d.shape[0] == 128256);
    int found_rope = 0;
    for (int i = 0; i < g.n_ops && !found_rope; i++)
        if (strcmp(g.ops[i].op, "rope") == 0)
            for (uint32_t j = 0; j < g.ops[i].n_params; j++)
                if (strcmp(g.ops[i].params[j].name, "scaling") == 0 && g.ops[i].params[j].lo == 2) found_rope = 1;
    cr_assert(found_rope, "llama3 rope scaling from metadata");
    cr_assert_eq(rad_graph_plan(&g, &e), RAD_OK, "%s", e.msg);
    assert_plan_sound(&g);
    pin(&g, "llama-3.1-8b.graph");
    rad_graph_free(&g);
    rad_plugins_free(&s);
}

/* A sizing declare at a smaller max_tok leaves the real declare's shapes alone. */
Test(llama, shape_probe_declare_then_real, .init = setup) {
    RadPluginSet s = {0};
    load(&s, "plugins/arch_llama.so");
    RadModelMeta m = smollm2_meta();
    RadArchProbe pr = {.struct_size = sizeof pr};
    cr_assert_eq(s.p[0].probe(&m, &pr), 0);
    cr_assert(pr.shape_probe_ok);
    RadBuildCtx probe = SERVE;
    probe.shape_probe = 1;
    probe.max_tok = 16;
    RadGraph gp, g;
    RadErr e = {0};
    cr_assert_eq(declare(&s.p[0], &m, &SERVE, NULL, RAD_ENC_BF16, &g, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(declare(&s.p[0], &m, &probe, NULL, RAD_ENC_BF16, &gp, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(gp.bufs[0].d.shape[0], 16);
    cr_assert_eq(g.bufs[0].d.shape[0], 512);
    cr_assert_eq(g.n_ops, gp.n_ops);
    rad_graph_free(&gp), rad_graph_free(&g);
    rad_plugins_free(&s);
}

/* The declare-time check: a q4_1 weight no loaded kernel accepts is named with its op. */
Test(llama, encoding_no_kernel_accepts_is_refused_by_name, .init = setup) {
    RadPluginSet s = {0};
    load(&s, "plugins/arch_llama_ggml.so");
    load(&s, "test-plugins/kern_test.so");
    RadModelMeta m = smollm2_meta();
    RadGraph g;
    RadErr e = {0};
    cr_assert_eq(declare(&s.p[0], &m, &SERVE, &s, RAD_ENC_Q4_1, &g, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_graph_check_encodings(&g, &e), RAD_E_UNSUPPORTED);
    cr_assert(strstr(e.msg, "is q4_1, which no kernel for op '") && strstr(e.msg, "kern_test"), "%s", e.msg);
    rad_graph_free(&g);
    /* the same model in f32 resolves every op it issues against kern_test */
    rad_err_clear(&e);
    cr_assert_eq(declare(&s.p[0], &m, &SERVE, &s, RAD_ENC_F32, &g, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_graph_check_encodings(&g, &e), RAD_OK, "%s", e.msg);
    int gemm = -1;
    for (int i = 0; i < g.n_ops && gemm < 0; i++)
        if (strcmp(g.ops[i].op, "gemm_nt") == 0) gemm = i;
    cr_assert(gemm >= 0 && g.ops[gemm].kernel != NULL && strcmp(g.ops[gemm].kernel_lib, "kern_test") == 0);
    cr_assert_eq(g.kvs[0].block_size, 16, "the KV block size comes from the attention kernel");
    rad_graph_free(&g);
    rad_plugins_free(&s);
}

/* The graph the engine plans with libref at its defaults (max tolerance 1e-3, not
 * deterministic): the fused forms selection resolves (add_rmsnorm, gemm_nt3 for q|k|v, gemm_nt2
 * for gate|up) and each op's kernel per bucket, beside the chain form above (no libraries).
 * rad_graph_declare resolves under the same options the engine passes, so this is what runs. */
Test(llama, smollm2_graph_with_libref_pinned_fused, .init = setup) {
    RadPluginSet s = {0};
    load(&s, "plugins/arch_llama.so");
    load(&s, "plugins/kern_ref.so");
    RadModelMeta m = smollm2_meta();
    RadGraph g, chain;
    RadErr e = {0};
    cr_assert_eq(declare(&s.p[0], &m, &SERVE, &s, RAD_ENC_BF16, &g, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(declare(&s.p[0], &m, &SERVE, NULL, RAD_ENC_BF16, &chain, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_graph_check_encodings(&g, &e), RAD_OK, "%s", e.msg);
    int fused_norm = 0, adds = 0, chain_adds = 0, nt3 = 0, nt2 = 0;
    for (int i = 0; i < g.n_ops; i++) {
        const RadGOp *o = &g.ops[i];
        cr_assert(o->declined || rad_select_served(&o->sel), "op %d %s: %s", i, o->op, o->sel.why);
        if (o->declined) continue;
        fused_norm += !strcmp(o->op, "add_rmsnorm"), adds += !strcmp(o->op, "add");
        nt3 += !strcmp(o->op, "gemm_nt3"), nt2 += !strcmp(o->op, "gemm_nt2");
    }
    for (int i = 0; i < chain.n_ops; i++) chain_adds += !strcmp(chain.ops[i].op, "add");
    /* every residual add but none is settled by the next norm: 2 per layer, the first norm plain */
    cr_assert_eq(fused_norm, 2 * 30, "fused norms");
    cr_assert_eq(adds, 0);
    cr_assert_eq(chain_adds, 2 * 30, "the chain form settles each add with add + rmsnorm");
    cr_assert(nt3 == 30 && nt2 == 30, "gemm_nt3 %d, gemm_nt2 %d", nt3, nt2);
    cr_assert_eq(g.kvs[0].block_size, 16, "libref's attn_paged asks 16-token blocks");
    cr_assert_eq(rad_graph_plan(&g, &e), RAD_OK, "%s", e.msg);
    assert_plan_sound(&g);
    pin(&g, "llama-smollm2-135m-libref.graph");
    rad_graph_free(&g), rad_graph_free(&chain);
    rad_plugins_free(&s);
}

/* SmolLM2's rows for a control vector: layers 3 and 29 steered, row 0 set too (never added:
 * llama.cpp steers from layer 1), every other row zero (unsteered: nothing declared). */
static float cvec_rows[30][576];
static RadControlVector smollm2_cvec(void) {
    memset(cvec_rows, 0, sizeof cvec_rows);
    for (int j = 0; j < 576; j++) cvec_rows[0][j] = cvec_rows[3][j] = cvec_rows[29][j] = 0.25f;
    return (RadControlVector){.n_layers = 30, .n_embd = 576, .dirs = &cvec_rows[0][0], .scale = 1.0f};
}

/* --control-vector (RadBuildCtx::cvec): after each steered layer the pending MLP output is
 * settled (add x += y) and add_bias adds the core's weight cvec.direction.L (f32 [576]) to x, so
 * the next norm is a plain rmsnorm; nothing for unsteered layers or layer 0. */
Test(llama, control_vector_adds_after_each_steered_layer, .init = setup) {
    RadPluginSet s = {0};
    load(&s, "plugins/arch_llama_ggml.so");
    load(&s, "plugins/kern_ref.so");
    RadModelMeta m = smollm2_meta();
    RadControlVector cv = smollm2_cvec();
    RadBuildCtx ctx = SERVE;
    ctx.cvec = &cv;
    RadGraph g;
    RadErr e = {0};
    cr_assert_eq(declare(&s.p[0], &m, &ctx, &s, RAD_ENC_Q4_1, &g, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_graph_check_encodings(&g, &e), RAD_OK, "%s", e.msg);
    int biases = 0, fused = 0, adds = 0, seen[30] = {0};
    for (int i = 0; i < g.n_ops; i++) {
        const RadGOp *o = &g.ops[i];
        if (o->declined) continue;
        fused += !strcmp(o->op, "add_rmsnorm"), adds += !strcmp(o->op, "add");
        if (strcmp(o->op, "add_bias")) continue;
        biases++;
        cr_assert_eq(o->n_w, 1);
        const RadGWeight *w = &g.w[o->w[0].id];
        unsigned l;
        cr_assert(sscanf(w->name, "cvec.direction.%u", &l) == 1 && l < 30, "add_bias reads '%s'", w->name);
        seen[l] = 1;
        cr_assert(w->d.dtype == RAD_F32 && w->d.rank == 1 && w->d.shape[0] == 576 && w->enc == RAD_ENC_F32);
        cr_assert(i > 0 && !strcmp(g.ops[i - 1].op, "add"), "layer %u: add_bias is not after the settling add", l);
    }
    cr_assert_eq(biases, 2);
    cr_assert(seen[3] && seen[29] && !seen[0], "steered layers: 3 and 29 only");
    cr_assert_eq(adds, 2, "one settling add per steered layer");
    cr_assert_eq(fused, 2 * 30 - 2, "the norm after each steered layer is plain");
    cr_assert_eq(rad_graph_plan(&g, &e), RAD_OK, "%s", e.msg);
    assert_plan_sound(&g);
    rad_graph_free(&g);
    /* without a vector: the graph as ever, no add_bias */
    cr_assert_eq(declare(&s.p[0], &m, &SERVE, &s, RAD_ENC_Q4_1, &g, &e), RAD_OK, "%s", e.msg);
    for (int i = 0; i < g.n_ops; i++) cr_assert(strcmp(g.ops[i].op, "add_bias"), "op %d is an add_bias", i);
    rad_graph_free(&g);
    rad_plugins_free(&s);
}

/* A vector of another model's shape is refused at declare, naming the plugin and the field
 * (the core's loader checks the file first; this is the plugin's own guard). */
Test(llama, control_vector_of_another_shape_refused_naming_the_field, .init = setup) {
    RadPluginSet s = {0};
    load(&s, "plugins/arch_llama.so");
    load(&s, "plugins/arch_gemma3.so");
    RadModelMeta m = smollm2_meta();
    RadControlVector cv = smollm2_cvec();
    RadBuildCtx ctx = SERVE;
    ctx.cvec = &cv;
    static const struct { uint32_t n_layers, n_embd; const char *want; } bad[] = {
        {30, 575, "RadBuildCtx.cvec.n_embd 575 is not model.n_embd 576"},
        {29, 576, "RadBuildCtx.cvec.n_layers 29 is not model.n_layers 30"}};
    for (int p = 0; p < 2; p++)
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            cv.n_layers = bad[i].n_layers, cv.n_embd = bad[i].n_embd;
            RadGraph g;
            RadErr e = {0};
            cr_assert_neq(declare(&s.p[p], &m, &ctx, NULL, RAD_ENC_F32, &g, &e), RAD_OK, "%s declared", bad[i].want);
            cr_assert(strstr(e.msg, s.p[p].info->name) && strstr(e.msg, bad[i].want), "%s", e.msg);
            cr_assert_null(strchr(e.msg, '\n'), "not one line: %s", e.msg);
            rad_graph_free(&g);
        }
    rad_plugins_free(&s);
}

/* Qwen3-0.6B's shape under the qwen3 plugin (28 layers, 1024 wide, 16:8 heads of head_dim 128,
 * which is not 1024/16, tied): per layer the nine Llama weights plus the q/k norm gammas
 * [head_dim], and a head_rmsnorm on q (16 heads) and on k (8) between the q/k/v GEMMs and the
 * ropes; the graph pinned as the Llama ones are. */
Test(llama, qwen3_06b_graph_pinned, .init = setup) {
    RadPluginSet s = {0};
    load(&s, "plugins/arch_qwen3.so");
    RadModelMeta m = {.struct_size = sizeof(RadModelMeta), .arch_id = "qwen3", .name = "Qwen3-0.6B", .quant = "",
                      .n_layers = 28, .n_embd = 1024, .n_head = 16, .n_head_kv = 8, .head_dim = 128, .n_ff = 3072,
                      .n_vocab = 151936, .n_ctx_train = 40960, .rms_eps = 1e-6f, .rope_theta = 1000000.0f};
    RadGraph g;
    RadErr e = {0};
    cr_assert_eq(declare(&s.p[0], &m, &SERVE, NULL, RAD_ENC_BF16, &g, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(g.n_w - (rad_graph_weight(&g, "rope_freqs.weight") >= 0), 3 + 11 * 28);
    cr_assert_eq(g.kvs[0].d.head_dim, 128);
    int qn = rad_graph_weight(&g, "blk.27.attn_q_norm.weight"), q = rad_graph_weight(&g, "blk.27.attn_q.weight");
    cr_assert(qn >= 0 && g.w[qn].d.rank == 1 && g.w[qn].d.shape[0] == 128);
    cr_assert(q >= 0 && g.w[q].d.shape[0] == 2048 && g.w[q].d.shape[1] == 1024);
    int norms = 0, heads_q = 0, heads_k = 0;
    for (int i = 0; i < g.n_ops; i++) {
        if (strcmp(g.ops[i].op, "head_rmsnorm") != 0) continue;
        norms++;
        for (uint32_t j = 0; j < g.ops[i].n_params; j++)
            if (!strcmp(g.ops[i].params[j].name, "n_head")) heads_q += g.ops[i].params[j].lo == 16, heads_k += g.ops[i].params[j].lo == 8;
        cr_assert(!strcmp(g.ops[i - 1].op, "head_rmsnorm") || !strncmp(g.ops[i - 1].op, "gemm_nt", 7), "op %d before a q/k norm: %s", i - 1,
                  g.ops[i - 1].op);
        cr_assert(!strcmp(g.ops[i + 1].op, "head_rmsnorm") || !strcmp(g.ops[i + 1].op, "rope"), "op %d after a q/k norm: %s", i + 1,
                  g.ops[i + 1].op);
    }
    cr_assert_eq(norms, 56);
    cr_assert_eq(heads_q, 28);
    cr_assert_eq(heads_k, 28);
    cr_assert_eq(rad_graph_plan(&g, &e), RAD_OK, "%s", e.msg);
    assert_plan_sound(&g);
    pin(&g, "qwen3-0.6b.graph");
    rad_graph_free(&g);
    rad_plugins_free(&s);
}
