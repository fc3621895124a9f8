/* arch_test: drives plugins' declare the way the core does (rad_graph_declare, the planner, the
 * selector's encoding check), pins the Llama plugin's graph at two sizes, and checks every
 * refusal of the loader and the builder. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/rad_builder.h"
#include "libcommon/rad_plugins.h"

static char build_dir[256];
static void setup(void) {
    const char *b = getenv("RAD_BUILD");
    snprintf(build_dir, sizeof build_dir, "%s", b ? b : "build");
}

__attribute__((unused)) static void load(RadPluginSet *s, const char *rel) {
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

/* Every weight present, stored as declared (f32 when the plugin takes any encoding). */
static RadEnc lookup_all(void *user, const char *name, const RadWeightDecl *d, const RadGMap *maps, int n_maps,
                         uint32_t *rank, uint64_t *shape) {
    (void)name, (void)maps, (void)n_maps;
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

/* No two transient buffers live at the same time share a byte. */
static void assert_plan_sound(const RadGraph *g) {
    for (int i = 0; i < g->n_bufs; i++)
        for (int j = i + 1; j < g->n_bufs; j++) {
            const RadGBuf *a = &g->bufs[i], *b = &g->bufs[j];
            if (a->d.kind != RAD_BUF_TRANSIENT || b->d.kind != RAD_BUF_TRANSIENT) continue;
            int live = a->first <= b->last && b->first <= a->last;
            cr_assert(!(live && overlap_bytes(a, b)), "%s [%d,%d] and %s [%d,%d] share bytes", a->name, a->first, a->last,
                      b->name, b->first, b->last);
        }
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
}
