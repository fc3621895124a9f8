/* A test architecture whose step fails on purpose between two issues of one `add` op: the
 * engine must run the first, record the failure, and run nothing after it in the same step
 * (rad_step_fail sets the status every later issue returns). */
#define RAD_PLUGIN_NAME "stepfail_test" /* before the header: it picks the name */
#include <arch/rad_arch.h>

static rad_op op_add;
static rad_buf buf_x;

static int declare(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m;
    RadWeightDecl wd = {.dtype = RAD_F32, .rank = 1, .shape = {4}, .access = RAD_ACCESS_PER_TOKEN};
    rad_decl_weight(b, "w", &wd);
    RadBufDecl d = {.dtype = RAD_F32, .rank = 2, .shape = {c->max_tok, 4}, .kind = RAD_BUF_TRANSIENT};
    buf_x = rad_decl_buffer(b, "x", &d);
    op_add = RAD_OP(b, "add", RAD_PARAMS(RAD_RANGE("M", 1, c->max_tok), RAD_INT("N", 4)), RAD_NO_WEIGHTS);
    rad_op_reads(b, op_add, RAD_BUFS(buf_x), 1);
    rad_op_writes(b, op_add, RAD_BUFS(buf_x), 1);
    return 0;
}

static void step(RadCtx *c, const struct RadBatch *bt) {
    RadOperand x = brows(buf_x, bt->n_tok);
    RAD_ISSUE(c, op_add, x, x, x);
    rad_step_fail(c, "stepfail_test: failed on purpose");
    RAD_ISSUE(c, op_add, x, x, x); /* must not run */
}
static const RadArchOps ops = {.declare = declare, .step = step};
RAD_ARCH_PLUGIN(ops, "stepfail_test", "", "0.0.1", "test: fails its step between two issues")
