/* libFuzzer target: the plugin loader's checks on what a plugin hands over. The input builds a
 * RadPluginInfo, a RadKernelLib with its kernel table, and an architecture plugin's id/quant
 * (counts, sizes, enum values, string bytes, and NULL or valid pointers chosen by input bits),
 * and rad_plugin_info_check, rad_kernel_lib_check and rad_arch_exports_check judge them. A
 * table pointer is valid for as many entries as its count claims (the loader cannot know a
 * table's length, only bound it), so every read the checks make is in bounds or a bug.
 * Seeds: fuzz/corpus/fuzz_plugin/. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/plugin/rad_plugins.h"

typedef struct In {
    const uint8_t *p;
    size_t n;
} In;

static uint8_t u8(In *in) {
    if (!in->n) return 0;
    in->n--;
    return *in->p++;
}
static uint32_t u32(In *in) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)u8(in) << (8 * i);
    return v;
}
static uint64_t u64(In *in) { return (uint64_t)u32(in) | (uint64_t)u32(in) << 32; }

/* Strings live in one arena freed at the end; each is NUL-terminated where its bytes end. */
typedef struct Arena {
    void *p[256];
    int n;
} Arena;
static void *keep(Arena *a, void *p) {
    if (!p || a->n == 256) return free(p), NULL;
    return a->p[a->n++] = p;
}

/* NULL, a fixed valid string, or up to 300 input bytes (control and non-UTF-8 bytes included). */
static const char *str(In *in, Arena *a) {
    uint8_t k = u8(in);
    if (k < 16) return NULL;
    if (k < 64) {
        static const char *const fixed[] = {"add", "gemm_nt", "generic", "", "a:b", "ref", "x,y", "llama"};
        return fixed[k % 8];
    }
    size_t len = u8(in) + (k >= 240 ? 200u : 0u);
    char *s = keep(a, malloc(len + 1));
    if (!s) return "";
    for (size_t i = 0; i < len; i++) s[i] = (char)u8(in);
    s[len] = 0;
    return s;
}

static int run_ok(const RadKernelArgs *x) { return x->n <= 0 ? RAD_E_SHAPE : RAD_OK; }
static size_t ws_ok(const RadParam *p, uint32_t np, int64_t n) { return (void)p, (void)np, (size_t)n; }
static int init_ok(const RadKernelLibConfig *c, void **s) { return (void)c, *s = NULL, RAD_OK; }
static void fini_ok(void *s) { (void)s; }
static void *alloc_ok(void *s, size_t n) { return (void)s, (void)n, NULL; }
static void free_ok(void *s, void *p) { (void)s, (void)p; }
static int copy_ok(void *s, void *d, const void *x, size_t n, int t) { return (void)s, (void)d, (void)x, (void)n, (void)t, 0; }
static int sync_ok(void *s) { return (void)s, 0; }
static size_t psize_ok(void *s, RadDType e, uint64_t r, uint64_t c) { return (void)s, (void)e, (void)r, (void)c, 0; }
static int pack_ok(void *s, RadDType e, uint64_t r, uint64_t c, const void *x, uint64_t rs, void *d) {
    return (void)s, (void)e, (void)r, (void)c, (void)x, (void)rs, (void)d, 0;
}

static void one_line(int rc, const RadErr *e) {
    if (rc != RAD_OK && (e->code != rc || !e->msg[0] || strchr(e->msg, '\n'))) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    In in = {data, size};
    Arena a = {.n = 0};

    /* RadPluginInfo */
    RadPluginInfo info;
    uint8_t b = u8(&in);
    info.struct_size = b & 1 ? u32(&in) : (uint32_t)sizeof info;
    info.kind = b & 2 ? u32(&in) : 1u + (b >> 2 & 1);
    info.abi_major = b & 8 ? u8(&in) : RAD_ABI_MAJOR;
    info.abi_minor = b & 16 ? u8(&in) : RAD_ABI_MINOR;
    info.name = str(&in, &a);
    info.version = str(&in, &a);
    info.description = str(&in, &a);
    RadErr e = {0};
    int rc = rad_plugin_info_check(b & 32 ? NULL : &info, &e);
    one_line(rc, &e);
    if (rc == RAD_OK && (!info.name || !info.name[0] || strlen(info.name) > RAD_PLUGIN_MAX_NAME)) abort();

    /* RadKernelLib and its table */
    RadKernelLib lib;
    memset(&lib, 0, sizeof lib);
    b = u8(&in);
    uint8_t c = u8(&in);
    lib.struct_size = b & 1 ? u32(&in) : (uint32_t)sizeof lib;
    lib.device = b & 2 ? (RadDevice)u8(&in) : RAD_DEVICE_CPU;
    uint8_t hooks = u8(&in);
    if (hooks & 1) lib.init = init_ok;
    if (hooks & 2) lib.fini = fini_ok;
    if (hooks & 4) lib.alloc = alloc_ok;
    if (hooks & 8) lib.free = free_ok;
    if (hooks & 16) lib.copy = copy_ok;
    if (hooks & 32) lib.sync = sync_ok;
    if (hooks & 64) lib.pack_size = psize_ok;
    if (hooks & 128) lib.pack = pack_ok;
    uint32_t n = c < 200 ? c % 17u : u32(&in);
    int have_table = !(b & 4);
    if (n > 16 && n <= RAD_PLUGIN_MAX_KERNELS) n = have_table ? n % 17u : n; /* a real table holds its count */
    uint32_t n_alloc = n <= 16 ? n : have_table; /* over the limit: one real entry, refused unread */
    size_t k10 = (offsetof(RadKernel, kvq_ok) + sizeof(uint32_t) + 7) / 8 * 8;
    uint8_t sz = u8(&in);
    uint32_t stride = sz < 128 ? (uint32_t)sizeof(RadKernel) : sz < 192 ? (uint32_t)k10 : sz;
    size_t step = stride >= k10 && stride <= sizeof(RadKernel) && stride % 8 == 0 ? stride : sizeof(RadKernel);
    unsigned char *table = NULL;
    if (have_table && n_alloc) {
        table = aligned_alloc(_Alignof(RadKernel), n_alloc * sizeof(RadKernel));
        if (!table) return 0;
        memset(table, 0, n_alloc * sizeof(RadKernel));
        for (uint32_t i = 0; i < n_alloc; i++) {
            RadKernel k;
            memset(&k, 0, sizeof k);
            uint8_t f = u8(&in);
            k.struct_size = f & 1 ? u32(&in) : stride;
            k.op = str(&in, &a);
            k.variant = str(&in, &a);
            k.weight_encs = f & 2 ? u64(&in) : RAD_ENC_PLAIN_FLOATS;
            k.act_dtype = f & 4 ? (RadDType)u32(&in) : RAD_F32;
            k.n_min = f & 8 ? (int64_t)u64(&in) : 1;
            k.n_max = f & 8 ? (int64_t)u64(&in) : 0;
            k.kv_block_size = f & 16 ? u32(&in) : 0;
            k.exactness = (RadExactness)(f & 32 ? u32(&in) : 0);
            uint8_t t = u8(&in);
            k.tolerance = t < 200 ? t * 1e-6 : t < 220 ? NAN : t < 240 ? INFINITY : -1.0;
            k.batch_invariant = f & 64 ? u32(&in) : 1;
            uint8_t g = u8(&in);
            if (!(g & 1)) k.run = run_ok;
            if (g & 2) k.workspace = ws_ok;
            if (g & 4) k.kv_encs = u64(&in);
            if (g & 8) k.kvq_ok = u32(&in);
            if (g & 16) k.packed_encs = u64(&in);
            memcpy(table + (size_t)i * step, &k, step < sizeof k ? step : sizeof k);
        }
    }
    lib.kernels = (const RadKernel *)(const void *)table;
    lib.n_kernels = n;
    rad_err_clear(&e);
    rc = rad_kernel_lib_check(b & 8 ? NULL : &lib, &e);
    one_line(rc, &e);
    if (rc == RAD_OK && !(b & 8)) {
        /* what the engine relies on once a table passed */
        if (lib.n_kernels > RAD_PLUGIN_MAX_KERNELS || (lib.n_kernels && !lib.kernels)) abort();
        for (uint32_t i = 0; i < lib.n_kernels; i++) {
            const RadKernel *k = rad_kernel_at(&lib, i);
            if (!k->op || !k->variant || !k->run || !isfinite(k->tolerance) || k->tolerance < 0) abort();
            if (k->n_max && k->n_max < k->n_min) abort();
        }
    }
    free(table);

    /* an architecture plugin's exports */
    const char *id = str(&in, &a), *quant = str(&in, &a);
    int imports = (int)(u8(&in) % 3);
    rad_err_clear(&e);
    rc = rad_arch_exports_check(id, quant, imports, &e);
    one_line(rc, &e);
    if (rc == RAD_OK && (!id || !*id || !quant)) abort();

    for (int i = 0; i < a.n; i++) free(a.p[i]);
    return 0;
}
