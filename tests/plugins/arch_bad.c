/* An architecture plugin whose exports are wrong in the way $RAD_TEST_BADARCH names (unset or
 * unknown: "null-id"); "good" is a valid plugin for an architecture no model uses. */
#define RAD_PLUGIN_NAME "arch_bad"
#include <arch/rad_arch.h>
#include <stdint.h>
#include <stdlib.h>

static const char *mode(void) {
    const char *m = getenv("RAD_TEST_BADARCH");
    return m && *m ? m : "null-id";
}
static int is(const char *m) { return strcmp(mode(), m) == 0; }

static int declare(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    (void)m, (void)c;
    return rad_declare_fail(b, "arch_bad is a test plugin and declares nothing");
}
static void step(RadCtx *c, const struct RadBatch *bt) { (void)c, (void)bt; }

RAD_EXPORT const char *rad_arch_id(void) {
    return is("null-id") ? NULL : is("empty-id") ? "" : is("id-chars") ? "lla ma" : is("wild-id") ? (const char *)(uintptr_t)0x3000
                                                                                                     : "bad_family";
}
RAD_EXPORT const char *rad_arch_quant(void) { return is("null-quant") ? NULL : ""; }
RAD_EXPORT int rad_arch_serves_imports(void) { return is("imports") ? 7 : 0; }
RAD_EXPORT int rad_arch_declare(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) { return declare(b, m, c); }
RAD_EXPORT void rad_arch_step(RadCtx *c, const struct RadBatch *bt) { step(c, bt); }
RAD_EXPORT const RadPluginInfo *rad_plugin_info(void) {
    static const RadPluginInfo info = {sizeof(RadPluginInfo), RAD_PLUGIN_ARCH, RAD_ABI_MAJOR, RAD_ABI_MINOR, "arch_bad", "0.0.1",
                                       "test: a bad architecture plugin"};
    return &info;
}
