/* A test architecture for what the core does with each declaration (tests/runtime/decls_test.c):
 * a valid one-op program (`add` over x) plus, by $RAD_TEST_DECLS, one declaration the core
 * must serve or refuse by name, never carry and ignore:
 *   derived, scores, encoder, generator, capacity  refused at open, named
 *   stray-map     a COPY name-map entry that sets ROWS' perm: refused at declare
 *   planes-view   the weight declared as a view of some planes: refused at open
 *   planes-all    the weight's planes listed whole ("data"): served
 *   act-bf16      x is bf16, and kern_test's add takes f32 activations: refused at open
 *   persist       a PERSIST buffer: the region starts zeroed
 *   chunk3        an op's rows are a sequence chunk of at most 3, its kernel's (kern_test's)
 *                 at most 2: steps are cut at 2
 *   overrange     the step issues add over more rows than its range declares: the step fails
 * arch_textprep.c builds it again, exporting rad_arch_text_prepare (refused at open). */
#include <arch/rad_arch.h>
#include <stdlib.h>
#include <string.h>

#ifndef DECLS_ID
#define DECLS_ID "decls_test"
#endif

static rad_op op_add, op_chunked = {-1};
static rad_buf buf_x;

static int is(const char *m) {
    const char *v = getenv("RAD_TEST_DECLS");
    return v && strcmp(v, m) == 0;
}

static int declare(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m;
    const char *const src[] = {"w", NULL};
    RadNameMap nm = {.kind = RAD_MAP_COPY, .dst = "w", .src = src};
    if (is("stray-map")) nm.perm = RAD_PERM_ROPE_UNINTERLEAVE, nm.heads = 1;
    rad_decl_name_map(b, &nm);
    RadWeightDecl wd = {.dtype = RAD_F32, .rank = 1, .shape = {4}, .access = RAD_ACCESS_PER_TOKEN};
    if (is("planes-all")) wd.planes = "data"; /* every plane: the whole weight */
    if (is("planes-view")) wd.planes = "scale"; /* a view of a plane the tensor does not have alone */
    rad_decl_weight(b, "w", &wd);
    RadBufDecl d = {.dtype = is("act-bf16") ? RAD_BF16 : RAD_F32, .rank = 2, .shape = {2 * c->max_tok, 4},
                    .kind = RAD_BUF_TRANSIENT};
    buf_x = rad_decl_buffer(b, "x", &d);
    if (is("derived")) {
        RadBufDecl dd = {.dtype = RAD_I32, .rank = 1, .shape = {c->max_tok}, .kind = RAD_BUF_DERIVED, .derive = "conv_state_index"};
        rad_decl_buffer(b, "conv_index", &dd);
    }
    if (is("persist")) {
        RadBufDecl pd = {.dtype = RAD_F32, .rank = 1, .shape = {1024}, .kind = RAD_BUF_PERSIST};
        rad_decl_buffer(b, "histogram", &pd);
    }
    op_add = RAD_OP(b, "add", RAD_PARAMS(RAD_RANGE("M", 1, c->max_tok), RAD_INT("N", 4)), RAD_NO_WEIGHTS);
    if (is("chunk3")) { /* an op outside the vocabulary fixes its own schema: its rows are a sequence chunk */
        op_chunked = RAD_OP(b, "decls_chunked", RAD_PARAMS(RAD_RANGE_ROLE("M", 1, 3, RAD_PROLE_SEQ_CHUNK), RAD_INT("N", 4)),
                            RAD_NO_WEIGHTS);
        rad_op_reads(b, op_chunked, RAD_BUFS(buf_x), 1);
        rad_op_writes(b, op_chunked, RAD_BUFS(buf_x), 1);
    }
    rad_op_reads(b, op_add, RAD_BUFS(buf_x), 1);
    rad_op_writes(b, op_add, RAD_BUFS(buf_x), 1);
    if (is("capacity")) {
        const RadParam slots = {"slots", RAD_PARAM_INT, RAD_PROLE_CAPACITY, 64, 64, 0.0};
        rad_op o = RAD_OP(b, "decls_router", RAD_PARAMS(RAD_RANGE("M", 1, c->max_tok), RAD_INT("N", 4), slots), RAD_NO_WEIGHTS);
        (void)o;
    }
    if (is("scores")) rad_declare_scores(b);
    if (is("encoder")) {
        RadEncoderDecl ed = {.struct_size = sizeof ed, .modality = "vision", .out = buf_x, .max_patches = 16};
        rad_declare_encoder(b, &ed);
    }
    if (is("generator")) {
        RadGeneratorDecl gd = {.struct_size = sizeof gd, .modality = "image", .out = buf_x};
        rad_declare_generator(b, &gd);
    }
    return 0;
}

static void step(RadCtx *c, const struct RadBatch *bt) {
    const uint32_t n = is("overrange") ? 2 * bt->n_tok + 8 : bt->n_tok;
    RadOperand x = brows(buf_x, n);
    RAD_ISSUE_N(c, op_add, n, x, x, x);
    if (op_chunked.id >= 0) RAD_ISSUE_N(c, op_chunked, n, x, x, x);
}

static const RadArchOps ops = {.declare = declare, .step = step};
RAD_ARCH_PLUGIN(ops, DECLS_ID, "", "0.0.1", "test: each declaration served or refused by name")
