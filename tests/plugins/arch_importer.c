/* A second quantised Llama plugin that serves imports: with llama_ggml installed too, the core
 * must refuse to choose between them (arch_test). It declares nothing. */
#define RAD_PLUGIN_NAME "llama_awq_test" /* before the header: it picks the name */
#include <arch/rad_arch.h>

static int declare(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m, (void)c;
    return rad_declare_fail(b, "arch_importer is a test plugin and declares nothing");
}
static void step(RadCtx *c, const struct RadBatch *bt) { (void)c, (void)bt; }
static const RadArchOps ops = {.declare = declare, .step = step, .serves_imports = 1};
RAD_ARCH_PLUGIN(ops, "llama", "awq", "0.0.1", "test: a second importing Llama plugin")
