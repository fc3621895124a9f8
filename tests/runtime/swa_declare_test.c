/* The declare-time window check (docs/OPS.md, "The sliding window"): an attn_paged's `window`
 * (0 when the plugin omits it) must be the window of the KV group its layer is bound to; a
 * mismatch either way is refused naming the op, the layer and the group. In-process plugins,
 * no kernel libraries (the check does not depend on selection). */
#include <criterion/criterion.h>
#include <string.h>

#include "abi/rad_arch.h"
#include "libcommon/plugin/rad_graph.h"
#include "libcommon/plugin/rad_plugins.h"

static const RadPluginInfo info = {sizeof(RadPluginInfo), RAD_PLUGIN_ARCH, RAD_ABI_MAJOR, RAD_ABI_MINOR, "swa_intest", "0",
                                   "the window check"};
static const RadBuildCtx CTX = {.struct_size = sizeof(RadBuildCtx), .world_size = 1, .max_tok = 64, .max_seqs = 2,
                                .max_ctx = 256, .max_mixed_tok = 64, .kv_dtype = RAD_F32, .scope = ""};
static const RadModelMeta META = {.struct_size = sizeof(RadModelMeta), .arch_id = "swa_intest", .name = "", .quant = ""};

static RadEnc lookup_none(void *user, const char *name, const RadWeightDecl *d, const RadGMap *maps, int n_maps,
                          uint32_t *rank, uint64_t *shape) {
    (void)user, (void)name, (void)d, (void)maps, (void)n_maps, (void)rank, (void)shape;
    return RAD_ENC_COUNT;
}

/* One group (window g_group_window, 0: FULL) over layer 0, one attn_paged with window
 * g_op_window (< 0: the parameter left out). */
static int g_group_window, g_op_window;
static int decl(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m, (void)c;
    RadKvDecl kd = {.kind = g_group_window ? RAD_KV_WINDOW : RAD_KV_FULL, .dtype = RAD_F32, .n_head_kv = 2, .head_dim = 16,
                    .window = (uint32_t)g_group_window};
    rad_kv kv = rad_decl_kv_group(b, "kv", &kd);
    if (kv.id < 0 || rad_bind_layer_kv(b, 0, kv)) return -1;
    const RadParam p[] = {RAD_RANGE_ROLE("M", 1, 64, RAD_PROLE_SEQ_CHUNK), RAD_INT("n_head", 4), RAD_INT("n_head_kv", 2),
                          RAD_INT("head_dim", 16), RAD_INT("kv", kv.id), RAD_INT("layer", 0), RAD_FLOAT("scale", 0.25),
                          RAD_INT("prefill_fp8", 0), RAD_INT("window", g_op_window)};
    rad_op op = RAD_OP(b, "attn_paged", ((RadParamList){p, g_op_window < 0 ? 8u : 9u}), RAD_NO_WEIGHTS);
    return op.id < 0 ? -1 : 0;
}

static int declare(int group_window, int op_window, RadErr *e) {
    g_group_window = group_window, g_op_window = op_window;
    RadPlugin p;
    memset(&p, 0, sizeof p);
    p.info = &info;
    p.arch_id = "swa_intest";
    p.quant = "";
    p.declare = decl;
    RadGraph g;
    int rc = rad_graph_declare(&g, &p, &META, &CTX, NULL, lookup_none, NULL, e);
    rad_graph_free(&g);
    return rc;
}

Test(swa_declare, attn_window_must_be_its_groups) {
    RadErr e = {0};
    cr_assert_eq(declare(24, 24, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(declare(0, -1, &e), RAD_OK, "%s", e.msg); /* full attention, window omitted */
    cr_assert_eq(declare(0, 0, &e), RAD_OK, "%s", e.msg);
    cr_assert_neq(declare(24, -1, &e), RAD_OK, "a window group read by full attention was accepted");
    cr_assert(strstr(e.msg, "op 'attn_paged' (#0), layer 0: window 0 but its KV group 'kv' has window 24"), "%s", e.msg);
    rad_err_clear(&e);
    cr_assert_neq(declare(24, 16, &e), RAD_OK);
    cr_assert(strstr(e.msg, "window 16 but its KV group 'kv' has window 24"), "%s", e.msg);
    rad_err_clear(&e);
    cr_assert_neq(declare(0, 8, &e), RAD_OK);
    cr_assert(strstr(e.msg, "window 8 but its KV group 'kv' has window 0 (full attention)"), "%s", e.msg);
}
