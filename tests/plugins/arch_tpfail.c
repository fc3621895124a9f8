/* A test architecture for tensor parallelism's failure paths (tests/runtime/stepfail_test.c):
 * each rank issues add, all_reduce, add. With RAD_TEST_TPFAIL=RANK that rank fails its step
 * before the all_reduce, which the other ranks are then waiting in: the engine must release
 * them and report that rank's reason (read at each step, so a test can fail one step and not
 * the next). With RAD_TEST_KVZERO=1 it declares a KV group empty on
 * its rank (rad_kv_group_zero), which the engine refuses by name. The rank is per declare
 * (rad_builder_set_model): ranks of one process share this .so's statics. */
#define RAD_PLUGIN_NAME "tpfail_test" /* before the header: it picks the name */
#include <arch/rad_arch.h>
#include <stdlib.h>

typedef struct TpModel {
    rad_op add, ar;
    rad_buf x;
    uint32_t rank;
} TpModel;

static int declare(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m;
    TpModel *t = rad_builder_alloc(b, sizeof *t);
    if (!t) return RAD_E_NOMEM;
    t->rank = c->rank;
    RadWeightDecl wd = {.dtype = RAD_F32, .rank = 1, .shape = {4}, .access = RAD_ACCESS_PER_TOKEN};
    rad_decl_weight(b, "w", &wd);
    RadBufDecl d = {.dtype = RAD_F32, .rank = 2, .shape = {c->max_tok, 4}, .kind = RAD_BUF_TRANSIENT};
    t->x = rad_decl_buffer(b, "x", &d);
    t->add = RAD_OP(b, "add", RAD_PARAMS(RAD_RANGE("M", 1, c->max_tok), RAD_INT("N", 4)), RAD_NO_WEIGHTS);
    rad_op_reads(b, t->add, RAD_BUFS(t->x), 1);
    rad_op_writes(b, t->add, RAD_BUFS(t->x), 1);
    t->ar = RAD_OP(b, "all_reduce", RAD_PARAMS(RAD_RANGE("M", 1, c->max_tok), RAD_INT("N", 4), RAD_INT("exact", 1)),
                   RAD_NO_WEIGHTS);
    rad_op_reads(b, t->ar, RAD_BUFS(t->x), 1);
    rad_op_writes(b, t->ar, RAD_BUFS(t->x), 1);
    const char *z = getenv("RAD_TEST_KVZERO");
    if (z && *z == '1') {
        RadKvDecl kd = {.kind = RAD_KV_FULL, .dtype = RAD_F32, .n_head_kv = 1, .head_dim = 4};
        rad_kv kv = rad_decl_kv_group(b, "kv", &kd);
        rad_bind_layer_kv(b, 0, kv);
        rad_kv_group_zero(b, kv);
    }
    return rad_builder_set_model(b, t);
}

static void step(RadCtx *c, const struct RadBatch *bt) {
    const TpModel *t = c->model;
    RadOperand x = brows(t->x, bt->n_tok);
    RAD_ISSUE(c, t->add, x, x, x);
    const char *f = getenv("RAD_TEST_TPFAIL");
    if (f && *f && (uint32_t)atoi(f) == t->rank) rad_step_fail(c, "tpfail_test: this rank failed on purpose");
    RAD_ISSUE(c, t->ar, x);
    RAD_ISSUE(c, t->add, x, x, x);
}
static const RadArchOps ops = {.declare = declare, .step = step};
RAD_ARCH_PLUGIN(ops, "tpfail_test", "", "0.0.1", "test: a rank fails its step before an all_reduce")
