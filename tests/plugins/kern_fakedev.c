/* kern_fakedev.c — a "CUDA" kernel library that runs on the CPU, to check the engine's device
 * deployment without a GPU (tests/runtime/device_test.c).
 *
 * It says RAD_DEVICE_CUDA and provides the four memory hooks; its "device memory" is host memory
 * it hands out and registers. Its kernels are libref's (kern_ref.so beside it in ../plugins/, or
 * $RAD_FAKEDEV_REF), each wrapped: before forwarding a call it checks what a device library may
 * rely on (docs/PLUGINS.md, "Device memory"): every buffer, weight, workspace, KV pool and raw
 * operand it is given is memory it allocated, a raw operand's host values (planes[1]) are host
 * memory holding the same values, and the batch is host memory. A breach fails the call with
 * RAD_E_ARG and one line on stderr naming the op and the operand, so the step fails. Copies check
 * their direction the same way. Counters (fakedev_counts) let a test see the hooks were used.
 *
 * Under tensor parallelism each state is one rank's "device": the memory a state hands out is
 * that rank's, and a kernel, copy or free given another rank's memory is a breach as above (two
 * GPUs do not share memory). Its collectives are libref's over shared memory; a state refuses to
 * start on a device_index another rank of its communicator holds. RAD_FAKEDEV_ASYNC=1 makes a
 * released collective return RAD_OK and the rank's next sync RAD_E_IO, as NCCL's queued ones do. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi/rad_kernels.h"

#define MAX_KERNELS 128
#define MAX_BLOCKS 4096

typedef struct FakeState {
    void *ref_state;
    int device;                   /* RadKernelLibConfig.device_index */
    uint32_t world;
    RadCommId comm;               /* the communicator's name (world > 1) */
    int in_step;                  /* between step_begin and step_end */
    int async;                    /* RAD_FAKEDEV_ASYNC=1 at init: collectives queued, as NCCL's */
    int pending_io;               /* async: a collective failed; the next sync says so */
} FakeState;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct { uint8_t *p; size_t n; const FakeState *owner; } blocks[MAX_BLOCKS];
static int n_blocks;
static unsigned long n_copies_up, n_copies_down, n_syncs, n_runs, n_begins, n_ends, n_bad_hooks, n_inits;
static const FakeState *live[64]; /* the states up now (a device_index is one rank's) */

/* [p, p + bytes) inside memory the state `s` allocated (any state's when s is NULL). */
static int is_dev_of(const FakeState *s, const void *p, size_t bytes) {
    const uint8_t *q = p;
    pthread_mutex_lock(&mu);
    int ok = 0;
    for (int i = 0; i < n_blocks && !ok; i++)
        ok = q >= blocks[i].p && q + bytes <= blocks[i].p + blocks[i].n && (!s || blocks[i].owner == s);
    pthread_mutex_unlock(&mu);
    return ok;
}
static int is_dev(const void *p, size_t bytes) { return is_dev_of(NULL, p, bytes); }

static const RadKernelLib *ref;
static RadKernel table[MAX_KERNELS];
static uint32_t n_table;

static int breach(const RadKernel *k, const char *what, uint32_t i) {
    fprintf(stderr, "fakedev: %s:%s operand %u: %s\n", k->op, k->variant, i, what);
    return RAD_E_ARG;
}

static int forward(uint32_t ki, const RadKernelArgs *a) {
    const RadKernel *k = rad_kernel_at(ref, ki);
    const FakeState *s = a->lib_state;
    __atomic_add_fetch(&n_runs, 1, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i < a->n_args; i++) {
        const RadKArg *x = &a->args[i];
        if (x->cols == 1 && x->row_stride == 1 && x->dtype == RAD_I32) { /* a raw operand */
            if (!x->planes[1]) return breach(k, "a raw operand without its host values (planes[1])", i);
            if (!is_dev_of(s, x->data, x->rows * 4)) return breach(k, "a raw operand's data is not this device's memory", i);
            if (is_dev(x->planes[1], 4)) return breach(k, "a raw operand's host values (planes[1]) are device memory", i);
            if (memcmp(x->data, x->planes[1], x->rows * 4)) return breach(k, "the device copy differs from the host values", i);
            continue;
        }
        if (x->data && !is_dev_of(s, x->data, 1)) return breach(k, "data is not this device's memory", i);
    }
    if (a->workspace && !is_dev_of(s, a->workspace, 1)) return breach(k, "the workspace is not this device's memory", 0);
    if (a->kv && a->kv->pool && !is_dev_of(s, a->kv->pool, 1)) return breach(k, "the KV pool is not this device's memory", 0);
    if (a->batch && is_dev(a->batch, 1)) return breach(k, "the batch is device memory (it is the host's)", 0);
    RadKernelArgs b = *a;
    b.lib_state = a->lib_state ? ((FakeState *)a->lib_state)->ref_state : NULL;
    const int rc = k->run(&b);
    /* async: a released collective returns at once and its failure shows at the rank's sync */
    if (rc == RAD_E_IO && s && s->async && (!strcmp(k->op, "all_reduce") || !strcmp(k->op, "all_gather"))) {
        ((FakeState *)a->lib_state)->pending_io = 1;
        return RAD_OK;
    }
    return rc;
}

/* One trampoline per libref table entry (run_b_j forwards entry 8b + j): a kernel's run knows only
 * its arguments. */
#define T(b, j) static int run_##b##_##j(const RadKernelArgs *a) { return forward(8 * b + j, a); }
#define T8(b) T(b, 0) T(b, 1) T(b, 2) T(b, 3) T(b, 4) T(b, 5) T(b, 6) T(b, 7)
T8(0) T8(1) T8(2) T8(3) T8(4) T8(5) T8(6) T8(7) T8(8) T8(9) T8(10) T8(11) T8(12) T8(13) T8(14) T8(15)
#define R8(b) run_##b##_0, run_##b##_1, run_##b##_2, run_##b##_3, run_##b##_4, run_##b##_5, run_##b##_6, run_##b##_7
static int (*const runs[MAX_KERNELS])(const RadKernelArgs *) = {R8(0), R8(1), R8(2), R8(3), R8(4), R8(5), R8(6), R8(7),
                                                                 R8(8), R8(9), R8(10), R8(11), R8(12), R8(13), R8(14), R8(15)};

/* RAD_FAKEDEV_FAIL=1: init fails as a CUDA library with no device does (the engine's fallback).
 * RAD_FAKEDEV_DEVICES=N: the machine has N devices; a device_index past them fails. */
static const char *init_why;
static const char *fd_init_error(void) { return init_why; }
static void fd_fini(void *state);
static int fd_init(const RadKernelLibConfig *cfg, void **state) {
    const char *fail = getenv("RAD_FAKEDEV_FAIL"), *devs = getenv("RAD_FAKEDEV_DEVICES");
    init_why = NULL;
    if (fail && !strcmp(fail, "1")) return init_why = "no device (RAD_FAKEDEV_FAIL)", RAD_E_UNSUPPORTED;
    if (devs && *devs && (cfg->device_index < 0 || cfg->device_index >= atoi(devs)))
        return init_why = "device_index past the machine's devices (RAD_FAKEDEV_DEVICES)", RAD_E_ARG;
    FakeState *s = calloc(1, sizeof *s);
    if (!s) return RAD_E_NOMEM;
    s->device = cfg->device_index, s->world = cfg->world_size ? cfg->world_size : 1;
    const char *async = getenv("RAD_FAKEDEV_ASYNC");
    s->async = async && !strcmp(async, "1");
    if (s->world > 1 && cfg->comm) memcpy(&s->comm, cfg->comm, sizeof s->comm);
    pthread_mutex_lock(&mu);
    int taken = 0, slot = -1;
    for (int i = 0; i < 64; i++) {
        if (!live[i]) slot = slot < 0 ? i : slot;
        else if (s->world > 1 && live[i]->world > 1 && live[i]->device == s->device && !memcmp(&live[i]->comm, &s->comm, sizeof s->comm))
            taken = 1;
    }
    if (!taken && slot >= 0) live[slot] = s, n_inits++;
    pthread_mutex_unlock(&mu);
    if (taken || slot < 0) {
        free(s);
        return init_why = taken ? "device_index already taken by another rank (RAD_FAKEDEV)" : "too many states", RAD_E_ARG;
    }
    int rc = ref->init ? ref->init(cfg, &s->ref_state) : RAD_OK;
    if (rc) fd_fini(s);
    else *state = s;
    return rc;
}
static void fd_fini(void *state) {
    FakeState *s = state;
    if (!s) return;
    if (ref->fini && s->ref_state) ref->fini(s->ref_state);
    pthread_mutex_lock(&mu);
    for (int i = 0; i < 64; i++)
        if (live[i] == s) live[i] = NULL;
    pthread_mutex_unlock(&mu);
    free(s);
}
static void *fd_alloc(void *state, size_t bytes) {
    uint8_t *p = aligned_alloc(256, (bytes + 255) & ~(size_t)255);
    if (!p) return NULL;
    memset(p, 0xa5, bytes); /* device memory starts with no meaning */
    pthread_mutex_lock(&mu);
    if (n_blocks == MAX_BLOCKS) {
        pthread_mutex_unlock(&mu);
        free(p);
        return NULL;
    }
    blocks[n_blocks].p = p, blocks[n_blocks].owner = state, blocks[n_blocks++].n = bytes;
    pthread_mutex_unlock(&mu);
    return p;
}
static void fd_free(void *state, void *p) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_blocks; i++)
        if (blocks[i].p == p && blocks[i].owner != state) { /* another rank's memory: counted, not freed */
            __atomic_add_fetch(&n_bad_hooks, 1, __ATOMIC_RELAXED);
            break;
        } else if (blocks[i].p == p) {
            blocks[i] = blocks[--n_blocks];
            free(p);
            break;
        }
    pthread_mutex_unlock(&mu);
}
static int fd_copy(void *state, void *dst, const void *src, size_t bytes, int to_device) {
    if (to_device ? !is_dev_of(state, dst, bytes) || is_dev(src, 1) : !is_dev_of(state, src, bytes) || is_dev(dst, 1)) {
        fprintf(stderr, "fakedev: a copy %s the device with its ends the wrong way round\n", to_device ? "to" : "from");
        return RAD_E_ARG;
    }
    memcpy(dst, src, bytes);
    __atomic_add_fetch(to_device ? &n_copies_up : &n_copies_down, 1, __ATOMIC_RELAXED);
    return RAD_OK;
}
static int fd_sync(void *state) {
    FakeState *s = state;
    if (!s || s->in_step) __atomic_add_fetch(&n_bad_hooks, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&n_syncs, 1, __ATOMIC_RELAXED);
    if (s && s->pending_io) return s->pending_io = 0, RAD_E_IO;
    return RAD_OK;
}
/* The step hooks, per rank: a begin, then an end, then the sync (a sync or a begin inside a step
 * is out of order). */
static int fd_step_begin(void *state, const struct RadBatch *b) {
    FakeState *s = state;
    if (!s || s->in_step || !b) __atomic_add_fetch(&n_bad_hooks, 1, __ATOMIC_RELAXED);
    if (s) s->in_step = 1;
    __atomic_add_fetch(&n_begins, 1, __ATOMIC_RELAXED);
    return RAD_OK;
}
static int fd_step_end(void *state, int ok) {
    FakeState *s = state;
    (void)ok;
    if (!s || !s->in_step) __atomic_add_fetch(&n_bad_hooks, 1, __ATOMIC_RELAXED);
    if (s) s->in_step = 0;
    __atomic_add_fetch(&n_ends, 1, __ATOMIC_RELAXED);
    return RAD_OK;
}
/* Collectives: libref's, over shared memory between the ranks' threads. */
static int fd_comm_id(uint32_t world_size, RadCommId *id) { return ref->comm_id ? ref->comm_id(world_size, id) : RAD_E_UNSUPPORTED; }
static void fd_comm_abort(void *state, int on) {
    if (ref->comm_abort && state) ref->comm_abort(((FakeState *)state)->ref_state, on);
}
static size_t fd_pack_size(void *state, RadDType enc, uint64_t rows, uint64_t cols) {
    return ref->pack_size ? ref->pack_size(state ? ((FakeState *)state)->ref_state : NULL, enc, rows, cols) : 0;
}
static int fd_pack(void *state, RadDType enc, uint64_t rows, uint64_t cols, const void *src, uint64_t stride, void *dst) {
    if (is_dev(dst, 1) || is_dev(src, 1)) { /* the core packs in its host staging, then uploads */
        fprintf(stderr, "fakedev: pack was given device memory\n");
        return RAD_E_ARG;
    }
    return ref->pack(state ? ((FakeState *)state)->ref_state : NULL, enc, rows, cols, src, stride, dst);
}

static RadKernelLib lib = {.struct_size = sizeof(RadKernelLib), .device = RAD_DEVICE_CUDA, .kernels = table, .init = fd_init,
                           .fini = fd_fini, .alloc = fd_alloc, .free = fd_free, .copy = fd_copy, .sync = fd_sync,
                           .pack_size = fd_pack_size, .pack = fd_pack, .init_error = fd_init_error,
                           .step_begin = fd_step_begin, .step_end = fd_step_end, .comm_id = fd_comm_id,
                           .comm_abort = fd_comm_abort};

/* kern_ref.so: $RAD_FAKEDEV_REF, else ../plugins/kern_ref.so from this file's folder. */
static const RadKernelLib *load_ref(void) {
    char path[1024];
    const char *env = getenv("RAD_FAKEDEV_REF");
    if (env && *env) {
        snprintf(path, sizeof path, "%s", env);
    } else {
        Dl_info di;
        if (!dladdr((void *)load_ref, &di) || !di.dli_fname) return NULL;
        snprintf(path, sizeof path, "%s", di.dli_fname);
        char *slash = strrchr(path, '/');
        if (!slash) return NULL;
        snprintf(slash, sizeof path - (size_t)(slash - path), "/../plugins/kern_ref.so");
    }
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) return NULL;
    rad_kernels_fn fn;
    void *p = dlsym(dl, "rad_kernels");
    if (!p) return NULL;
    memcpy(&fn, &p, sizeof p);
    return fn();
}

static void build(void);
RAD_EXPORT const RadKernelLib *rad_kernels(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, build);
    return ref && n_table ? &lib : NULL;
}
static void build(void) {
    ref = load_ref();
    if (!ref) return;
    for (uint32_t i = 0; i < ref->n_kernels && n_table < MAX_KERNELS; i++) {
        const RadKernel *k = rad_kernel_at(ref, i);
        memset(&table[n_table], 0, sizeof table[n_table]);
        memcpy(&table[n_table], k, k->struct_size < sizeof(RadKernel) ? k->struct_size : sizeof(RadKernel));
        table[n_table].struct_size = sizeof(RadKernel);
        table[n_table].run = runs[i];
        n_table++;
    }
    lib.n_kernels = n_table;
}

/* The hooks' use so far: copies to and from the device, syncs, kernel calls, step begins and
 * ends, hooks called out of order (or a free of another rank's memory), states started. */
RAD_EXPORT void fakedev_counts(unsigned long out[8]) {
    out[0] = n_copies_up, out[1] = n_copies_down, out[2] = n_syncs, out[3] = n_runs;
    out[4] = n_begins, out[5] = n_ends, out[6] = n_bad_hooks, out[7] = n_inits;
}

RAD_EXPORT const RadPluginInfo *rad_plugin_info(void) {
    static const RadPluginInfo info = {sizeof(RadPluginInfo), RAD_PLUGIN_KERNELS, RAD_ABI_MAJOR, RAD_ABI_MINOR, "fakedev", "0.1.0",
                                       "libref's kernels behind a CUDA library's memory hooks, checking every pointer (tests)"};
    return &info;
}
