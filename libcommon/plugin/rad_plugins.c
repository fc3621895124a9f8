#include "libcommon/plugin/rad_plugins.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libcommon/base/rad_in.h"
#include "libcommon/format/rad_model.h"
#include "libcommon/tok/rad_tok.h"

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static int push_dir(char ***v, int *n, const char *d) {
    char **nv = realloc(*v, (size_t)(*n + 1) * sizeof *nv);
    if (!nv) return -1;
    *v = nv;
    if (!(nv[*n] = dup_str(d))) return -1;
    (*n)++;
    return 0;
}

/* A folder named twice is searched once: by spelling (trailing slashes aside) and, when it
 * exists, by identity, so "a/", "./a" and a symlink to it are one folder. */
typedef struct DirIds {
    dev_t dev[RAD_PLUGIN_MAX_DIRS + 1];
    ino_t ino[RAD_PLUGIN_MAX_DIRS + 1];
    int n;
} DirIds;

static void push_unique(char ***v, int *n, DirIds *ids, const char *d) {
    if (*n > (int)RAD_PLUGIN_MAX_DIRS) return; /* one more than allowed is enough for load to refuse */
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", d);
    size_t l = strlen(buf);
    while (l > 1 && buf[l - 1] == '/') buf[--l] = 0;
    for (int i = 0; i < *n; i++)
        if (strcmp((*v)[i], buf) == 0) return;
    struct stat st;
    if (*buf && stat(buf, &st) == 0) {
        for (int i = 0; i < ids->n; i++)
            if (ids->dev[i] == st.st_dev && ids->ino[i] == st.st_ino) return;
        if (ids->n <= (int)RAD_PLUGIN_MAX_DIRS) ids->dev[ids->n] = st.st_dev, ids->ino[ids->n++] = st.st_ino;
    }
    push_dir(v, n, buf);
}

int rad_plugin_dirs(const char *const *extra, int n_extra, char ***out) {
    char **v = NULL;
    int n = 0;
    DirIds ids = {.n = 0};
    for (int i = 0; i < n_extra; i++) push_unique(&v, &n, &ids, extra[i] ? extra[i] : "");
    const char *env = getenv("RADIANCE_PLUGIN_PATH");
    if (env && *env) {
        char *copy = dup_str(env), *save = NULL;
        for (char *t = copy ? strtok_r(copy, ":", &save) : NULL; t; t = strtok_r(NULL, ":", &save))
            if (*t) push_unique(&v, &n, &ids, t);
        free(copy);
    }
    push_unique(&v, &n, &ids, RAD_PREFIX "/lib/radiance/plugins");
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 16);
    if (k > 0) {
        exe[k] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            strcpy(slash, "/plugins");
            push_unique(&v, &n, &ids, exe);
        }
    }
    *out = v;
    return n;
}

void rad_plugin_dirs_free(char **dirs, int n) {
    for (int i = 0; i < n; i++) free(dirs[i]);
    free(dirs);
}

void rad_plugins_free(RadPluginSet *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++)
        if (s->p[i].dl) dlclose(s->p[i].dl);
    free(s->p);
    free(s->skipped);
    s->p = NULL;
    s->n = 0;
    s->skipped = NULL;
    s->n_skipped = 0;
}

int rad_plugins_strict(int *strict, RadErr *e) {
    const char *v = getenv("RADIANCE_PLUGINS_STRICT");
    *strict = 0;
    if (!v || !*v || strcmp(v, "0") == 0) return RAD_OK;
    if (strcmp(v, "1") == 0) return *strict = 1, RAD_OK;
    return rad_err_set(e, RAD_E_ARG, "RADIANCE_PLUGINS_STRICT: '%.32s' is not 0 or 1", v);
}

/* ---- probing what a plugin hands over -------------------------------------------------------
 * A plugin's pointers are read only after the kernel says they are mapped: write(2) from an
 * unmapped address into a pipe fails with EFAULT instead of faulting. One byte per page. */

typedef struct Probe {
    int fd[2];
    uintptr_t page;
} Probe;

static int probe_open(Probe *pr, RadErr *e) {
    if (pipe(pr->fd) != 0) return rad_err_set(e, RAD_E_IO, "cannot check a plugin: pipe: %s", strerror(errno));
    long pg = sysconf(_SC_PAGESIZE);
    pr->page = pg > 0 ? (uintptr_t)pg : 4096;
    return RAD_OK;
}

static void probe_close(Probe *pr) {
    close(pr->fd[0]);
    close(pr->fd[1]);
}

static int probe_byte(Probe *pr, uintptr_t a) {
    ssize_t w;
    do w = write(pr->fd[1], (const void *)a, 1);
    while (w < 0 && errno == EINTR);
    if (w != 1) return 0;
    char c;
    ssize_t r;
    do r = read(pr->fd[0], &c, 1);
    while (r < 0 && errno == EINTR);
    return 1;
}

/* 1 when [p, p + n) is mapped readable. */
static int probe_range(Probe *pr, const void *p, size_t n) {
    if (!n) return 1;
    uintptr_t a = (uintptr_t)p, last = a + (n - 1);
    if (!a || last < a) return 0;
    for (uintptr_t q = a;;) {
        if (!probe_byte(pr, q)) return 0;
        uintptr_t next = (q | (pr->page - 1)) + 1;
        if (next == 0 || next > last) break;
        q = next;
    }
    return 1;
}

static int probe_fn(Probe *pr, const void *fnp, size_t fn_size) {
    uintptr_t a = 0;
    memcpy(&a, fnp, fn_size < sizeof a ? fn_size : sizeof a);
    return probe_range(pr, (const void *)a, 1);
}
#define FN_NULL(f) (!*(void *const *)(const void *)&(f))
#define FN_OK(pr, f) probe_fn((pr), &(f), sizeof(f))

enum { S_NAME, S_OP, S_TEXT };
enum { S_NULL_OK = 1, S_EMPTY_OK = 2 };

/* A string a plugin returned: probed page by page, NUL-terminated within max bytes, of its
 * class: S_NAME [A-Za-z0-9_.-] (flags and tables spell these), S_OP [a-z0-9_] starting with a
 * letter, S_TEXT UTF-8 without control characters. */
static int check_str(Probe *pr, const char *s, size_t max, int cls, int flags, const char *field, RadErr *e) {
    if (!s) return flags & S_NULL_OK ? RAD_OK : rad_err_set(e, RAD_E_FORMAT, "%s is NULL", field);
    uintptr_t a = (uintptr_t)s;
    size_t l = 0;
    for (;; l++) {
        if ((l == 0 || ((a + l) & (pr->page - 1)) == 0) && !probe_range(pr, s + l, 1))
            return rad_err_set(e, RAD_E_FORMAT, "%s points at unmapped memory (%p)", field, (const void *)(s + l));
        if (!s[l]) break;
        if (l == max) return rad_err_set(e, RAD_E_FORMAT, "%s is not NUL-terminated within %zu bytes", field, max);
    }
    if (!l && !(flags & S_EMPTY_OK)) return rad_err_set(e, RAD_E_FORMAT, "%s is empty", field);
    for (size_t i = 0; i < l;) {
        unsigned char c = (unsigned char)s[i];
        int ok;
        size_t step = 1;
        if (cls == S_NAME) ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
        else if (cls == S_OP) ok = (c >= 'a' && c <= 'z') || (i && ((c >= '0' && c <= '9') || c == '_'));
        else ok = c >= 0x20 && c != 0x7F && (step = rad_utf8_len(s + i, l - i)) != 0;
        if (!ok)
            return rad_err_set(e, RAD_E_FORMAT, "%s has %s byte 0x%02x at offset %zu", field,
                               cls == S_TEXT ? "a control or invalid UTF-8" : "a disallowed", c, i);
        i += step;
    }
    return RAD_OK;
}

static int enc_bits_ok(uint64_t bits) { return (bits >> RAD_ENC_COUNT) == 0; }
static int first_bad_bit(uint64_t bits) {
    for (int b = RAD_ENC_COUNT; b < 64; b++)
        if (bits >> b & 1) return b;
    return -1;
}

/* ---- RadPluginInfo --------------------------------------------------------------------------- */

static int info_check(Probe *pr, const RadPluginInfo *in, RadErr *e) {
    if (!in) return rad_err_set(e, RAD_E_FORMAT, "rad_plugin_info() returned NULL");
    if ((uintptr_t)in % alignof(RadPluginInfo))
        return rad_err_set(e, RAD_E_FORMAT, "rad_plugin_info() returned a misaligned pointer (%p)", (const void *)in);
    if (!probe_range(pr, in, offsetof(RadPluginInfo, name)))
        return rad_err_set(e, RAD_E_FORMAT, "rad_plugin_info() points at unmapped memory (%p)", (const void *)in);
    /* the first four fields are the same in every major: read the ABI before anything else */
    if (in->abi_major != RAD_ABI_MAJOR || in->abi_minor > RAD_ABI_MINOR)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "built for ABI %u.%u, this core serves %u.0..%u.%u", in->abi_major,
                           in->abi_minor, RAD_ABI_MAJOR, RAD_ABI_MAJOR, RAD_ABI_MINOR);
    size_t min = offsetof(RadPluginInfo, description) + sizeof in->description;
    if (in->struct_size < min)
        return rad_err_set(e, RAD_E_FORMAT, "RadPluginInfo.struct_size %u is smaller than ABI %u.0's %zu", in->struct_size,
                           RAD_ABI_MAJOR, min);
    if (in->struct_size > sizeof *in)
        return rad_err_set(e, RAD_E_FORMAT, "RadPluginInfo.struct_size %u is larger than ABI %u.%u's %zu", in->struct_size,
                           RAD_ABI_MAJOR, RAD_ABI_MINOR, sizeof *in);
    if (!probe_range(pr, in, in->struct_size))
        return rad_err_set(e, RAD_E_FORMAT, "RadPluginInfo (%u bytes at %p) is not all mapped", in->struct_size, (const void *)in);
    if (in->kind != RAD_PLUGIN_ARCH && in->kind != RAD_PLUGIN_KERNELS)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "RadPluginInfo.kind %u is not RAD_PLUGIN_ARCH (1) or RAD_PLUGIN_KERNELS (2)", in->kind);
    int rc;
    if ((rc = check_str(pr, in->name, RAD_PLUGIN_MAX_NAME, S_NAME, 0, "RadPluginInfo.name", e))) return rc;
    if ((rc = check_str(pr, in->version, RAD_PLUGIN_MAX_NAME, S_TEXT, S_NULL_OK | S_EMPTY_OK, "RadPluginInfo.version", e))) return rc;
    return check_str(pr, in->description, RAD_PLUGIN_MAX_TEXT, S_TEXT, S_NULL_OK | S_EMPTY_OK, "RadPluginInfo.description", e);
}

int rad_plugin_info_check(const RadPluginInfo *info, RadErr *e) {
    Probe pr;
    int rc = probe_open(&pr, e);
    if (rc) return rc;
    rc = info_check(&pr, info, e);
    probe_close(&pr);
    return rc;
}

int rad_arch_exports_check(const char *arch_id, const char *quant, int serves_imports, RadErr *e) {
    Probe pr;
    int rc = probe_open(&pr, e);
    if (rc) return rc;
    if (!(rc = check_str(&pr, arch_id, RAD_PLUGIN_MAX_NAME, S_NAME, 0, "rad_arch_id()", e)))
        rc = check_str(&pr, quant, RAD_PLUGIN_MAX_NAME, S_NAME, S_EMPTY_OK, "rad_arch_quant()", e);
    probe_close(&pr);
    if (!rc && serves_imports != 0 && serves_imports != 1)
        rc = rad_err_set(e, RAD_E_FORMAT, "rad_arch_serves_imports() returned %d, not 0 or 1", serves_imports);
    return rc;
}

/* ---- RadKernelLib ---------------------------------------------------------------------------- */

typedef struct KName {
    const char *op, *variant;
    uint32_t i;
} KName;

static int cmp_kname(const void *a, const void *b) {
    const KName *x = a, *y = b;
    int c = strcmp(x->op, y->op);
    if (!c) c = strcmp(x->variant, y->variant);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

/* ABI 1.2's knob list (docs/PLUGINS.md, "Knobs"): a table a tuning file names values in, so
 * every name is unique and every default one of its values; a knob that changes arithmetic
 * may not sit on a BITWISE kernel (it would loosen what the kernel states). */
static int knobs_check(Probe *pr, const RadKernel *k, const char *who, RadErr *e) {
    const uint32_t n = k->n_knobs;
    if (!n && !k->knobs) return RAD_OK;
    if (n > RAD_KNOB_MAX) return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.n_knobs %u is over %u", who, n, RAD_KNOB_MAX);
    if (!k->knobs) return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.knobs is NULL with n_knobs %u", who, n);
    if (!n) return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.knobs is set with n_knobs 0", who);
    if ((uintptr_t)k->knobs % alignof(RadKnob) || !probe_range(pr, k->knobs, sizeof k->knobs[0].struct_size))
        return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.knobs (%p) is misaligned or unmapped", who, (const void *)k->knobs);
    const uint32_t ks = k->knobs[0].struct_size;
    if (ks < offsetof(RadKnob, def) + sizeof k->knobs[0].def || ks > sizeof(RadKnob) || ks % alignof(RadKnob))
        return rad_err_set(e, RAD_E_FORMAT, "%s: RadKnob.struct_size %u is not a size of ABI %u.2..%u.%u", who, ks, RAD_ABI_MAJOR,
                           RAD_ABI_MAJOR, RAD_ABI_MINOR);
    if (!probe_range(pr, k->knobs, (size_t)n * ks))
        return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.knobs: %u entries of %u bytes are not all mapped", who, n, ks);
    for (uint32_t i = 0; i < n; i++) {
        const RadKnob *kn = rad_kernel_knob(k, i);
        char f[200];
        int rc;
        snprintf(f, sizeof f, "%s: RadKernel.knobs[%u].name", who, i);
        if (kn->struct_size != ks)
            return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.knobs[%u].struct_size %u differs from knob 0's %u", who, i,
                               kn->struct_size, ks);
        if ((rc = check_str(pr, kn->name, RAD_PLUGIN_MAX_NAME, S_OP, 0, f, e))) return rc;
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(rad_kernel_knob(k, j)->name, kn->name) == 0)
                return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.knobs[%u] and [%u] are both named '%s'", who, j, i, kn->name);
        if (kn->n_values < 1 || kn->n_values > RAD_KNOB_MAX_VALUES)
            return rad_err_set(e, RAD_E_FORMAT, "%s: knob '%s': n_values %u is not 1..%u", who, kn->name, kn->n_values,
                               RAD_KNOB_MAX_VALUES);
        if (!kn->values || (uintptr_t)kn->values % alignof(int64_t) ||
            !probe_range(pr, kn->values, (size_t)kn->n_values * sizeof *kn->values))
            return rad_err_set(e, RAD_E_FORMAT, "%s: knob '%s': values (%u at %p) are NULL, misaligned or unmapped", who, kn->name,
                               kn->n_values, (const void *)kn->values);
        int has_def = 0;
        for (uint32_t v = 0; v < kn->n_values; v++) {
            has_def |= kn->values[v] == kn->def;
            for (uint32_t w = 0; w < v; w++)
                if (kn->values[w] == kn->values[v])
                    return rad_err_set(e, RAD_E_FORMAT, "%s: knob '%s': value %lld is listed twice", who, kn->name,
                                       (long long)kn->values[v]);
        }
        if (!has_def)
            return rad_err_set(e, RAD_E_FORMAT, "%s: knob '%s': default %lld is not one of its values", who, kn->name,
                               (long long)kn->def);
        if (kn->effect != RAD_KNOB_SAME_BITS && kn->effect != RAD_KNOB_ARITH)
            return rad_err_set(e, RAD_E_FORMAT, "%s: knob '%s': effect %d is not SAME_BITS (0) or ARITH (1)", who, kn->name,
                               (int)kn->effect);
        if (rad_knob_n_max(kn) < 0)
            return rad_err_set(e, RAD_E_FORMAT, "%s: knob '%s': n_max %lld is negative (0: any rows)", who, kn->name,
                               (long long)rad_knob_n_max(kn));
        if (kn->effect == RAD_KNOB_ARITH && k->exactness == RAD_EXACT_BITWISE)
            return rad_err_set(e, RAD_E_FORMAT, "%s: knob '%s' changes the arithmetic (ARITH) of a BITWISE kernel (a knob may "
                               "not loosen what the kernel states)", who, kn->name);
    }
    return RAD_OK;
}

static int kernel_check(Probe *pr, const RadKernel *k, uint32_t i, uint32_t size, RadErr *e) {
    char f[64];
    int rc;
#define FIELD(name) (snprintf(f, sizeof f, "kernel %u: RadKernel." name, i), f)
    if (k->struct_size != size)
        return rad_err_set(e, RAD_E_FORMAT, "kernel %u: RadKernel.struct_size %u differs from kernel 0's %u (a table has one entry size)",
                           i, k->struct_size, size);
    if ((rc = check_str(pr, k->op, RAD_PLUGIN_MAX_NAME, S_OP, 0, FIELD("op"), e))) return rc;
    if ((rc = check_str(pr, k->variant, RAD_PLUGIN_MAX_NAME, S_NAME, 0, FIELD("variant"), e))) return rc;
#undef FIELD
    char who[160];
    snprintf(who, sizeof who, "kernel %u (%s:%s)", i, k->op, k->variant);
    if (!enc_bits_ok(k->weight_encs))
        return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.weight_encs has bit %d, not an encoding (there are %d)", who,
                           first_bad_bit(k->weight_encs), RAD_ENC_COUNT);
    if ((unsigned)k->act_dtype >= RAD_ENC_COUNT)
        return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.act_dtype %d is not an encoding", who, (int)k->act_dtype);
    if (k->n_min < 0 || k->n_max < 0 || (k->n_max && k->n_max < k->n_min))
        return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.n_min %lld, n_max %lld is not an extent (n_max 0: no limit)", who,
                           (long long)k->n_min, (long long)k->n_max);
    if (k->kv_block_size > RAD_PLUGIN_MAX_KV_BLOCK)
        return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.kv_block_size %u is over %u", who, k->kv_block_size, RAD_PLUGIN_MAX_KV_BLOCK);
    if (k->exactness != RAD_EXACT_BITWISE && k->exactness != RAD_EXACT_TOLERANCE && k->exactness != RAD_EXACT_Q8ACT &&
        k->exactness != RAD_EXACT_BF16ACT && k->exactness != RAD_EXACT_F8ACT)
        return rad_err_set(e, RAD_E_FORMAT,
                           "%s: RadKernel.exactness %d is not BITWISE (0), TOLERANCE (1), Q8ACT (2), BF16ACT (3) or F8ACT (4)",
                           who, (int)k->exactness);
    /* the per-output bounds are defined for a GEMM's x · Wᵀ only (docs/OPS.md) */
    if ((k->exactness == RAD_EXACT_Q8ACT || k->exactness == RAD_EXACT_BF16ACT || k->exactness == RAD_EXACT_F8ACT) &&
        strcmp(k->op, "gemm_nt") && strcmp(k->op, "gemm_nt2") && strcmp(k->op, "gemm_nt3") && strcmp(k->op, "logits_gemm"))
        return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.exactness %s is for the GEMMs (gemm_nt, gemm_nt2, gemm_nt3, "
                           "logits_gemm), not '%s'", who,
                           k->exactness == RAD_EXACT_Q8ACT ? "Q8ACT" : k->exactness == RAD_EXACT_BF16ACT ? "BF16ACT" : "F8ACT", k->op);
    /* NaN would pass every "tolerance > limit" test the selector makes */
    if (!isfinite(k->tolerance) || k->tolerance < 0)
        return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.tolerance %g is not a finite bound >= 0", who, k->tolerance);
    if (k->batch_invariant > 1)
        return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.batch_invariant %u is not 0 or 1", who, k->batch_invariant);
    if (size >= offsetof(RadKernel, attn_window) + sizeof k->attn_window && k->attn_window > 1)
        return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.attn_window %u is not 0 or 1", who, k->attn_window);
    if (FN_NULL(k->run)) return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.run is NULL", who);
    if (!FN_OK(pr, k->run)) return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.run points at unmapped memory", who);
    if (!FN_NULL(k->workspace) && !FN_OK(pr, k->workspace))
        return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.workspace points at unmapped memory", who);
    if (!enc_bits_ok(k->kv_encs))
        return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.kv_encs has bit %d, not an encoding", who, first_bad_bit(k->kv_encs));
    if (k->kvq_ok & ~((1u << RAD_KVQ_V4) | (1u << RAD_KVQ_K6V4)))
        return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.kvq_ok 0x%x has bits that are no narrow KV layout", who, k->kvq_ok);
    if (size >= offsetof(RadKernel, packed_encs) + sizeof k->packed_encs && !enc_bits_ok(k->packed_encs))
        return rad_err_set(e, RAD_E_FORMAT, "%s: RadKernel.packed_encs has bit %d, not an encoding", who, first_bad_bit(k->packed_encs));
    if (size >= offsetof(RadKernel, n_knobs) + sizeof k->n_knobs) return knobs_check(pr, k, who, e);
    return RAD_OK;
}

static int lib_check(Probe *pr, const RadKernelLib *l, RadErr *e) {
    if (!l) return rad_err_set(e, RAD_E_FORMAT, "rad_kernels() returned NULL");
    if ((uintptr_t)l % alignof(RadKernelLib))
        return rad_err_set(e, RAD_E_FORMAT, "rad_kernels() returned a misaligned pointer (%p)", (const void *)l);
    if (!probe_range(pr, l, sizeof l->struct_size))
        return rad_err_set(e, RAD_E_FORMAT, "rad_kernels() points at unmapped memory (%p)", (const void *)l);
    /* every field through sync is ABI 1.0 and read without a size check */
    size_t min = offsetof(RadKernelLib, sync) + sizeof l->sync;
    if (l->struct_size < min)
        return rad_err_set(e, RAD_E_FORMAT, "RadKernelLib.struct_size %u is smaller than ABI %u.0's %zu", l->struct_size, RAD_ABI_MAJOR, min);
    if (l->struct_size > sizeof *l)
        return rad_err_set(e, RAD_E_FORMAT, "RadKernelLib.struct_size %u is larger than ABI %u.%u's %zu", l->struct_size,
                           RAD_ABI_MAJOR, RAD_ABI_MINOR, sizeof *l);
    if (!probe_range(pr, l, l->struct_size))
        return rad_err_set(e, RAD_E_FORMAT, "RadKernelLib (%u bytes at %p) is not all mapped", l->struct_size, (const void *)l);
    if (l->device != RAD_DEVICE_CPU && l->device != RAD_DEVICE_CUDA)
        return rad_err_set(e, RAD_E_FORMAT, "RadKernelLib.device %d is not RAD_DEVICE_CPU (0) or RAD_DEVICE_CUDA (1)", (int)l->device);
    int hooks = !FN_NULL(l->alloc) + !FN_NULL(l->free) + !FN_NULL(l->copy) + !FN_NULL(l->sync);
    if (l->device == RAD_DEVICE_CUDA ? hooks != 4 : hooks != 0 && hooks != 4)
        return rad_err_set(e, RAD_E_FORMAT, "RadKernelLib: alloc, free, copy and sync are %d of 4 set (a device library sets all four, "
                           "a CPU library none)", hooks);
    if ((!FN_NULL(l->init) && !FN_OK(pr, l->init)) || (!FN_NULL(l->fini) && !FN_OK(pr, l->fini)))
        return rad_err_set(e, RAD_E_FORMAT, "RadKernelLib.init or .fini points at unmapped memory");
    if (l->struct_size >= offsetof(RadKernelLib, pack) + sizeof l->pack) {
        if (FN_NULL(l->pack_size) != FN_NULL(l->pack))
            return rad_err_set(e, RAD_E_FORMAT, "RadKernelLib.%s is set without .%s (both or neither)",
                               FN_NULL(l->pack) ? "pack_size" : "pack", FN_NULL(l->pack) ? "pack" : "pack_size");
        if (!FN_NULL(l->pack) && (!FN_OK(pr, l->pack) || !FN_OK(pr, l->pack_size)))
            return rad_err_set(e, RAD_E_FORMAT, "RadKernelLib.pack or .pack_size points at unmapped memory");
    }
    uint32_t n = l->n_kernels;
    if (n > RAD_PLUGIN_MAX_KERNELS)
        return rad_err_set(e, RAD_E_FORMAT, "RadKernelLib.n_kernels %u is over the limit of %u", n, RAD_PLUGIN_MAX_KERNELS);
    if (!n) return RAD_OK;
    if (!l->kernels) return rad_err_set(e, RAD_E_FORMAT, "RadKernelLib.kernels is NULL with n_kernels %u", n);
    if ((uintptr_t)l->kernels % alignof(RadKernel))
        return rad_err_set(e, RAD_E_FORMAT, "RadKernelLib.kernels is misaligned (%p)", (const void *)l->kernels);
    if (!probe_range(pr, l->kernels, sizeof l->kernels[0].struct_size))
        return rad_err_set(e, RAD_E_FORMAT, "RadKernelLib.kernels points at unmapped memory (%p)", (const void *)l->kernels);
    uint32_t size = l->kernels[0].struct_size;
    size_t kmin = offsetof(RadKernel, kvq_ok) + sizeof l->kernels[0].kvq_ok;
    if (size < kmin || size > sizeof(RadKernel) || size % alignof(RadKernel))
        return rad_err_set(e, RAD_E_FORMAT, "kernel 0: RadKernel.struct_size %u is not a size of ABI %u.0..%u.%u (%zu..%zu, a multiple of %zu)",
                           size, RAD_ABI_MAJOR, RAD_ABI_MAJOR, RAD_ABI_MINOR, kmin, sizeof(RadKernel), alignof(RadKernel));
    if (!probe_range(pr, l->kernels, (size_t)n * size))
        return rad_err_set(e, RAD_E_FORMAT, "RadKernelLib.kernels: %u entries of %u bytes at %p are not all mapped (is n_kernels right?)",
                           n, size, (const void *)l->kernels);
    int rc;
    for (uint32_t i = 0; i < n; i++)
        if ((rc = kernel_check(pr, rad_kernel_at(l, i), i, size, e))) return rc;
    /* (library, op, variant) names a kernel in tune tables and --debug-graph: unique */
    KName *names = malloc((size_t)n * sizeof *names);
    if (!names) return rad_err_set(e, RAD_E_NOMEM, "out of memory checking a kernel table");
    for (uint32_t i = 0; i < n; i++) names[i] = (KName){rad_kernel_at(l, i)->op, rad_kernel_at(l, i)->variant, i};
    qsort(names, n, sizeof *names, cmp_kname);
    for (uint32_t i = 1; i < n && !rc; i++)
        if (strcmp(names[i].op, names[i - 1].op) == 0 && strcmp(names[i].variant, names[i - 1].variant) == 0)
            rc = rad_err_set(e, RAD_E_FORMAT, "kernels %u and %u are both %s:%s (an op's variants need distinct names)", names[i - 1].i,
                             names[i].i, names[i].op, names[i].variant);
    free(names);
    return rc;
}

int rad_kernel_lib_check(const RadKernelLib *lib, RadErr *e) {
    Probe pr;
    int rc = probe_open(&pr, e);
    if (rc) return rc;
    rc = lib_check(&pr, lib, e);
    probe_close(&pr);
    return rc;
}

/* ---- loading --------------------------------------------------------------------------------- */

/* dlsym into a function pointer without the object-to-function cast warning. */
static void *sym(void *dl, const char *name) { return dlsym(dl, name); }
#define LOAD_FN(dst, dl, name) do { void *p_ = sym(dl, name); memcpy(&(dst), &p_, sizeof p_); } while (0)

/* A path as messages show it: one line, whatever bytes the file name holds. */
static void shown(char *dst, size_t n, const char *path) {
    size_t i = 0;
    for (; path[i] && i + 1 < n; i++) dst[i] = (unsigned char)path[i] < 0x20 || path[i] == 0x7F ? '?' : path[i];
    dst[i] = 0;
}

/* Loads one file into *p, or says why not in e (without the path); *name gets the plugin's
 * name once its RadPluginInfo passed. */
static int load_one(const RadPluginSet *s, const char *path, RadPlugin *p, char *name, size_t name_n, RadErr *e) {
    memset(p, 0, sizeof *p);
    if (strlen(path) >= sizeof p->path) return rad_err_set(e, RAD_E_ARG, "its path is over %zu bytes", sizeof p->path - 1);
    snprintf(p->path, sizeof p->path, "%s", path);
    /* dlopen on a FIFO would wait for a writer forever */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return rad_err_set(e, RAD_E_IO, "not a regular file (%s)", S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory"
                                                              : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : "a socket");
    RadErr oe = {0};
    int fd = rad_open_regular(path, NULL, &oe);
    if (fd < 0) {
        const char *why = strncmp(oe.msg, path, strlen(path)) == 0 && oe.msg[strlen(path)] == ':' ? oe.msg + strlen(path) + 2 : oe.msg;
        return rad_err_set(e, RAD_E_IO, "%s", why);
    }
    close(fd);
    p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!p->dl) {
        const char *why = dlerror();
        return rad_err_set(e, RAD_E_IO, "cannot load: %s", why ? why : "dlopen failed");
    }
    rad_plugin_info_fn info_fn;
    LOAD_FN(info_fn, p->dl, "rad_plugin_info");
    if (!info_fn) return rad_err_set(e, RAD_E_FORMAT, "exports no rad_plugin_info");
    p->info = info_fn();
    int rc = rad_plugin_info_check(p->info, e);
    if (rc) return rc;
    snprintf(name, name_n, "%s", p->info->name);
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->p[i].info->name, p->info->name) == 0) {
            char a[1024];
            shown(a, sizeof a, s->p[i].path);
            return rad_err_set(e, RAD_E_ARG, "two plugins named '%s': this one and %s, loaded first (names must be unique)",
                               p->info->name, a);
        }
    if (p->info->kind == RAD_PLUGIN_ARCH) {
        const char *(*id_fn)(void), *(*quant_fn)(void);
        int (*imports_fn)(void);
        LOAD_FN(id_fn, p->dl, "rad_arch_id");
        LOAD_FN(quant_fn, p->dl, "rad_arch_quant");
        LOAD_FN(imports_fn, p->dl, "rad_arch_serves_imports");
        LOAD_FN(p->declare, p->dl, "rad_arch_declare");
        LOAD_FN(p->step, p->dl, "rad_arch_step");
        LOAD_FN(p->probe, p->dl, "rad_arch_probe");
        LOAD_FN(p->chat_format, p->dl, "rad_arch_chat_format");
        LOAD_FN(p->audio_format, p->dl, "rad_arch_audio_format");
        LOAD_FN(p->text_prepare, p->dl, "rad_arch_text_prepare");
        LOAD_FN(p->video_positions, p->dl, "rad_arch_video_positions");
        LOAD_FN(p->video_pack, p->dl, "rad_arch_video_pack");
        LOAD_FN(p->encode_geom, p->dl, "rad_arch_encode_geom");
        const char *miss = !id_fn ? "rad_arch_id" : !quant_fn ? "rad_arch_quant" : !p->declare ? "rad_arch_declare"
                         : !p->step ? "rad_arch_step" : NULL;
        if (miss) return rad_err_set(e, RAD_E_FORMAT, "architecture plugin '%s' exports no %s", p->info->name, miss);
        p->arch_id = id_fn();
        p->quant = quant_fn();
        p->serves_imports = imports_fn ? imports_fn() : 0;
        RadErr ae = {0};
        if ((rc = rad_arch_exports_check(p->arch_id, p->quant, p->serves_imports, &ae)))
            return rad_err_set(e, rc, "architecture plugin '%s': %s", p->info->name, ae.msg);
    } else {
        rad_kernels_fn k;
        LOAD_FN(k, p->dl, "rad_kernels");
        if (!k) return rad_err_set(e, RAD_E_FORMAT, "kernel library '%s' exports no rad_kernels", p->info->name);
        p->lib = k();
        RadErr ke = {0};
        if ((rc = rad_kernel_lib_check(p->lib, &ke))) return rad_err_set(e, rc, "kernel library '%s': %s", p->info->name, ke.msg);
    }
    return RAD_OK;
}

static int add_plugin(RadPluginSet *s, const RadPlugin *p, RadErr *e) {
    RadPlugin *np = realloc(s->p, (size_t)(s->n + 1) * sizeof *np);
    if (!np) return rad_err_set(e, RAD_E_NOMEM, "out of memory loading plugins");
    s->p = np;
    s->p[s->n++] = *p;
    return RAD_OK;
}

int rad_plugins_load_file(RadPluginSet *s, const char *path, RadErr *e) {
    RadPlugin p;
    RadErr why = {0};
    char name[64] = "";
    int rc = load_one(s, path, &p, name, sizeof name, &why);
    if (!rc) rc = add_plugin(s, &p, &why);
    if (rc) {
        if (p.dl) dlclose(p.dl);
        char a[1024];
        shown(a, sizeof a, path);
        return rad_err_set(e, rc, "plugin %s: %s", a, why.msg);
    }
    return RAD_OK;
}

static int skip(RadPluginSet *s, const char *path, const char *name, const char *why, RadErr *e) {
    RadPluginSkip *ns = realloc(s->skipped, (size_t)(s->n_skipped + 1) * sizeof *ns);
    if (!ns) return rad_err_set(e, RAD_E_NOMEM, "out of memory loading plugins");
    s->skipped = ns;
    RadPluginSkip *k = &ns[s->n_skipped++];
    shown(k->path, sizeof k->path, path);
    snprintf(k->name, sizeof k->name, "%s", name);
    shown(k->why, sizeof k->why, why);
    if (!s->quiet) fprintf(stderr, "%s: warning: plugin %s skipped: %s\n", program_invocation_short_name, k->path, k->why);
    return RAD_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int rad_plugins_load(RadPluginSet *s, char *const *dirs, int n_dirs, RadErr *e) {
    int strict, rc = rad_plugins_strict(&strict, e);
    if (rc) return rc;
    if (n_dirs > (int)RAD_PLUGIN_MAX_DIRS)
        return rad_err_set(e, RAD_E_LIMIT, "the plugin path (--plugin-dir, $RADIANCE_PLUGIN_PATH) names more than %u folders",
                           RAD_PLUGIN_MAX_DIRS);
    for (int d = 0; d < n_dirs; d++)
        if (!dirs[d][0]) return rad_err_set(e, RAD_E_ARG, "--plugin-dir: an empty folder name");
    for (int d = 0; d < n_dirs && !rc; d++) {
        DIR *dir = opendir(dirs[d]);
        if (!dir) continue;
        char **names = NULL;
        int n = 0;
        struct dirent *de;
        while ((de = readdir(dir))) {
            size_t l = strlen(de->d_name);
            if (l > 3 && strcmp(de->d_name + l - 3, ".so") == 0 && de->d_name[0] != '.' && push_dir(&names, &n, de->d_name)) {
                rc = rad_err_set(e, RAD_E_NOMEM, "out of memory listing %s", dirs[d]);
                break;
            }
        }
        closedir(dir);
        if (!rc) qsort(names, (size_t)n, sizeof *names, cmp_str); /* a stable order, whatever readdir says */
        for (int i = 0; i < n && !rc; i++) {
            char path[2048];
            snprintf(path, sizeof path, "%s/%s", dirs[d], names[i]);
            RadPlugin p;
            RadErr why = {0};
            char name[64] = "";
            int bad = load_one(s, path, &p, name, sizeof name, &why);
            if (!bad) {
                rc = add_plugin(s, &p, e);
                if (rc) dlclose(p.dl);
                continue;
            }
            if (p.dl) dlclose(p.dl);
            if (bad == RAD_E_NOMEM || strict) {
                char a[1024];
                shown(a, sizeof a, path);
                rc = rad_err_set(e, bad, "plugin %s: %s%s", a, why.msg, strict ? " (RADIANCE_PLUGINS_STRICT=1)" : "");
            } else {
                rc = skip(s, path, name, why.msg, e);
            }
        }
        rad_plugin_dirs_free(names, n);
    }
    return rc;
}

void rad_plugins_skip_note(const RadPluginSet *s, char *buf, size_t n) {
    size_t k = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < s->n_skipped && k + 1 < n; i++) {
        int w = snprintf(buf + k, n - k, "%s%s (%s)", i ? ", " : "; skipped: ", s->skipped[i].path, s->skipped[i].why);
        if (w < 0) break;
        k += (size_t)w;
    }
}

int rad_plugins_pick_kernels(const RadPluginSet *s, const char *list, RadDevice device, RadPick how,
                             const RadPlugin **out, int cap, int *n, const char **rest, RadErr *e) {
    *n = 0;
    if (rest) *rest = list;
    char note[400];
    rad_plugins_skip_note(s, note, sizeof note);
    if (!list) {
        if (how == RAD_PICK_LEADING) return RAD_OK; /* no list, no leading run */
        for (int i = 0; i < s->n && *n < cap; i++)
            if (s->p[i].info->kind == RAD_PLUGIN_KERNELS && s->p[i].lib->device == device) out[(*n)++] = &s->p[i];
        if (!*n)
            return rad_err_set(e, RAD_E_NOTFOUND, "no %s kernel library installed (looked for RAD_PLUGIN_KERNELS plugins)%s",
                               device == RAD_DEVICE_CPU ? "CPU" : "CUDA", note);
        return RAD_OK;
    }
    const char *dev = device == RAD_DEVICE_CPU ? "CPU" : "CUDA";
    if (!*list) return rad_err_set(e, RAD_E_ARG, "--kernels: an empty list");
    for (const char *p = list;; p++) {
        const char *end = strchr(p, ',');
        size_t l = end ? (size_t)(end - p) : strlen(p);
        if (!l) return rad_err_set(e, RAD_E_ARG, "--kernels: an empty item in '%.64s'", list);
        if (l > RAD_PLUGIN_MAX_NAME)
            return rad_err_set(e, RAD_E_NOTFOUND, "--kernels: no kernel library named '%.*s...' is installed", 32, p);
        const RadPlugin *found = NULL;
        for (int i = 0; i < s->n && !found; i++)
            if (s->p[i].info->kind == RAD_PLUGIN_KERNELS && strlen(s->p[i].info->name) == l && memcmp(s->p[i].info->name, p, l) == 0)
                found = &s->p[i];
        if (how == RAD_PICK_LEADING && (!found || found->lib->device != device)) {
            *rest = p; /* the next pick reads (and refuses) it */
            return RAD_OK;
        }
        if (!found) {
            for (int i = 0; i < s->n_skipped; i++)
                if (strlen(s->skipped[i].name) == l && memcmp(s->skipped[i].name, p, l) == 0)
                    return rad_err_set(e, RAD_E_NOTFOUND, "--kernels: kernel library '%.*s' (%s) was skipped: %s", (int)l, p,
                                       s->skipped[i].path, s->skipped[i].why);
            return rad_err_set(e, RAD_E_NOTFOUND, "--kernels: no kernel library named '%.*s' is installed%s", (int)l, p, note);
        }
        for (int i = 0; i < *n; i++)
            if (out[i] == found) return rad_err_set(e, RAD_E_ARG, "--kernels: '%.*s' named twice", (int)l, p);
        if (how == RAD_PICK_ALL && found->lib->device != device)
            return rad_err_set(e, RAD_E_UNSUPPORTED, "--kernels: '%.*s' is a %s library; this engine runs %s kernels", (int)l, p,
                               found->lib->device == RAD_DEVICE_CPU ? "CPU" : "CUDA", dev);
        if (*n == cap) return rad_err_set(e, RAD_E_ARG, "--kernels: more than %d libraries", cap);
        out[(*n)++] = found;
        if (!end) {
            if (rest) *rest = p + l;
            break;
        }
        p = end;
    }
    return RAD_OK;
}

static void list_arch(const RadPluginSet *s, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < s->n && k < n; i++) {
        if (s->p[i].info->kind != RAD_PLUGIN_ARCH) continue;
        k += (size_t)snprintf(buf + k, n - k, "%s%s(%s, \"%s\")", k ? ", " : "", s->p[i].info->name, s->p[i].arch_id, s->p[i].quant);
    }
    if (!buf[0]) snprintf(buf, n, "none");
}

int rad_plugins_find_arch(const RadPluginSet *s, const char *id, const char *quant, const char *origin,
                          const RadPlugin **out, RadErr *e) {
    *out = NULL;
    if (!quant) quant = "";
    for (int i = 0; i < s->n; i++) {
        const RadPlugin *p = &s->p[i];
        if (p->info->kind == RAD_PLUGIN_ARCH && strcmp(p->arch_id, id) == 0 && strcmp(p->quant, quant) == 0) {
            *out = p;
            return RAD_OK;
        }
    }
    char have[1024], note[400];
    list_arch(s, have, sizeof have);
    rad_plugins_skip_note(s, note, sizeof note); /* the plugin it needed may be one of them */
    if (origin && strncmp(origin, "import:", 7) == 0) {
        const RadPlugin *found = NULL;
        for (int i = 0; i < s->n; i++) {
            const RadPlugin *p = &s->p[i];
            if (p->info->kind != RAD_PLUGIN_ARCH || strcmp(p->arch_id, id) != 0 || !p->quant[0] || !p->serves_imports) continue;
            if (found)
                return rad_err_set(e, RAD_E_ARG, "two plugins serve imported '%s' quantisations of '%s': '%s' and '%s' "
                                   "(one family has one importing plugin)", quant, id, found->info->name, p->info->name);
            found = p;
        }
        if (found) {
            *out = found;
            return RAD_OK;
        }
        return rad_err_set(e, RAD_E_NOTFOUND, "no plugin serves architecture '%s' with the imported quantisation '%s' (%s); installed: %s%s",
                           id, quant, origin, have, note);
    }
    int known = 0;
    for (int i = 0; i < s->n; i++)
        if (s->p[i].info->kind == RAD_PLUGIN_ARCH && strcmp(s->p[i].arch_id, id) == 0) known = 1;
    if (!known)
        return rad_err_set(e, RAD_E_NOTFOUND, "unknown architecture '%s'; installed: %s%s", id, have, note);
    return rad_err_set(e, RAD_E_NOTFOUND, "no plugin for ('%s', \"%s\"); installed: %s%s", id, quant, have, note);
}

int rad_plugin_check_flags(const RadPlugin *p, const RadModelMeta *meta, const RadDeployFlags *f,
                           RadArchProbe *probe, RadErr *e) {
    memset(probe, 0, sizeof *probe);
    probe->struct_size = sizeof *probe;
    if (p->probe) {
        int rc = p->probe(meta, probe);
        if (rc) return rad_err_set(e, RAD_E_ARG, "plugin '%s': its probe refused this model (status %d)", p->info->name, rc);
    }
    const char *flag = NULL;
    if (f->kv_quant != RAD_KVQ_NONE && !(probe->kv_quant_ok & (1u << f->kv_quant)))
        flag = f->kv_quant == RAD_KVQ_V4 ? "--kv-cache-dtype fp8_v4" : "--kv-cache-dtype fp8_k6v4";
    else if (f->control_vector && !probe->control_vector_ok) flag = "--control-vector";
    else if (f->tp_attn_rows && !probe->tp_attn_rows_ok) flag = "--tp-attn-split rows";
    else if (f->state_f16 && !probe->state_f16_ok) flag = "--state-cache-dtype f16";
    else if (f->kv_resident && !probe->kv_stream_ok) flag = "--kv-resident";
    if (flag)
        return rad_err_set(e, RAD_E_ARG, "%s: plugin '%s' does not serve it (its probe bit is 0)", flag, p->info->name);
    if (f->spec_depth && probe->draft_depth_fixed && f->spec_depth != probe->draft_depth)
        return rad_err_set(e, RAD_E_ARG, "--spec-depth %u: plugin '%s' drafts in blocks of %u (draft_depth_fixed: its trained "
                           "block is the only depth served)", f->spec_depth, p->info->name, probe->draft_depth);
    return RAD_OK;
}

/* "<pre>L": L strictly decimal, no sign or leading zero; -1 when the name is not one. */
static long cvec_layer_of(const char *name, const char *pre) {
    const size_t np = strlen(pre);
    if (strncmp(name, pre, np)) return -1;
    const char *d = name + np;
    size_t n = strspn(d, "0123456789");
    if (!n || d[n] || n > 9 || (d[0] == '0' && n > 1)) return -1;
    return strtol(d, NULL, 10);
}
static long cvec_layer(const char *name) { return cvec_layer_of(name, "direction."); }

const float *rad_cvec_weight(const RadControlVector *cv, const char *name) {
    if (!cv || !name || cv->scale != 1.0f) return NULL;
    const long l = cvec_layer_of(name, RAD_CVEC_WEIGHT_PREFIX);
    if (l < 1 || (uint64_t)l >= cv->n_layers) return NULL;
    return cv->dirs + (size_t)l * cv->n_embd;
}

int rad_cvec_load(const char *path, const RadModelMeta *meta, RadControlVector **out, RadErr *e) {
    *out = NULL;
    RadModelFile m;
    RadErr oe = {0};
    if (rad_model_open(path, &m, &oe)) /* the reader's line names the file; the flag goes first */
        return rad_err_set(e, oe.code, "--control-vector: %s", oe.msg);
    int rc = RAD_OK;
    uint32_t nl = meta->n_layers > 0 ? (uint32_t)meta->n_layers : 0, ne = meta->n_embd > 0 ? (uint32_t)meta->n_embd : 0;
    RadControlVector *cv = NULL;
    if (strcmp(m.format, "gguf"))
        rc = rad_err_set(e, RAD_E_FORMAT, "--control-vector %s: a %s file; expected llama.cpp's control-vector GGUF", path, m.format);
    else if (!m.n_tensors)
        rc = rad_err_set(e, RAD_E_FORMAT, "--control-vector %s: no direction.L tensor (not a control vector)", path);
    else if (!(cv = calloc(1, sizeof *cv + (size_t)nl * ne * sizeof(float))))
        rc = rad_err_set(e, RAD_E_NOMEM, "--control-vector %s: out of memory for %u x %u floats", path, nl, ne);
    for (uint64_t i = 0; !rc && i < m.n_tensors; i++) {
        const RadTensor *t = &m.tensors[i];
        long l = cvec_layer(t->name);
        if (l < 0)
            rc = rad_err_set(e, RAD_E_FORMAT, "--control-vector %s: tensor '%s' is not a direction.L tensor", path, t->name);
        else if (l == 0 || (uint64_t)l >= nl) /* llama.cpp adds direction.L after layer L, from 1 */
            rc = rad_err_set(e, RAD_E_FORMAT, "--control-vector %s: tensor '%s': layer %ld is outside 1..%u (the model has %u layers)",
                             path, t->name, l, nl ? nl - 1 : 0, nl);
        else if (t->enc != RAD_ENC_F32 || t->rank != 1 || t->n_planes != 1)
            rc = rad_err_set(e, RAD_E_FORMAT, "--control-vector %s: tensor '%s': expected one f32 vector", path, t->name);
        else if (t->shape[0] != ne)
            rc = rad_err_set(e, RAD_E_FORMAT, "--control-vector %s: tensor '%s': %" PRIu64 " values, the model's n_embd is %u",
                             path, t->name, t->shape[0], ne);
        else if (!t->planes[0].data || t->planes[0].nbytes != (uint64_t)ne * sizeof(float))
            rc = rad_err_set(e, RAD_E_FORMAT, "--control-vector %s: tensor '%s': its data is not in the file", path, t->name);
        else {
            float *row = (float *)(cv + 1) + (size_t)l * ne;
            memcpy(row, t->planes[0].data, (size_t)ne * sizeof(float));
            for (uint32_t j = 0; !rc && j < ne; j++)
                if (!isfinite(row[j]))
                    rc = rad_err_set(e, RAD_E_FORMAT, "--control-vector %s: tensor '%s': value %u is not finite", path, t->name, j);
        }
    }
    rad_model_free(&m);
    if (rc) return free(cv), rc;
    *cv = (RadControlVector){.n_layers = nl, .n_embd = ne, .dirs = (const float *)(cv + 1), .scale = 1.0f};
    *out = cv;
    return RAD_OK;
}
