/* A test architecture whose one weight is a CONCAT of six checkpoint tensors (p0..p5, each
 * 1-D of 4 floats, stacked along a new row axis... here along axis 0 of 1-D tensors: 24 floats):
 * rad-convert must plan an entry with more than four sources (it once capped them at four and
 * reported the fifth as a missing tensor). It declares the weight and nothing else; a converted
 * container is not served. */
#define RAD_PLUGIN_NAME "concat_test" /* before the header: it picks the name */
#include <arch/rad_arch.h>

static int declare(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m, (void)c;
    static const char *const src[] = {"p0", "p1", "p2", "p3", "p4", "p5", NULL};
    RadNameMap e = {.kind = RAD_MAP_CONCAT, .dst = "w", .src = src, .axis = 0};
    int rc = rad_decl_name_map(b, &e);
    RadWeightDecl d = {.dtype = RAD_F32, .rank = 1, .shape = {24}, .access = RAD_ACCESS_PER_TOKEN};
    rad_decl_weight(b, "w", &d);
    return rc;
}
static void step(RadCtx *c, const struct RadBatch *bt) { (void)c, (void)bt; }
static const RadArchOps ops = {.declare = declare, .step = step};
RAD_ARCH_PLUGIN(ops, "concat_test", "", "0.0.1", "test: a CONCAT of six sources")
