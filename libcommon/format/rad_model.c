#include "libcommon/format/rad_model.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "Radiance reads little-endian files in place");

void rad_model_free(RadModelFile *m) {
    if (!m) return;
    rad_dict_free(&m->meta);
    rad_dict_free(&m->tok);
    rad_dict_free(&m->chat);
    rad_dict_free(&m->raw);
    for (uint64_t i = 0; i < m->n_tensors; i++) free(m->tensors[i].name);
    free(m->tensors);
    free(m->name_ix);
    for (int i = 0; i < m->n_ins; i++) rad_in_close(&m->ins[i]);
    free(m->ins);
    if (m->watch.on) close(m->watch.fd);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    memset(m, 0, sizeof *m);
}

void *rad_model_alloc(RadModelFile *m, size_t n, RadErr *e) {
    void **grown = realloc(m->owned, sizeof *grown * ((size_t)m->n_owned + 1));
    void *p = grown ? calloc(1, n ? n : 1) : NULL;
    if (grown) m->owned = grown;
    if (!p) {
        rad_err_set(e, RAD_E_NOMEM, "%s: out of memory (%zu bytes)", m->path, n);
        return NULL;
    }
    m->owned[m->n_owned++] = p;
    return p;
}

void rad_model_release_data(RadModelFile *m) {
    for (uint64_t i = 0; i < m->n_tensors; i++)
        for (uint32_t j = 0; j < m->tensors[i].n_planes; j++) m->tensors[i].planes[j].data = NULL;
    for (int i = 0; i < m->n_ins; i++) rad_in_close(&m->ins[i]);
    if (m->watch.on) close(m->watch.fd);
    m->watch.on = 0;
}

/* ---- a file that changes under its mapping ------------------------------------------------ */

static int64_t ts_ns(const struct timespec *t) { return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec; }

void rad_file_watch_init(RadFileWatch *w, int fd, const struct stat *st) {
    *w = (RadFileWatch){.on = 1, .fd = fd, .size = (uint64_t)st->st_size, .nlink = (uint64_t)st->st_nlink,
                        .mtime_ns = ts_ns(&st->st_mtim), .ctime_ns = ts_ns(&st->st_ctim)};
}

int rad_model_check_unchanged(RadModelFile *m, RadErr *e) {
    RadFileWatch *w = &m->watch;
    if (!w->on) return RAD_OK;
    struct stat st;
    if (fstat(w->fd, &st) != 0)
        return rad_err_set(e, RAD_E_IO, "%s: changed while mapped (--mmap): fstat failed: %s", m->path, strerror(errno));
    if ((uint64_t)st.st_size != w->size)
        return rad_err_set(e, RAD_E_IO, "%s: changed while mapped (--mmap): size %" PRIu64 " -> %" PRIu64 " bytes", m->path,
                           w->size, (uint64_t)st.st_size);
    if (ts_ns(&st.st_mtim) != w->mtime_ns)
        return rad_err_set(e, RAD_E_IO, "%s: changed while mapped (--mmap): written in place (mtime moved)", m->path);
    if (ts_ns(&st.st_ctim) != w->ctime_ns) {
        if ((uint64_t)st.st_nlink == w->nlink) /* chmod, utimes: may hide a rewrite that restored mtime */
            return rad_err_set(e, RAD_E_IO, "%s: changed while mapped (--mmap): its inode changed (ctime moved)", m->path);
        w->nlink = (uint64_t)st.st_nlink, w->ctime_ns = ts_ns(&st.st_ctim); /* renamed over or linked: bytes untouched */
    }
    return RAD_OK;
}

/* The SIGBUS guard: a fixed table the handler reads without locks (a slot is published by
 * storing hi last, withdrawn by clearing hi first). */
#define GUARD_SLOTS 8
static struct {
    _Atomic uintptr_t lo, hi;
    char msg[600];
    size_t len;
} guards[GUARD_SLOTS];
static pthread_mutex_t guard_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction guard_prev;
static int guard_installed;
static void (*volatile guard_cleanup)(void); /* async-signal-safe: runs before the line and the exit */

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    const uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < GUARD_SLOTS; i++) {
        uintptr_t hi = atomic_load(&guards[i].hi), lo = atomic_load(&guards[i].lo);
        if (hi && a >= lo && a < hi) {
            if (guard_cleanup) guard_cleanup();
            ssize_t r = write(2, guards[i].msg, guards[i].len);
            (void)r;
            _exit(RAD_EXIT_MODEL_CHANGED);
        }
    }
    /* not a weight: whatever handled SIGBUS before, or the default (returning re-runs a faulting
     * access; a sent signal is raised again, pending until the handler returns) */
    if ((guard_prev.sa_flags & SA_SIGINFO) && guard_prev.sa_sigaction) guard_prev.sa_sigaction(sig, si, uc);
    else if (guard_prev.sa_handler != SIG_DFL && guard_prev.sa_handler != SIG_IGN) guard_prev.sa_handler(sig);
    else {
        signal(SIGBUS, SIG_DFL);
        if (si->si_code <= 0) raise(sig);
    }
}

/* One slot over [data, data + size) of a mapped input; -1 when the table is full. */
static int guard_input(const RadModelFile *m, const RadIn *in, const char *why) {
    pthread_mutex_lock(&guard_mu);
    int slot = -1;
    for (int i = 0; i < GUARD_SLOTS && slot < 0; i++)
        if (!atomic_load(&guards[i].hi)) slot = i;
    if (slot >= 0 && !guard_installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGBUS, &sa, &guard_prev) == 0) guard_installed = 1;
        else slot = -1;
    }
    if (slot >= 0) {
        const size_t cap = sizeof guards[slot].msg;
        /* the file that was cut (a folder's shard), not the folder */
        const char *file = in->name[0] ? in->name : m->path;
        int n = snprintf(guards[slot].msg, cap, "%s: %s: %s\n", program_invocation_short_name, file, why);
        if (n < 0) n = 0;
        if ((size_t)n >= cap) guards[slot].msg[cap - 2] = '\n', n = (int)cap - 1; /* still one whole line */
        guards[slot].len = (size_t)n;
        atomic_store(&guards[slot].lo, (uintptr_t)in->data);
        atomic_store(&guards[slot].hi, (uintptr_t)in->data + in->size);
    }
    pthread_mutex_unlock(&guard_mu);
    return slot;
}

int rad_model_guard(const RadModelFile *m, const char *why) {
    if (!m->n_ins || m->ins[0].kind != RAD_IN_MMAP || !m->ins[0].data || !m->ins[0].size) return -1;
    return guard_input(m, &m->ins[0], why);
}

int rad_model_guard_inputs(const RadModelFile *m, const char *why) {
    int n = 0;
    for (int i = 0; i < m->n_ins; i++)
        if (m->ins[i].kind == RAD_IN_MMAP && m->ins[i].data && m->ins[i].size && guard_input(m, &m->ins[i], why) >= 0) n++;
    return n;
}

void rad_model_guard_on_fault(void (*fn)(void)) { guard_cleanup = fn; }

void rad_model_unguard(int slot) {
    if (slot < 0 || slot >= GUARD_SLOTS) return;
    pthread_mutex_lock(&guard_mu);
    atomic_store(&guards[slot].hi, 0); /* lo stays: a handler that read hi before sees a whole range */
    pthread_mutex_unlock(&guard_mu);
}

/* The name index: a model's tensors are looked up by name once per declared weight and per map
 * entry, so a scan per lookup would make a file of many tensors quadratic. */
static void name_ix_put(uint64_t *ix, uint64_t cap, const RadTensor *ts, uint64_t i) {
    uint64_t h = XXH3_64bits(ts[i].name, strlen(ts[i].name)) & (cap - 1);
    while (ix[h]) h = (h + 1) & (cap - 1);
    ix[h] = i + 1;
}

int rad_model_add_tensor(RadModelFile *m, RadTensor *t, RadErr *e) {
    if ((m->n_tensors & (m->n_tensors - 1)) == 0) { /* grow at powers of two */
        uint64_t nc = m->n_tensors ? m->n_tensors * 2 : 16;
        RadTensor *nt = realloc(m->tensors, nc * sizeof *nt);
        if (!nt) {
            free(t->name);
            t->name = NULL;
            return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory adding a tensor", m->path);
        }
        m->tensors = nt;
    }
    if (2 * (m->n_tensors + 1) > m->name_cap) { /* rebuilt in table order, so the first of a name wins */
        uint64_t cap = m->name_cap ? m->name_cap * 2 : 64;
        uint64_t *ix = calloc(cap, sizeof *ix);
        if (!ix) {
            free(t->name);
            t->name = NULL;
            return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory indexing tensors", m->path);
        }
        for (uint64_t i = 0; i < m->n_tensors; i++) name_ix_put(ix, cap, m->tensors, i);
        free(m->name_ix);
        m->name_ix = ix, m->name_cap = cap;
    }
    m->tensors[m->n_tensors++] = *t;
    name_ix_put(m->name_ix, m->name_cap, m->tensors, m->n_tensors - 1);
    t->name = NULL;
    return RAD_OK;
}

int rad_model_rename_tensor(RadModelFile *m, uint64_t i, const char *name, RadErr *e) {
    if (i >= m->n_tensors) return rad_err_set(e, RAD_E_ARG, "%s: no tensor %" PRIu64 " to rename", m->path, i);
    if (rad_model_find(m, name))
        return rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' (renamed from '%s') is already in the model", m->path, name,
                           m->tensors[i].name);
    char *nm = strdup(name);
    uint64_t *ix = calloc(m->name_cap, sizeof *ix);
    if (!nm || !ix) {
        free(nm);
        free(ix);
        return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory renaming a tensor", m->path);
    }
    free(m->tensors[i].name);
    m->tensors[i].name = nm;
    /* the old name's slot cannot be moved: the index is rebuilt, in table order as ever */
    for (uint64_t j = 0; j < m->n_tensors; j++) name_ix_put(ix, m->name_cap, m->tensors, j);
    free(m->name_ix);
    m->name_ix = ix;
    return RAD_OK;
}

int rad_model_drop_tensors(RadModelFile *m, const uint8_t *drop, RadErr *e) {
    uint64_t *ix = m->name_cap ? calloc(m->name_cap, sizeof *ix) : NULL;
    if (m->name_cap && !ix) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", m->path);
    uint64_t k = 0;
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        if (drop[i]) {
            free(m->tensors[i].name);
            continue;
        }
        m->tensors[k++] = m->tensors[i];
    }
    m->n_tensors = k;
    for (uint64_t j = 0; j < m->n_tensors; j++) name_ix_put(ix, m->name_cap, m->tensors, j);
    free(m->name_ix);
    m->name_ix = ix;
    return RAD_OK;
}

const RadTensor *rad_model_find(const RadModelFile *m, const char *name) {
    if (!m->name_cap) return NULL; /* no tensor was ever added */
    /* an entry past n_tensors is a rolled-back add (a loader that failed part way): skipped */
    for (uint64_t h = XXH3_64bits(name, strlen(name)) & (m->name_cap - 1); m->name_ix[h]; h = (h + 1) & (m->name_cap - 1)) {
        uint64_t i = m->name_ix[h] - 1;
        if (i < m->n_tensors && strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
    }
    return NULL;
}

int rad_tensor_planes_check(const char *tname, RadEnc enc, uint32_t rank, const uint64_t *shape, uint32_t n_planes,
                            const char *const *names, const uint64_t *nbytes, RadErr *e) {
    if (n_planes <= 1) return RAD_OK;
    if (enc != RAD_ENC_F8_E4M3)
        return rad_err_set(e, RAD_E_FORMAT, "tensor '%s': %u planes of %s (the format defines several planes only for "
                           "block-scaled f8_e4m3: codes, scale)", tname, n_planes, rad_enc_info(enc) ? rad_enc_info(enc)->name : "?");
    if (n_planes != 2 || strcmp(names[0], "codes") != 0 || strcmp(names[1], "scale") != 0)
        return rad_err_set(e, RAD_E_FORMAT, "tensor '%s': block-scaled f8_e4m3 has two planes, 'codes' then 'scale'", tname);
    if (rank != 2 || !shape[0] || !shape[1])
        return rad_err_set(e, RAD_E_FORMAT, "tensor '%s': block-scaled f8_e4m3 is a matrix [N, K], not rank %u", tname, rank);
    if (shape[0] > UINT64_MAX / shape[1] || nbytes[0] != shape[0] * shape[1])
        return rad_err_set(e, RAD_E_FORMAT, "tensor '%s': plane 'codes' holds %" PRIu64 " bytes, [%" PRIu64 ", %" PRIu64
                           "] needs %" PRIu64, tname, nbytes[0], shape[0], shape[1], shape[0] * shape[1]);
    if (nbytes[1] != rad_f8_scale_bytes(shape[0], shape[1]))
        return rad_err_set(e, RAD_E_FORMAT, "tensor '%s': plane 'scale' holds %" PRIu64 " bytes, %" PRIu64 " x %" PRIu64
                           " blocks of 128x128 need %" PRIu64 " (f32)", tname, nbytes[1], rad_f8_blocks(shape[0]),
                           rad_f8_blocks(shape[1]), rad_f8_scale_bytes(shape[0], shape[1]));
    return RAD_OK;
}

int rad_tensor_bytes(RadEnc enc, uint32_t rank, const uint64_t *shape, uint64_t *n_elems,
                     uint64_t *n_bytes, const char *tname, RadErr *e) {
    const RadEncInfo *ei = rad_enc_info(enc);
    if (!ei) return rad_err_set(e, RAD_E_UNSUPPORTED, "tensor '%s': unknown encoding %d", tname, (int)enc);
    if (rank > RAD_MAX_RANK)
        return rad_err_set(e, RAD_E_FORMAT, "tensor '%s': rank %u exceeds %d", tname, rank, RAD_MAX_RANK);
    uint64_t n = 1;
    for (uint32_t i = 0; i < rank; i++) {
        if (shape[i] != 0 && n > UINT64_MAX / shape[i])
            return rad_err_set(e, RAD_E_FORMAT, "tensor '%s': element count overflows", tname);
        n *= shape[i];
    }
    if (rank > 0 && shape[rank - 1] % ei->block_elems != 0)
        return rad_err_set(e, RAD_E_FORMAT, "tensor '%s': innermost dim %" PRIu64
                           " is not a multiple of the %s block (%u)", tname, shape[rank - 1],
                           ei->name, ei->block_elems);
    if (rank == 0 && ei->block_elems != 1)
        return rad_err_set(e, RAD_E_FORMAT, "tensor '%s': a scalar cannot be %s", tname, ei->name);
    uint64_t blocks = n / ei->block_elems;
    if (blocks > UINT64_MAX / ei->block_bytes)
        return rad_err_set(e, RAD_E_FORMAT, "tensor '%s': byte count overflows", tname);
    if (n_elems) *n_elems = n;
    if (n_bytes) *n_bytes = blocks * ei->block_bytes;
    return RAD_OK;
}

/* model.* keys as the ABI struct (docs/KEYS.md). Integer fields absent read as 0. */
int rad_model_meta(const RadModelFile *m, RadModelMeta *out, RadErr *e) {
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    const RadDict *kv = &m->meta;
    int rc = rad_dict_gets(kv, "model.arch_id", &out->arch_id, e);
    if (rc == RAD_E_NOTFOUND)
        return rad_err_set(e, RAD_E_NOTFOUND, "%s: metadata 'model.arch_id' is missing", m->path);
    if (rc) return rc;
    out->name = "";
    out->quant = "";
    if ((rc = rad_dict_gets(kv, "model.name", &out->name, e)) && rc != RAD_E_NOTFOUND) return rc;
    if ((rc = rad_dict_gets(kv, "model.quant", &out->quant, e)) && rc != RAD_E_NOTFOUND) return rc;
    static const struct { const char *key; size_t off; } ints[] = {
        {"model.n_layers", offsetof(RadModelMeta, n_layers)},
        {"model.n_embd", offsetof(RadModelMeta, n_embd)},
        {"model.n_head", offsetof(RadModelMeta, n_head)},
        {"model.n_head_kv", offsetof(RadModelMeta, n_head_kv)},
        {"model.head_dim", offsetof(RadModelMeta, head_dim)},
        {"model.n_ff", offsetof(RadModelMeta, n_ff)},
        {"model.n_vocab", offsetof(RadModelMeta, n_vocab)},
        {"model.n_ctx_train", offsetof(RadModelMeta, n_ctx_train)},
        {"model.n_expert", offsetof(RadModelMeta, n_expert)},
        {"model.n_expert_used", offsetof(RadModelMeta, n_expert_used)},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int64_t x = 0;
        rc = rad_dict_geti(kv, ints[i].key, &x, e);
        if (rc && rc != RAD_E_NOTFOUND) return rc;
        if (x < 0 || x > INT32_MAX)
            return rad_err_set(e, RAD_E_FORMAT, "%s: metadata '%s': %" PRId64 " out of range",
                               m->path, ints[i].key, x);
        int32_t v = (int32_t)x;
        memcpy((char *)out + ints[i].off, &v, sizeof v);
    }
    double f = 0;
    if ((rc = rad_dict_getf(kv, "model.rms_eps", &f, e)) && rc != RAD_E_NOTFOUND) return rc;
    out->rms_eps = (float)f;
    f = 10000.0;
    if ((rc = rad_dict_getf(kv, "model.rope_theta", &f, e)) && rc != RAD_E_NOTFOUND) return rc;
    out->rope_theta = (float)f;
    return RAD_OK;
}
