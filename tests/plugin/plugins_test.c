/* The plugin loader against bad plugins (tests/plugins/kern_bad.c, arch_bad.c,
 * kern_bad_noexport.c, and files that are no shared object at all): each is refused naming the
 * file and the field, the good ones beside it still load, RADIANCE_PLUGINS_STRICT=1 makes a
 * refusal an error, and the lists users give (--kernels, the plugin path) are checked. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libcommon/plugin/rad_plugins.h"

static char dir[256];

static const char *bdir(void) {
    const char *b = getenv("RAD_BUILD");
    return b && *b ? b : "build";
}

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/rad-plugins-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    unsetenv("RADIANCE_PLUGINS_STRICT");
    unsetenv("RADIANCE_PLUGIN_PATH");
}

static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(plugins, .init = setup, .fini = teardown);

/* Copies a built plugin into the temp dir (a new inode, so dlopen loads it afresh). */
static void put(const char *from_rel, const char *to_name) {
    char src[512], dst[512];
    snprintf(src, sizeof src, "%s/%s", bdir(), from_rel);
    snprintf(dst, sizeof dst, "%s/%s", dir, to_name);
    int in = open(src, O_RDONLY);
    cr_assert_geq(in, 0, "%s: %s (make test-unit builds it)", src, strerror(errno));
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    cr_assert_geq(out, 0, "%s: %s", dst, strerror(errno));
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0) cr_assert_eq(write(out, buf, (size_t)n), n);
    close(in);
    close(out);
}

static void put_text(const char *name, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

/* Loads one file with $var=mode and expects a one-line refusal naming the file and `want`. */
static void refused(const char *so, const char *var, const char *mode, const char *want) {
    char name[128], path[512];
    snprintf(name, sizeof name, "%s_%s.so", so, mode);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char rel[128];
    snprintf(rel, sizeof rel, "test-plugins/%s.so", so);
    put(rel, name);
    setenv(var, mode, 1);
    RadPluginSet s = {0};
    RadErr e = {0};
    cr_assert_neq(rad_plugins_load_file(&s, path, &e), RAD_OK, "%s=%s: loaded", var, mode);
    cr_assert_eq(s.n, 0);
    cr_assert(strstr(e.msg, path) != NULL, "%s=%s: the message does not name the file: %s", var, mode, e.msg);
    cr_assert(strstr(e.msg, want) != NULL, "%s=%s: want '%s' in: %s", var, mode, want, e.msg);
    cr_assert(!strchr(e.msg, '\n'), "%s=%s: not one line: %s", var, mode, e.msg);
    rad_plugins_free(&s);
}

Test(plugins, a_bad_kernel_table_is_refused_naming_the_field) {
    static const char *const cases[][2] = {
        {"null-table", "RadKernelLib.kernels is NULL with n_kernels 3"},
        {"huge-count", "RadKernelLib.n_kernels 4294967295 is over the limit"},
        {"lib-size-small", "RadKernelLib.struct_size 8 is smaller"},
        {"lib-size-big", "RadKernelLib.struct_size 4096 is larger"},
        {"kernel-size", "kernel 0: RadKernel.struct_size 4 is not a size"},
        {"kernel-size-mixed", "kernel 1: RadKernel.struct_size 8 differs"},
        {"wild-table", "RadKernelLib.kernels points at unmapped memory"},
        {"misaligned", "RadKernelLib.kernels is misaligned"},
        {"op-null", "kernel 1: RadKernel.op is NULL"},
        {"op-wild", "kernel 1: RadKernel.op points at unmapped memory"},
        {"op-long", "kernel 1: RadKernel.op is not NUL-terminated within 63 bytes"},
        {"op-chars", "kernel 1: RadKernel.op has a disallowed byte 0x20"},
        {"variant-colon", "kernel 2: RadKernel.variant has a disallowed byte 0x3a"},
        {"run-null", "kernel 2 (add:v2): RadKernel.run is NULL"},
        {"enc-bits", "RadKernel.weight_encs has bit 40"},
        {"act-dtype", "RadKernel.act_dtype 99"},
        {"exactness", "RadKernel.exactness 7"},
        {"tol-nan", "RadKernel.tolerance nan"},
        {"tol-neg", "RadKernel.tolerance -1"},
        {"q8-not-gemm", "kernel 1 (add:v1): RadKernel.exactness Q8ACT is for the GEMMs"},
        {"bf16-not-gemm", "kernel 1 (add:v1): RadKernel.exactness BF16ACT is for the GEMMs"},
        {"f8-not-gemm", "kernel 1 (add:v1): RadKernel.exactness F8ACT is for the GEMMs"},
        {"extent", "RadKernel.n_min 5, n_max 2"},
        {"kv-block", "RadKernel.kv_block_size 1073741824"},
        {"dup", "kernels 1 and 2 are both add:v1"},
        {"device", "RadKernelLib.device 9"},
        {"hooks", "alloc, free, copy and sync are 1 of 4 set"},
        {"pack-half", "RadKernelLib.pack_size is set without .pack"},
        {"null-lib", "rad_kernels() returned NULL"},
        {"knob-null", "kernel 1 (add:v1): RadKernel.knobs is NULL with n_knobs 2"},
        {"knob-count", "kernel 1 (add:v1): RadKernel.n_knobs 99 is over 16"},
        {"knob-size", "kernel 1 (add:v1): RadKnob.struct_size 8 is not a size of ABI 1.2"},
        {"knob-name", "kernel 1 (add:v1): RadKernel.knobs[1].name has a disallowed byte 0x42"},
        {"knob-dup", "kernel 1 (add:v1): RadKernel.knobs[0] and [1] are both named 'threads'"},
        {"knob-default", "kernel 1 (add:v1): knob 'block': default 3 is not one of its values"},
        {"knob-dupval", "kernel 1 (add:v1): knob 'block': value 2 is listed twice"},
        {"knob-novalues", "kernel 1 (add:v1): knob 'block': n_values 0 is not 1..64"},
        {"knob-effect", "kernel 1 (add:v1): knob 'block': effect 5 is not SAME_BITS (0) or ARITH (1)"},
        {"knob-nmax", "kernel 1 (add:v1): knob 'block': n_max -1 is negative (0: any rows)"},
        {"knob-arith-bitwise", "kernel 1 (add:v1): knob 'block' changes the arithmetic (ARITH) of a BITWISE kernel"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) refused("kern_bad", "RAD_TEST_BADLIB", cases[i][0], cases[i][1]);
}

Test(plugins, a_bad_plugin_info_is_refused_naming_the_field) {
    static const char *const cases[][2] = {
        {"info-null", "rad_plugin_info() returned NULL"},
        {"info-size", "RadPluginInfo.struct_size 4 is smaller"},
        {"info-abi", "built for ABI 2.10, this core serves 1.0..1.10"},
        {"info-minor", "built for ABI 1.99"},
        {"info-kind", "RadPluginInfo.kind 7"},
        {"info-name-null", "RadPluginInfo.name is NULL"},
        {"info-name-empty", "RadPluginInfo.name is empty"},
        {"info-name-chars", "RadPluginInfo.name has a disallowed byte 0x2c"},
        {"info-name-long", "RadPluginInfo.name is not NUL-terminated"},
        {"info-desc", "RadPluginInfo.description has a control or invalid UTF-8 byte 0x0a"},
        {"info-utf8", "RadPluginInfo.description has a control or invalid UTF-8 byte 0xff"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) refused("kern_bad", "RAD_TEST_BADLIB", cases[i][0], cases[i][1]);
}

Test(plugins, bad_architecture_exports_are_refused) {
    static const char *const cases[][2] = {
        {"null-id", "architecture plugin 'arch_bad': rad_arch_id() is NULL"},
        {"empty-id", "rad_arch_id() is empty"},
        {"id-chars", "rad_arch_id() has a disallowed byte 0x20"},
        {"wild-id", "rad_arch_id() points at unmapped memory"},
        {"null-quant", "rad_arch_quant() is NULL"},
        {"imports", "rad_arch_serves_imports() returned 7"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) refused("arch_bad", "RAD_TEST_BADARCH", cases[i][0], cases[i][1]);
}

Test(plugins, the_good_modes_of_the_test_plugins_load) {
    put("test-plugins/kern_bad.so", "kern_bad.so");
    put("test-plugins/arch_bad.so", "arch_bad.so");
    setenv("RAD_TEST_BADLIB", "good", 1);
    setenv("RAD_TEST_BADARCH", "good", 1);
    char p[512];
    RadPluginSet s = {0};
    RadErr e = {0};
    snprintf(p, sizeof p, "%s/kern_bad.so", dir);
    cr_assert_eq(rad_plugins_load_file(&s, p, &e), RAD_OK, "%s", e.msg);
    snprintf(p, sizeof p, "%s/arch_bad.so", dir);
    cr_assert_eq(rad_plugins_load_file(&s, p, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(s.n, 2);
    cr_assert_eq(s.p[0].lib->n_kernels, 3);
    cr_assert_str_eq(s.p[1].arch_id, "bad_family");
    rad_plugins_free(&s);
}

/* Every kind of bad file beside a good one: the good one loads, each bad one is recorded with
 * its reason, and the load succeeds. */
static void bad_dir(void) {
    put("test-plugins/kern_test.so", "kern_test.so");
    put("test-plugins/kern_bad.so", "kern_bad.so"); /* RAD_TEST_BADLIB unset: a NULL table */
    put("test-plugins/kern_bad_noexport.so", "kern_bad_noexport.so");
    put_text("x.so", "this is not a shared object\n");
    char p[512];
    snprintf(p, sizeof p, "%s/fifo.so", dir);
    cr_assert_eq(mkfifo(p, 0644), 0);
    snprintf(p, sizeof p, "%s/dir.so", dir);
    cr_assert_eq(mkdir(p, 0755), 0);
}

static const RadPluginSkip *skipped(const RadPluginSet *s, const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    for (int i = 0; i < s->n_skipped; i++)
        if (strcmp(s->skipped[i].path, p) == 0) return &s->skipped[i];
    return NULL;
}

Test(plugins, bad_files_are_skipped_and_the_good_ones_load) {
    unsetenv("RAD_TEST_BADLIB");
    bad_dir();
    char *dirs[] = {dir};
    RadPluginSet s = {.quiet = 1};
    RadErr e = {0};
    cr_assert_eq(rad_plugins_load(&s, dirs, 1, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(s.n, 1);
    cr_assert_str_eq(s.p[0].info->name, "kern_test");
    cr_assert_eq(s.n_skipped, 5);
    static const char *const want[][2] = {
        {"kern_bad.so", "RadKernelLib.kernels is NULL with n_kernels 3"},
        {"kern_bad_noexport.so", "exports no rad_plugin_info"},
        {"x.so", "cannot load"},
        {"fifo.so", "not a regular file (a FIFO)"},
        {"dir.so", "not a regular file (a directory)"},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const RadPluginSkip *k = skipped(&s, want[i][0]);
        cr_assert_not_null(k, "%s was not recorded as skipped", want[i][0]);
        cr_assert(strstr(k->why, want[i][1]) != NULL, "%s: want '%s' in: %s", want[i][0], want[i][1], k->why);
    }
    cr_assert_str_eq(skipped(&s, "kern_bad.so")->name, "kern_bad", "a skip keeps a valid plugin name");
    cr_assert_str_eq(skipped(&s, "x.so")->name, "");
    rad_plugins_free(&s);
}

Test(plugins, strict_mode_makes_a_bad_file_an_error) {
    put("test-plugins/kern_test.so", "kern_test.so");
    put_text("x.so", "junk\n");
    char *dirs[] = {dir};
    RadPluginSet s = {.quiet = 1};
    RadErr e = {0};
    setenv("RADIANCE_PLUGINS_STRICT", "1", 1);
    cr_assert_eq(rad_plugins_load(&s, dirs, 1, &e), RAD_E_IO);
    char want[512];
    snprintf(want, sizeof want, "plugin %s/x.so: cannot load", dir);
    cr_assert(strstr(e.msg, want) && strstr(e.msg, "RADIANCE_PLUGINS_STRICT=1"), "%s", e.msg);
    rad_plugins_free(&s);
    rad_err_clear(&e);
    setenv("RADIANCE_PLUGINS_STRICT", "yes", 1);
    cr_assert_eq(rad_plugins_load(&s, dirs, 1, &e), RAD_E_ARG);
    cr_assert_str_eq(e.msg, "RADIANCE_PLUGINS_STRICT: 'yes' is not 0 or 1");
    rad_plugins_free(&s);
    setenv("RADIANCE_PLUGINS_STRICT", "0", 1);
    rad_err_clear(&e);
    cr_assert_eq(rad_plugins_load(&s, dirs, 1, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(s.n, 1);
    cr_assert_eq(s.n_skipped, 1);
    rad_plugins_free(&s);
}

/* The warning line each tool prints: "<tool>: warning: plugin PATH skipped: WHY", one line. */
Test(plugins, a_skipped_file_is_one_warning_line_on_stderr) {
    put_text("x.so", "junk\n");
    char out[512];
    snprintf(out, sizeof out, "%s/stderr", dir);
    fflush(stderr);
    int saved = dup(2);
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_geq(fd, 0);
    dup2(fd, 2);
    close(fd);
    char *dirs[] = {dir};
    RadPluginSet s = {0};
    RadErr e = {0};
    int rc = rad_plugins_load(&s, dirs, 1, &e);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    cr_assert_eq(rc, RAD_OK, "%s", e.msg);
    FILE *f = fopen(out, "r");
    char line[1024] = "", extra[16];
    cr_assert_not_null(fgets(line, sizeof line, f));
    cr_assert_null(fgets(extra, sizeof extra, f), "more than one line");
    fclose(f);
    char want[512];
    snprintf(want, sizeof want, "%s: warning: plugin %s/x.so skipped: cannot load", program_invocation_short_name, dir);
    cr_assert(strncmp(line, want, strlen(want)) == 0, "%s", line);
    rad_plugins_free(&s);
}

/* Two files with one plugin name: the first on the path is kept, the later one skipped naming both. */
Test(plugins, a_second_plugin_of_one_name_is_skipped_naming_both) {
    char a[300], b[300];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    cr_assert_eq(mkdir(a, 0755), 0);
    cr_assert_eq(mkdir(b, 0755), 0);
    put("test-plugins/kern_test.so", "a/kern_test.so");
    put("test-plugins/kern_test.so", "b/kern_test.so");
    char *dirs[] = {a, b};
    RadPluginSet s = {.quiet = 1};
    RadErr e = {0};
    cr_assert_eq(rad_plugins_load(&s, dirs, 2, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(s.n, 1);
    cr_assert(strncmp(s.p[0].path, a, strlen(a)) == 0, "%s", s.p[0].path);
    cr_assert_eq(s.n_skipped, 1);
    cr_assert(strstr(s.skipped[0].why, "two plugins named 'kern_test'") && strstr(s.skipped[0].why, a), "%s", s.skipped[0].why);
    rad_plugins_free(&s);
}

static RadPluginSet loaded_with_a_skip(void) {
    put("test-plugins/kern_test.so", "kern_test.so");
    put("test-plugins/kern_bad.so", "kern_bad.so");
    unsetenv("RAD_TEST_BADLIB");
    char *dirs[] = {dir};
    RadPluginSet s = {.quiet = 1};
    RadErr e = {0};
    cr_assert_eq(rad_plugins_load(&s, dirs, 1, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(s.n, 1);
    return s;
}

static void pick_refused_on(const RadPluginSet *s, const char *list, RadDevice dev, int code, const char *want) {
    const RadPlugin *out[4];
    int n = -1;
    RadErr e = {0};
    cr_assert_eq(rad_plugins_pick_kernels(s, list, dev, RAD_PICK_ALL, out, 4, &n, NULL, &e), code, "--kernels '%s': %s", list, e.msg);
    cr_assert(strstr(e.msg, want) != NULL, "--kernels '%s': want '%s' in: %s", list, want, e.msg);
    cr_assert(!strchr(e.msg, '\n'));
}
#define pick_refused(s, list, code, want) pick_refused_on((s), (list), RAD_DEVICE_CPU, (code), (want))

Test(plugins, the_kernels_list_refuses_empty_repeated_and_unknown_items) {
    RadPluginSet s = loaded_with_a_skip();
    pick_refused(&s, "kern_test,kern_test", RAD_E_ARG, "--kernels: 'kern_test' named twice");
    pick_refused(&s, "kern_test,,x", RAD_E_ARG, "--kernels: an empty item");
    pick_refused(&s, ",", RAD_E_ARG, "--kernels: an empty item");
    pick_refused(&s, "kern_test,", RAD_E_ARG, "--kernels: an empty item");
    pick_refused(&s, "", RAD_E_ARG, "--kernels: an empty list");
    pick_refused(&s, "nope", RAD_E_NOTFOUND, "--kernels: no kernel library named 'nope' is installed; skipped: ");
    /* the one it names was skipped: say so, and why */
    pick_refused(&s, "kern_bad", RAD_E_NOTFOUND, "--kernels: kernel library 'kern_bad' (");
    pick_refused(&s, "kern_bad", RAD_E_NOTFOUND, "was skipped: kernel library 'kern_bad': RadKernelLib.kernels is NULL");
    const RadPlugin *out[4];
    int n = 0;
    RadErr e = {0};
    cr_assert_eq(rad_plugins_pick_kernels(&s, "kern_test", RAD_DEVICE_CPU, RAD_PICK_ALL, out, 4, &n, NULL, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(n, 1);
    cr_assert_eq(rad_plugins_pick_kernels(&s, NULL, RAD_DEVICE_CPU, RAD_PICK_ALL, out, 4, &n, NULL, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(n, 1);
    /* a library for another device than the engine's, and none for its device */
    pick_refused_on(&s, "kern_test", RAD_DEVICE_CUDA, RAD_E_UNSUPPORTED, "--kernels: 'kern_test' is a CPU library");
    pick_refused_on(&s, NULL, RAD_DEVICE_CUDA, RAD_E_NOTFOUND, "no CUDA kernel library installed");
    rad_plugins_free(&s);
}

/* The deployment split and rad-kbench's any-device list, read in the one place lists are read. */
Test(plugins, a_kernels_list_splits_at_its_first_library_of_another_device) {
    put("test-plugins/kern_test.so", "kern_test.so");
    put("test-plugins/kern_fakedev.so", "kern_fakedev.so"); /* says RAD_DEVICE_CUDA */
    char ref[600], cwd[256]; /* the libref it wraps: its default path is beside its own folder, not here */
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    snprintf(ref, sizeof ref, "%s%s%s/plugins/kern_ref.so", bdir()[0] == '/' ? "" : cwd, bdir()[0] == '/' ? "" : "/", bdir());
    setenv("RAD_FAKEDEV_REF", ref, 1);
    char *dirs[] = {dir};
    RadPluginSet s = {.quiet = 1};
    RadErr e = {0};
    cr_assert_eq(rad_plugins_load(&s, dirs, 1, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(s.n, 2);
    const RadPlugin *out[4];
    int n = -1;
    const char *rest = NULL;
    const char *list = "fakedev,kern_test";
    cr_assert_eq(rad_plugins_pick_kernels(&s, list, RAD_DEVICE_CUDA, RAD_PICK_LEADING, out, 4, &n, &rest, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(out[0]->info->name, "fakedev");
    cr_assert_eq(rest, list + 8, "rest '%s'", rest);
    cr_assert_eq(rad_plugins_pick_kernels(&s, "fakedev", RAD_DEVICE_CUDA, RAD_PICK_LEADING, out, 4, &n, &rest, &e), RAD_OK);
    cr_assert(n == 1 && !*rest, "n %d, rest '%s'", n, rest);
    /* a list that starts elsewhere (or with a name nobody has) takes nothing: the next pick names it */
    for (int i = 0; i < 2; i++) {
        const char *l = i ? "nope,fakedev" : "kern_test,fakedev";
        cr_assert_eq(rad_plugins_pick_kernels(&s, l, RAD_DEVICE_CUDA, RAD_PICK_LEADING, out, 4, &n, &rest, &e), RAD_OK, "%s", e.msg);
        cr_assert(n == 0 && rest == l, "%s: n %d", l, n);
    }
    cr_assert_eq(rad_plugins_pick_kernels(&s, NULL, RAD_DEVICE_CUDA, RAD_PICK_LEADING, out, 4, &n, &rest, &e), RAD_OK);
    cr_assert(n == 0 && !rest);
    pick_refused_on(&s, "fakedev,fakedev", RAD_DEVICE_CUDA, RAD_E_ARG, "'fakedev' named twice");
    /* what is left of the list is still a CPU list, checked as one */
    pick_refused(&s, "kern_test,fakedev", RAD_E_UNSUPPORTED, "--kernels: 'fakedev' is a CUDA library; this engine runs CPU kernels");
    /* rad-kbench: every item, in order, whatever its device; the same refusals */
    cr_assert_eq(rad_plugins_pick_kernels(&s, "kern_test,fakedev", RAD_DEVICE_CPU, RAD_PICK_ANY, out, 4, &n, NULL, &e), RAD_OK,
                 "%s", e.msg);
    cr_assert(n == 2 && !strcmp(out[0]->info->name, "kern_test") && !strcmp(out[1]->info->name, "fakedev"));
    cr_assert_eq(rad_plugins_pick_kernels(&s, "fakedev,nope", RAD_DEVICE_CPU, RAD_PICK_ANY, out, 4, &n, NULL, &e), RAD_E_NOTFOUND);
    cr_assert(strstr(e.msg, "no kernel library named 'nope'"), "%s", e.msg);
    rad_plugins_free(&s);
    unsetenv("RAD_FAKEDEV_REF");
}

/* Would have written past en->libs before: a list longer than the libraries installed. */
Test(plugins, radiance_refuses_a_library_named_twice) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s/rad-convert models/SmolLM2-135M-Instruct.Q4_1.gguf -o %s/m.rad >/dev/null 2>&1 && "
             "%s/radiance --model %s/m.rad --kernels ref,ref -p hi -n 1 >%s/out 2>%s/err",
             bdir(), dir, bdir(), dir, dir, dir);
    int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
    char p[512], err[1024] = "";
    snprintf(p, sizeof p, "%s/err", dir);
    FILE *f = fopen(p, "r");
    cr_assert_not_null(f);
    size_t n = fread(err, 1, sizeof err - 1, f);
    err[n] = 0;
    fclose(f);
    cr_assert_str_eq(err, "radiance: --kernels: 'ref' named twice\n");
}

/* Every fitting kernel is a candidate: a library with 70 rmsnorm variants first in --kernels
 * used to push ref's past a fixed list of 64, and the op had no kernel. */
Test(plugins, many_variants_do_not_hide_a_later_librarys_kernels) {
    put("test-plugins/kern_bad.so", "kern_bad.so");
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s/rad-convert models/SmolLM2-135M-Instruct.Q4_1.gguf -o %s/m.rad >/dev/null 2>&1 && "
             "RAD_TEST_BADLIB=many %s/radiance --model %s/m.rad --plugin-dir %s --kernels kern_bad,ref --debug-graph "
             ">%s/out 2>%s/err && grep -q ' rmsnorm .*buckets: rows 1..[0-9]* ref:' %s/out",
             bdir(), dir, bdir(), dir, dir, dir, dir, dir);
    int st = system(cmd);
    char p[512], err[1024] = "";
    snprintf(p, sizeof p, "%s/err", dir);
    FILE *f = fopen(p, "r");
    if (f) err[fread(err, 1, sizeof err - 1, f)] = 0, fclose(f);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, err);
}

Test(plugins, the_plugin_path_names_each_folder_once) {
    char a[300], a2[300], link[300], env[1024];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(a2, sizeof a2, "%s/a//", dir);
    snprintf(link, sizeof link, "%s/link", dir);
    cr_assert_eq(mkdir(a, 0755), 0);
    cr_assert_eq(symlink(a, link), 0);
    snprintf(env, sizeof env, ":%s::/nonexistent-rad:%s:", link, a);
    setenv("RADIANCE_PLUGIN_PATH", env, 1);
    const char *extra[] = {a, a2, "/nonexistent-rad", a};
    char **dirs;
    int n = rad_plugin_dirs(extra, 4, &dirs);
    /* a, /nonexistent-rad, then $PREFIX's and the tool's own folder */
    cr_assert_geq(n, 3);
    cr_assert_str_eq(dirs[0], a);
    cr_assert_str_eq(dirs[1], "/nonexistent-rad");
    for (int i = 2; i < n; i++) {
        cr_assert_str_neq(dirs[i], a);
        cr_assert_str_neq(dirs[i], link);
        cr_assert(dirs[i][0], "an empty entry");
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) cr_assert_str_neq(dirs[i], dirs[j]);
    rad_plugin_dirs_free(dirs, n);
}

Test(plugins, a_plugin_path_of_too_many_folders_is_refused) {
    static char env[100000];
    size_t k = 0;
    for (int i = 0; i < 2000 && k + 64 < sizeof env; i++) k += (size_t)snprintf(env + k, sizeof env - k, "%s/d%d:", dir, i);
    setenv("RADIANCE_PLUGIN_PATH", env, 1);
    char **dirs;
    int n = rad_plugin_dirs(NULL, 0, &dirs);
    cr_assert_eq(n, (int)RAD_PLUGIN_MAX_DIRS + 1, "the list stops one past the limit, not at 2000 (%d)", n);
    RadPluginSet s = {.quiet = 1};
    RadErr e = {0};
    cr_assert_eq(rad_plugins_load(&s, dirs, n, &e), RAD_E_LIMIT);
    cr_assert(strstr(e.msg, "names more than 64 folders"), "%s", e.msg);
    rad_plugin_dirs_free(dirs, n);
    rad_plugins_free(&s);
}

Test(plugins, an_empty_plugin_dir_is_refused) {
    const char *extra[] = {""};
    char **dirs;
    int n = rad_plugin_dirs(extra, 1, &dirs);
    RadPluginSet s = {.quiet = 1};
    RadErr e = {0};
    cr_assert_eq(rad_plugins_load(&s, dirs, n, &e), RAD_E_ARG);
    cr_assert_str_eq(e.msg, "--plugin-dir: an empty folder name");
    rad_plugin_dirs_free(dirs, n);
    rad_plugins_free(&s);
}

/* A missing architecture names what was skipped: the plugin it needed may be one of them. */
Test(plugins, a_missing_architecture_names_the_skipped_files) {
    put_text("arch_llama_ggml.so", "junk\n");
    char *dirs[] = {dir};
    RadPluginSet s = {.quiet = 1};
    RadErr e = {0};
    cr_assert_eq(rad_plugins_load(&s, dirs, 1, &e), RAD_OK, "%s", e.msg);
    const RadPlugin *p;
    cr_assert_eq(rad_plugins_find_arch(&s, "llama", "q4_1", "import:gguf", &p, &e), RAD_E_NOTFOUND);
    cr_assert(strstr(e.msg, "; skipped: ") && strstr(e.msg, "arch_llama_ggml.so (cannot load"), "%s", e.msg);
    rad_plugins_free(&s);
}

/* ---- the checks on in-memory structs (what fuzz/fuzz_plugin.c drives) ----------------------- */

static int run_nop(const RadKernelArgs *a) { return a->n <= 0 ? RAD_E_SHAPE : RAD_OK; }

Test(plugins, in_memory_tables_are_checked) {
    RadKernel k[2] = {
        {.struct_size = sizeof(RadKernel), .op = "add", .variant = "a", .act_dtype = RAD_F32, .n_min = 1, .run = run_nop},
        {.struct_size = sizeof(RadKernel), .op = "add", .variant = "b", .act_dtype = RAD_F32, .n_min = 1, .run = run_nop},
    };
    RadKernelLib l = {.struct_size = sizeof l, .device = RAD_DEVICE_CPU, .kernels = k, .n_kernels = 2};
    RadErr e = {0};
    cr_assert_eq(rad_kernel_lib_check(&l, &e), RAD_OK, "%s", e.msg);
    l.n_kernels = 0, l.kernels = NULL;
    cr_assert_eq(rad_kernel_lib_check(&l, &e), RAD_OK, "an empty library is valid: %s", e.msg);
    l.n_kernels = 2, l.kernels = k;
    k[1].tolerance = NAN;
    cr_assert_eq(rad_kernel_lib_check(&l, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "kernel 1 (add:b): RadKernel.tolerance nan"), "%s", e.msg);
    k[1].tolerance = 0;
    rad_err_clear(&e);
    /* a 1.0 table (no packed_encs): entries are stepped by their own size */
    enum { K10 = (offsetof(RadKernel, kvq_ok) + sizeof(uint32_t) + 7) / 8 * 8 };
    _Alignas(RadKernel) unsigned char t10[2 * K10];
    k[0].struct_size = k[1].struct_size = K10;
    memcpy(t10, &k[0], K10);
    memcpy(t10 + K10, &k[1], K10);
    l.kernels = (const RadKernel *)(const void *)t10;
    cr_assert_eq(rad_kernel_lib_check(&l, &e), RAD_OK, "%s", e.msg);
    const char *bad_op = "add rm";
    memcpy(t10 + K10 + offsetof(RadKernel, op), &bad_op, sizeof bad_op);
    cr_assert_eq(rad_kernel_lib_check(&l, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "kernel 1: RadKernel.op has a disallowed byte 0x20"), "%s", e.msg);
    RadErr e2 = {0};
    cr_assert_eq(rad_kernel_lib_check(NULL, &e2), RAD_E_FORMAT);
    cr_assert_str_eq(e2.msg, "rad_kernels() returned NULL");
    RadPluginInfo in = {sizeof in, RAD_PLUGIN_KERNELS, RAD_ABI_MAJOR, RAD_ABI_MINOR, "x", NULL, "caf\xc3\xa9"};
    RadErr e3 = {0};
    cr_assert_eq(rad_plugin_info_check(&in, &e3), RAD_OK, "%s", e3.msg);
    in.description = "\xc0\xaf"; /* an overlong '/' */
    cr_assert_eq(rad_plugin_info_check(&in, &e3), RAD_E_FORMAT);
    cr_assert(strstr(e3.msg, "RadPluginInfo.description"), "%s", e3.msg);
    RadErr e4 = {0};
    cr_assert_eq(rad_arch_exports_check("llama", "", 0, &e4), RAD_OK, "%s", e4.msg);
    cr_assert_eq(rad_arch_exports_check("llama", "q4", 2, &e4), RAD_E_FORMAT);
}
