/* What the core does with each declaration the contract names (../shared/spec/
 * architecture-plugins.md; docs/PLUGINS.md, "What the core serves"): it serves it, or refuses it
 * at open naming the plugin and the declaration; it never carries one and ignores it. The
 * plugin is tests/plugins/arch_decls.c (arch_textprep.c: the same, exporting text_prepare),
 * driven by $RAD_TEST_DECLS; its kernels are kern_test's. */
#include <criterion/criterion.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcommon/runtime/rad_engine_int.h" /* the persistent region, the per-op call counts */

#include "tests/test_util.h"
#include "tests/tiny_llama.h"

static char path[256], tp_path[256];

static void setup(void) {
    RadErr e = {0};
    snprintf(path, sizeof path, "/tmp/rad-decls-%d.rad", (int)getpid());
    snprintf(tp_path, sizeof tp_path, "/tmp/rad-textprep-%d.rad", (int)getpid());
    cr_assert_eq(tiny_arch_container(path, "decls_test", &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(tiny_arch_container(tp_path, "textprep_test", &e), RAD_OK, "%s", e.msg);
}
static void teardown(void) {
    unlink(path);
    unlink(tp_path);
    unsetenv("RAD_TEST_DECLS");
}
TestSuite(decls, .init = setup, .fini = teardown);

/* The engine on model under mode; RAD_OK or the open's status with e set. */
static int open_mode(const char *model, const char *mode, RadEngine **en, RadErr *e) {
    const char *b = getenv("RAD_BUILD");
    static char d1[256], d2[256];
    snprintf(d1, sizeof d1, "%s/test-plugins", b ? b : "build");
    snprintf(d2, sizeof d2, "%s/plugins", b ? b : "build");
    static const char *dirs[2] = {d1, d2};
    setenv("RAD_TEST_DECLS", mode, 1);
    RadEngineOpts o = {.model = model, .plugin_dirs = dirs, .n_plugin_dirs = 2, .kernels = "kern_test", .max_tok = 8,
                       .max_seqs = 1, .max_ctx = 16, .n_threads = 1, .profile = 1};
    *en = NULL;
    return rad_engine_open(en, &o, e);
}

static void refused(const char *model, const char *mode, const char *plugin, const char *what) {
    RadEngine *en;
    RadErr e = {0};
    cr_assert_neq(open_mode(model, mode, &en, &e), RAD_OK, "%s: the engine opened", mode);
    cr_assert_null(en);
    cr_assert(strstr(e.msg, plugin) && strstr(e.msg, what), "%s: the refusal does not name '%s' and '%s': %s", mode, plugin, what,
              e.msg);
    cr_assert_null(strchr(e.msg, '\n'), "%s: not one line: %s", mode, e.msg);
}

Test(decls, what_the_core_does_not_serve_is_refused_naming_the_plugin_and_the_declaration) {
    refused(path, "derived", "decls_test", "buffer 'conv_index' is DERIVED ('conv_state_index')");
    refused(path, "scores", "decls_test", "rad_declare_scores");
    refused(path, "encoder", "decls_test", "rad_declare_encoder");
    refused(path, "generator", "decls_test", "rad_declare_generator");
    refused(path, "capacity", "decls_test", "op 'decls_router' parameter 'slots' is a CAPACITY");
    refused(path, "stray-map", "decls_test", "name map 'w': a COPY entry sets perm/heads");
    refused(path, "planes-view", "weight 'w'", "planes 'scale': the tensor's planes are 'data'");
    refused(path, "act-bf16", "op 'add' (#0) reads buffer 'x' as bf16", "kern_test:generic takes f32 activations");
    refused(tp_path, "", "textprep_test", "rad_arch_text_prepare");
    /* and the plain program opens and steps, as it does with its weight's planes listed whole */
    for (int i = 0; i < 2; i++) {
        RadEngine *en;
        RadErr e = {0};
        cr_assert_eq(open_mode(path, i ? "planes-all" : "", &en, &e), RAD_OK, "%s", e.msg);
        const int32_t ids[3] = {1, 2, 3};
        cr_assert_eq(rad_engine_forward(en, 0, ids, 3, 0, 0, &e), RAD_OK, "%s", e.msg);
        rad_engine_close(en);
    }
}

Test(decls, an_issue_past_the_declared_range_fails_the_step_by_name) {
    RadEngine *en;
    RadErr e = {0};
    cr_assert_eq(open_mode(path, "overrange", &en, &e), RAD_OK, "%s", e.msg);
    const int32_t ids[3] = {1, 2, 3};
    cr_assert_neq(rad_engine_forward(en, 0, ids, 3, 0, 0, &e), RAD_OK, "an issue over 14 rows of a range ending at 8 ran");
    cr_assert(strstr(e.msg, "op 'add' (#0) issued over 14 rows, past the 8 its range declares"), "%s", e.msg);
    uint64_t calls = 0;
    for (uint64_t i = 0; i < en->prof_n; i++) calls += en->prof_calls[i];
    cr_assert_eq(calls, 0, "the kernel ran");
    rad_engine_close(en);
}

/* decls_chunked's rows are a sequence chunk (RAD_PROLE_SEQ_CHUNK) of at most 3 rows, and
 * kern_test's kernel for it takes at most 2: 7 tokens run as steps of 2, 2, 2 and 1. */
Test(decls, steps_are_cut_at_a_sequence_chunk) {
    RadEngine *en;
    RadErr e = {0};
    cr_assert_eq(open_mode(path, "chunk3", &en, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_engine_limits(en).max_tok, 2, "max_tok %u: the step was not cut at the chunk", rad_engine_limits(en).max_tok);
    const int32_t ids[7] = {1, 2, 3, 4, 5, 6, 7};
    cr_assert_eq(rad_engine_forward(en, 0, ids, 7, 0, 0, &e), RAD_OK, "%s", e.msg);
    uint64_t calls = 0;
    for (uint64_t i = 0; i < en->prof_n; i++) calls += en->prof_calls[i];
    cr_assert_eq(calls, 8, "%llu kernel calls: 7 tokens were not 4 steps of two ops", (unsigned long long)calls);
    char *dump = NULL; /* --debug-graph says so */
    size_t n = 0;
    FILE *f = open_memstream(&dump, &n);
    rad_engine_dump_graph(en, f);
    fclose(f);
    cr_assert(strstr(dump, "steps: at most 2 tokens, not 8"), "%s", dump);
    free(dump);
    rad_engine_close(en);
}

Test(decls, the_persistent_region_starts_zeroed) {
    mallopt(M_PERTURB, 0xa5); /* fresh allocations are not zero (ASan's are not either: it fills them) */
    RadEngine *en;
    RadErr e = {0};
    cr_assert_eq(open_mode(path, "persist", &en, &e), RAD_OK, "%s", e.msg);
    cr_assert_geq(en->g.persist_bytes, 4096);
    const uint8_t *p = en->persist;
    uint64_t nonzero = 0;
    for (uint64_t i = 0; i < en->g.persist_bytes; i++) nonzero += p[i] != 0;
    cr_assert_eq(nonzero, 0, "%llu bytes of the persistent region are not zero", (unsigned long long)nonzero);
    rad_engine_close(en);
}
