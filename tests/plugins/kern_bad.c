/* A kernel library that is wrong in the way $RAD_TEST_BADLIB names, so one .so shows the loader
 * (tests/plugin/plugins_test.c, tests/hostile/cases/plugins.py, fuzz/fuzz_plugin.c's seeds) every field
 * a plugin can get wrong. Unset or unknown: "null-table". "good": a valid three-kernel library;
 * "many": a valid one of 70 rmsnorm variants that serve no real row count; "init-fails": a valid one
 * whose init refuses. */
#include <abi/rad_kernels.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int run_add(const RadKernelArgs *a) { return a->n <= 0 ? RAD_E_SHAPE : RAD_E_UNSUPPORTED; }
static size_t pack_size(void *st, RadDType enc, uint64_t r, uint64_t c) { (void)st, (void)enc, (void)r, (void)c; return 0; }
static void *hook_alloc(void *st, size_t n) { (void)st, (void)n; return NULL; }
static int init_fails(const RadKernelLibConfig *cfg, void **st) { (void)cfg, (void)st; return RAD_E_UNSUPPORTED; }

#define N_MANY 70
static RadKernel k[N_MANY];
static char many_names[N_MANY][8];
static RadKernelLib lib;
static RadPluginInfo info;
static char long_name[300];

static const char *mode(void) {
    const char *m = getenv("RAD_TEST_BADLIB");
    return m && *m ? m : "null-table";
}
static int is(const char *m) { return strcmp(mode(), m) == 0; }

static void build(void) {
    static int done;
    if (done) return;
    done = 1;
    memset(long_name, 'a', sizeof long_name - 1);
    for (int i = 0; i < 3; i++)
        k[i] = (RadKernel){.struct_size = sizeof(RadKernel), .op = "add", .variant = i == 0 ? "generic" : i == 1 ? "v1" : "v2",
                           .act_dtype = RAD_F32, .n_min = 1, .exactness = RAD_EXACT_BITWISE, .batch_invariant = 1, .run = run_add};
    lib = (RadKernelLib){.struct_size = sizeof lib, .device = RAD_DEVICE_CPU, .kernels = k, .n_kernels = 3};
    info = (RadPluginInfo){sizeof info, RAD_PLUGIN_KERNELS, RAD_ABI_MAJOR, RAD_ABI_MINOR, "kern_bad", "0.0.1", "test: a bad kernel library"};
    if (is("null-table")) lib.kernels = NULL;
    else if (is("huge-count")) lib.n_kernels = 0xFFFFFFFFu;
    else if (is("lib-size-small")) lib.struct_size = 8;
    else if (is("lib-size-big")) lib.struct_size = 4096;
    else if (is("kernel-size")) k[0].struct_size = 4;
    else if (is("kernel-size-mixed")) k[1].struct_size = 8;
    else if (is("wild-table")) lib.kernels = (const RadKernel *)(uintptr_t)0x1000;
    else if (is("misaligned")) lib.kernels = (const RadKernel *)(const void *)((const char *)k + 4);
    else if (is("op-null")) k[1].op = NULL;
    else if (is("op-wild")) k[1].op = (const char *)(uintptr_t)0x2000;
    else if (is("op-long")) k[1].op = long_name;
    else if (is("op-chars")) k[1].op = "gemm nt\n";
    else if (is("variant-colon")) k[2].variant = "a:b";
    else if (is("run-null")) k[2].run = NULL;
    else if (is("enc-bits")) k[1].weight_encs = (uint64_t)1 << 40;
    else if (is("act-dtype")) k[1].act_dtype = (RadDType)99;
    else if (is("exactness")) k[1].exactness = (RadExactness)7;
    else if (is("tol-nan")) k[1].exactness = RAD_EXACT_TOLERANCE, k[1].tolerance = __builtin_nan("");
    else if (is("tol-neg")) k[1].exactness = RAD_EXACT_TOLERANCE, k[1].tolerance = -1;
    else if (is("q8-not-gemm")) k[1].exactness = RAD_EXACT_Q8ACT, k[1].tolerance = 2e-2;
    else if (is("bf16-not-gemm")) k[1].exactness = RAD_EXACT_BF16ACT, k[1].tolerance = 1e-2;
    else if (is("f8-not-gemm")) k[1].exactness = RAD_EXACT_F8ACT, k[1].tolerance = 5e-2;
    else if (is("extent")) k[1].n_min = 5, k[1].n_max = 2;
    else if (is("kv-block")) k[1].kv_block_size = 1u << 30;
    else if (is("dup")) k[2].variant = "v1";
    else if (!strncmp(mode(), "knob-", 5)) { /* ABI 1.2's knob list, wrong one way each */
        static const int64_t vals[] = {1, 2, 4}, dupv[] = {1, 2, 2};
        static RadKnob kn[2];
        kn[0] = (RadKnob){sizeof(RadKnob), "threads", vals, 3, RAD_KNOB_SAME_BITS, 1, 0};
        kn[1] = (RadKnob){sizeof(RadKnob), "block", vals, 3, RAD_KNOB_SAME_BITS, 4, 0};
        k[1].knobs = kn, k[1].n_knobs = 2;
        if (is("knob-null")) k[1].knobs = NULL;
        else if (is("knob-count")) k[1].n_knobs = 99;
        else if (is("knob-size")) kn[0].struct_size = 8;
        else if (is("knob-name")) kn[1].name = "Block size";
        else if (is("knob-dup")) kn[1].name = "threads";
        else if (is("knob-default")) kn[1].def = 3;
        else if (is("knob-dupval")) kn[1].values = dupv;
        else if (is("knob-novalues")) kn[1].n_values = 0;
        else if (is("knob-effect")) kn[1].effect = (RadKnobEffect)5;
        else if (is("knob-nmax")) kn[1].n_max = -1;
        else if (is("knob-arith-bitwise")) kn[1].effect = RAD_KNOB_ARITH; /* k[1] is BITWISE */
    }
    else if (is("device")) lib.device = (RadDevice)9;
    else if (is("hooks")) lib.alloc = hook_alloc;
    else if (is("pack-half")) lib.pack_size = pack_size;
    else if (is("info-size")) info.struct_size = 4;
    else if (is("info-abi")) info.abi_major = 2;
    else if (is("info-minor")) info.abi_minor = 99;
    else if (is("info-kind")) info.kind = 7;
    else if (is("info-name-null")) info.name = NULL;
    else if (is("info-name-empty")) info.name = "";
    else if (is("info-name-chars")) info.name = "a,b";
    else if (is("info-name-long")) info.name = long_name;
    else if (is("info-desc")) info.description = "two\nlines";
    else if (is("info-utf8")) info.description = "bad \xff byte";
    else if (is("init-fails")) lib.init = init_fails; /* valid, but its init refuses (no device, say) */
    else if (is("many")) { /* more rmsnorm variants than the engine's first candidate list holds; none serves a step */
        for (int i = 0; i < N_MANY; i++) {
            k[i] = k[0];
            many_names[i][0] = 'm', many_names[i][1] = (char)('0' + i / 10), many_names[i][2] = (char)('0' + i % 10);
            k[i].op = "rmsnorm", k[i].variant = many_names[i], k[i].weight_encs = RAD_ENC_PLAIN_FLOATS;
            k[i].n_min = k[i].n_max = (int64_t)1 << 40;
        }
        lib.n_kernels = N_MANY;
    }
}

RAD_EXPORT const RadKernelLib *rad_kernels(void) {
    build();
    return is("null-lib") ? NULL : &lib;
}

RAD_EXPORT const RadPluginInfo *rad_plugin_info(void) {
    build();
    return is("info-null") ? NULL : &info;
}
