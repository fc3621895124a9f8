/* arch_decls.c under another id, exporting rad_arch_text_prepare, which the server does not call:
 * the engine refuses the plugin at open (tests/runtime/decls_test.c). */
#define DECLS_ID "textprep_test"
#include "arch_decls.c"

RAD_EXPORT long rad_arch_text_prepare(const RadModelMeta *m, const char *in, char *out, size_t out_size) {
    (void)m;
    const size_t n = strlen(in);
    if (n + 1 > out_size) return -1;
    memcpy(out, in, n + 1);
    return (long)n;
}
