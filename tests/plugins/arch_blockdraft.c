/* A plugin whose probe says it drafts in trained blocks (draft_depth 3, draft_depth_fixed): the
 * core must refuse any other --spec-depth by name (arch_test). It declares nothing. */
#include <arch/rad_arch.h>

static int declare(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m, (void)c;
    return rad_declare_fail(b, "arch_blockdraft is a test plugin and declares nothing");
}
static void step(RadCtx *c, const struct RadBatch *bt) { (void)c, (void)bt; }
static int probe(const RadModelMeta *m, RadArchProbe *o) {
    uint32_t s = o->struct_size;
    (void)m;
    memset(o, 0, s < sizeof *o ? s : sizeof *o);
    o->struct_size = s;
    o->draft_depth = 3;
    o->draft_depth_fixed = 1;
    return 0;
}
static const RadArchOps ops = {.declare = declare, .step = step, .probe = probe};
RAD_ARCH_PLUGIN(ops, "blockdraft_test", "", "0.0.1", "test: a block drafter's probe (depth 3, fixed)")
