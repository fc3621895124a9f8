/* The engine: load, declare, select, place, step. See rad_engine.h. */
#include "libcommon/runtime/rad_engine_int.h"

#include <errno.h> /* program_invocation_short_name */

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "libcommon/base/rad_num.h"

#define MAX_OPERANDS 16
#define MAX_PARAMS 32

static RadEngine *E(RadCtx *c) { return (RadEngine *)c; }

/* ---- the weights the plugin declares, from the container ---------------------------------- */

/* The container's tensors, and beside them (--control-vector) the loaded vector's rows as the
 * weights RAD_CVEC_WEIGHT_PREFIX "L" (rad_cvec_weight): a plugin granted the vector declares those it adds. */
/* A drafter's engine (RadEngineOpts.scope) declares every name under "<scope>."; its own container
 * stores them without it, so the container is asked for the name past the scope. */
static const char *stored_name(const RadEngine *en, const char *name) {
    const char *sc = en->ctx.scope;
    size_t n = sc ? strlen(sc) : 0;
    return n && !strncmp(name, sc, n) && name[n] == '.' ? name + n + 1 : name;
}

static RadEnc container_lookup(void *user, const char *name, const RadWeightDecl *d, const RadGMap *maps, int n_maps,
                               uint32_t *rank, uint64_t *shape) {
    (void)d, (void)maps, (void)n_maps;
    const RadEngine *en = user;
    if (rad_cvec_weight(en->ctx.cvec, name)) {
        *rank = 1;
        shape[0] = en->ctx.cvec->n_embd;
        return RAD_ENC_F32;
    }
    const RadTensor *t = rad_model_find(&en->m, stored_name(en, name));
    if (!t) return RAD_ENC_COUNT;
    *rank = t->rank;
    memcpy(shape, t->shape, t->rank * sizeof *shape);
    return t->enc;
}

/* The tensor a declared weight reads, or NULL (an optional weight the container lacks). */
static const RadTensor *weight_tensor(const RadEngine *en, int i) {
    const RadGWeight *gw = &en->g.w[i];
    const char *name = gw->d.source ? gw->d.source : gw->name;
    if (gw->enc == RAD_ENC_COUNT || rad_cvec_weight(en->ctx.cvec, name)) return NULL;
    return rad_model_find(&en->m, stored_name(en, name));
}

/* The control-vector row a declared weight reads, or NULL (a container tensor, or absent). */
static const float *weight_cvec(const RadEngine *en, int i) {
    const RadGWeight *gw = &en->g.w[i];
    return gw->enc == RAD_ENC_COUNT ? NULL : rad_cvec_weight(en->ctx.cvec, gw->d.source ? gw->d.source : gw->name);
}

static int kernel_packs(const RadKernel *k, RadEnc enc) {
    return k->struct_size >= offsetof(RadKernel, packed_encs) + sizeof k->packed_encs &&
           (k->packed_encs & RAD_ENC_BIT(enc));
}

/* Which library packs each stored tensor at load (-1: none), by weight index (first[i] == i
 * owns the tensor; pack[i] is set for owners). A tensor is packed when every kernel picked to
 * read it, in every bucket of every op, is one library's and lists its encoding in
 * packed_encs, and that library's pack_size takes the shape: then no reader can meet a layout
 * it does not know. Only single-plane tensors of rank 2 whole (no views by row). */
/* A weight's extent as its kernels see it: the stored tensor's, or (tensor parallelism) this
 * rank's slice of it, rows or columns; a slice is copied out of the stored tensor at load. */
typedef struct WExtent {
    uint64_t rows, cols;          /* elements */
    RadGSlice s;                  /* s.whole: the stored tensor */
} WExtent;

static int weight_extent(RadEngine *en, int i, const RadTensor *t, WExtent *x, RadErr *e) {
    x->rows = t->rank >= 2 ? t->shape[0] : 1;
    x->cols = t->rank >= 2 ? 1 : t->shape[0];
    for (uint32_t d = 1; d < t->rank; d++) x->cols *= t->shape[d];
    if (t->n_planes > 1 && !rad_tensor_is_f8_blocks(t)) /* the container reads it; no kernel knows the form */
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: weight '%s': %u planes of %s; kernels read several planes only as "
                           "block-scaled f8_e4m3 (codes, scale)", en->o.model, en->g.w[i].name, t->n_planes,
                           rad_enc_info(t->enc)->name);
    if (rad_graph_weight_slice(&en->g, i, &x->s)) return rad_err_set(e, RAD_E_SHAPE, "%s: %s", en->o.model, en->g.msg);
    if (x->s.whole) return RAD_OK;
    const RadEncInfo *ei = rad_enc_info(t->enc);
    const char *name = en->g.w[i].name;
    if (t->n_planes != 1 || t->rank > 2)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: weight '%s' (%u planes, rank %u): only single-plane weights of rank 1 or 2 "
                           "are sliced across --tp %u ranks", en->o.model, name, t->n_planes, t->rank, en->world);
    uint64_t sum = 0;
    for (uint32_t k = 0; k < x->s.n; k++) sum += x->s.len[k];
    if (x->s.axis == 0 && t->rank == 2) {
        x->rows = sum;
        return RAD_OK;
    }
    for (uint32_t k = 0; k < x->s.n; k++) /* columns (or a vector's elements): whole encoded blocks */
        if (x->s.begin[k] % ei->block_elems || x->s.len[k] % ei->block_elems)
            return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: weight '%s' (%s, %u-element blocks): rank %u of %u owns columns [%" PRIu64
                               ", %" PRIu64 "), not whole blocks (another --tp may split it)", en->o.model, name, ei->name,
                               ei->block_elems, en->rank, en->world, x->s.begin[k], x->s.begin[k] + x->s.len[k]);
    x->cols = sum;
    return RAD_OK;
}

/* The slice's bytes out of the stored tensor's (src) into dst, rows of `x->cols` elements. */
static void copy_slice(const RadTensor *t, const WExtent *x, const uint8_t *src, uint8_t *dst) {
    const RadEncInfo *ei = rad_enc_info(t->enc);
    uint64_t cols = t->rank >= 2 ? 1 : t->shape[0];
    for (uint32_t d = 1; d < t->rank; d++) cols *= t->shape[d];
    const uint64_t stride = cols / ei->block_elems * ei->block_bytes;
    if (x->s.axis == 0 && t->rank == 2) {
        for (uint32_t k = 0; k < x->s.n; k++)
            memcpy(dst, src + x->s.begin[k] * stride, x->s.len[k] * stride), dst += x->s.len[k] * stride;
        return;
    }
    const uint64_t rows = t->rank >= 2 ? t->shape[0] : 1;
    for (uint64_t r = 0; r < rows; r++)
        for (uint32_t k = 0; k < x->s.n; k++) {
            const uint64_t nb = x->s.len[k] / ei->block_elems * ei->block_bytes;
            memcpy(dst, src + r * stride + x->s.begin[k] / ei->block_elems * ei->block_bytes, nb);
            dst += nb;
        }
}

static size_t pack_plan(const RadEngine *en, const RadTensor **tens, const WExtent *ext, const int *first, int *pack) {
    enum { UNSEEN = -2, NO = -1 };
    size_t bytes = 0;
    for (int i = 0; i < en->g.n_w; i++) pack[i] = UNSEEN;
    for (int o = 0; o < en->g.n_ops; o++) {
        const RadGOp *op = &en->g.ops[o];
        const RadSelectTable *c = &op->sel;
        if (op->declined) continue; /* never issued: its picks read nothing */
        for (uint32_t w = 0; w < op->n_w; w++) {
            const int id = op->w[w].id;
            if (id < 0 || id >= en->g.n_w || !tens[id]) continue;
            const int own = first[id];
            for (int b = 0; b < c->n_buckets && pack[own] != NO; b++) {
                const int li = c->pick_lib[b];
                if (li < 0 || !kernel_packs(c->pick[b], tens[own]->enc) || (pack[own] != UNSEEN && pack[own] != li)) pack[own] = NO;
                else pack[own] = li;
            }
        }
    }
    for (int i = 0; i < en->g.n_w; i++) {
        const RadTensor *t = tens[i];
        if (first[i] != i || pack[i] < 0 || !t || en->o.no_repack || t->n_planes != 1 || t->rank != 2) {
            pack[i] = NO;
            continue;
        }
        const RadKernelLib *l = en->libs[pack[i]]->lib;
        size_t pb = 0;
        if (l->struct_size >= offsetof(RadKernelLib, pack) + sizeof l->pack && l->pack_size && l->pack)
            pb = l->pack_size(en->lib_state[pack[i]], (RadDType)t->enc, ext[i].rows, ext[i].cols);
        if (!pb) pack[i] = NO;
        bytes += (pb + 63) & ~(size_t)63;
    }
    return bytes;
}

/* The stored bytes of a single-plane tensor packed into dst by library li. */
static int pack_tensor(RadEngine *en, const RadTensor *t, int li, RadKArg *a, uint8_t *dst, int verify, const void *sliced,
                       RadErr *e) {
    const RadPlane *p = &t->planes[0];
    void *tmp = NULL;
    const void *src = sliced ? sliced : p->data;
    if (!sliced && p->compression) { /* a raw source was verified with the other planes */
        if (!(tmp = malloc(p->nbytes ? p->nbytes : 1))) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
        int rc = rad_plane_load(&en->m, t, 0, tmp, verify, e);
        if (rc) return free(tmp), rc;
        src = tmp;
    }
    const RadKernelLib *l = en->libs[li]->lib;
    int rc = l->pack(en->lib_state[li], a->dtype, a->rows, a->cols, src, a->row_stride, dst);
    free(tmp);
    if (rc) return rad_err_set(e, rc, "%s: tensor '%s': kernel library '%s' could not pack it (%s)", en->o.model, t->name,
                               en->libs[li]->info->name, rad_status_name(rc));
    a->dtype = (RadDType)(a->dtype | RAD_PACKED);
    a->planes[0] = a->data = dst;
    return RAD_OK;
}

/* One plane the load reads: copied (or decompressed) into dst and, unless --no-verify, its
 * checksum verified in the same pass; with dst NULL, verified where it lies (--mmap, or the
 * source of a tensor packed after). */
typedef struct LoadJob {
    const RadTensor *t;
    uint32_t k;
    uint8_t *dst;
    int rc;
    RadErr err;
} LoadJob;

typedef struct LoadRun {
    const RadEngine *en;
    LoadJob *jobs;
    size_t n;
    int verify;
    atomic_size_t next;
    atomic_int failed;
} LoadRun;

static size_t need_jobs(const RadEngine *en, const RadTensor *const *tens, const int *first) {
    size_t n = 1;
    for (int i = 0; i < en->g.n_w; i++)
        if (tens[i] && first[i] == i) n += tens[i]->n_planes;
    return n;
}

static void *load_worker(void *arg) {
    LoadRun *r = arg;
    while (!atomic_load(&r->failed)) {
        size_t i = atomic_fetch_add(&r->next, 1);
        if (i >= r->n) break;
        LoadJob *j = &r->jobs[i];
        j->rc = j->dst ? rad_plane_load(&r->en->m, j->t, j->k, j->dst, r->verify, &j->err)
                       : rad_plane_verify(&r->en->m, j->t, j->k, &j->err);
        if (j->rc) atomic_store(&r->failed, 1);
    }
    return NULL;
}

/* The jobs on the engine's threads (pages fault in and checksums run in parallel). Jobs are
 * taken in order, so the failure reported is the first in table order whatever the timing. */
static int run_load_jobs(const RadEngine *en, LoadJob *jobs, size_t n, int verify, RadErr *e) {
    LoadRun r = {.en = en, .jobs = jobs, .n = n, .verify = verify};
    atomic_init(&r.next, 0);
    atomic_init(&r.failed, 0);
    enum { MAX_LOADERS = 16 };
    pthread_t th[MAX_LOADERS];
    size_t nt = en->o.n_threads < MAX_LOADERS ? en->o.n_threads : MAX_LOADERS, started = 0;
    if (nt > n) nt = n;
    for (; started + 1 < nt; started++) /* the calling thread is one of them */
        if (pthread_create(&th[started], NULL, load_worker, &r)) break;
    load_worker(&r);
    for (size_t i = 0; i < started; i++) pthread_join(th[i], NULL);
    for (size_t i = 0; i < n; i++)
        if (jobs[i].rc) return rad_err_set(e, jobs[i].rc, "%s", jobs[i].err.msg);
    return RAD_OK;
}

/* Weights are copied into one anonymous region with transparent huge pages requested, unless
 * the caller keeps them in the file mapping (mmap_weights). Decode streams every weight once a
 * token: on 4 KiB file pages each page costs a TLB walk and the hardware prefetchers stop at
 * every page boundary; on 2 MiB pages the same GEMMs ran 14% faster (docs/BENCHMARKS.md).
 * Compressed planes are always decompressed into the region, and tensors a kernel library
 * packs (pack_plan) are always packed into it. A tensor two weights read (a tied head) is
 * copied once. */
__attribute__((format(printf, 2, 3))) static int step_err(RadEngine *en, const char *fmt, ...);

/* Where a planned buffer's bytes are: the arena (transient) or the persistent region. */
static uint8_t *buf_at(const RadEngine *en, const RadGBuf *b) {
    return (b->d.kind == RAD_BUF_TRANSIENT ? en->arena : en->persist) + b->offset;
}

/* ---- a CUDA deployment's memory (docs/ENGINE.md, "A CUDA deployment") ---------------------- */

/* bytes of the deployment's memory: the device library's when there is one, else 256-aligned host
 * memory. NULL when it cannot be had. */
static uint8_t *mem_alloc(RadEngine *en, size_t bytes) {
    if (en->dev) return en->dev->alloc(en->dev_state, bytes ? bytes : 1);
    return aligned_alloc(256, (bytes + 255) & ~(size_t)255);
}
static void mem_free(RadEngine *en, void *p) {
    if (!p) return;
    if (en->dev) en->dev->free(en->dev_state, p);
    else free(p);
}

/* The weights in wstore sent to the device whole, every weight's pointers moved to the image. */
static int dev_upload_weights(RadEngine *en, RadErr *e) {
    if (!en->dev || !en->wstore) return RAD_OK;
    const char *lib = en->libs[0]->info->name;
    if (!(en->dev_weights = en->dev->alloc(en->dev_state, en->wstore_bytes)))
        return rad_err_set(e, RAD_E_NOMEM, "%s: kernel library '%s' cannot allocate %zu bytes of device memory for the weights",
                           en->o.model, lib, en->wstore_bytes);
    en->dev_weights_bytes = en->wstore_bytes;
    if (en->dev->copy(en->dev_state, en->dev_weights, en->wstore, en->wstore_bytes, 1) != RAD_OK)
        return rad_err_set(e, RAD_E_IO, "%s: kernel library '%s': copying %zu bytes of weights to the device failed", en->o.model, lib,
                           en->wstore_bytes);
    const uint8_t *lo = en->wstore, *hi = en->wstore + en->wstore_bytes;
    for (int i = 0; i < en->g.n_w; i++) {
        RadKArg *a = &en->w[i].arg;
        for (int k = 0; k < 4; k++)
            if ((const uint8_t *)a->planes[k] >= lo && (const uint8_t *)a->planes[k] < hi)
                a->planes[k] = en->dev_weights + ((const uint8_t *)a->planes[k] - lo);
        if ((const uint8_t *)a->data >= lo && (const uint8_t *)a->data < hi) a->data = en->dev_weights + ((uint8_t *)a->data - lo);
        else if (a->data) /* every weight of a CUDA deployment is in wstore (no --mmap, no control vector) */
            return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: weight %d is not in the loaded weights' memory", en->o.model, i);
    }
    munmap(en->wstore, en->wstore_bytes); /* the device holds them now */
    en->wstore = NULL;
    return RAD_OK;
}

/* A raw operand's device copy for this step: copied once per (host array, bytes, content). */
static void *dev_raw(RadEngine *en, const void *host, uint64_t bytes) {
    const uint64_t h = XXH3_64bits(host, (size_t)bytes);
    for (int i = 0; i < en->n_dev_raw_seen; i++) {
        const struct RadDevRaw *r = &en->dev_raw_seen[i];
        if (r->host == host && r->bytes == bytes && r->hash == h) return r->dev;
    }
    const size_t at = (en->dev_raw_used + 255) & ~(size_t)255;
    if (en->n_dev_raw_seen == (int)(sizeof en->dev_raw_seen / sizeof *en->dev_raw_seen) || at + bytes > en->dev_raw_cap) return NULL;
    if (en->dev->copy(en->dev_state, en->dev_raw + at, host, (size_t)bytes, 1) != RAD_OK) return NULL;
    en->dev_raw_used = at + (size_t)bytes;
    en->dev_raw_seen[en->n_dev_raw_seen++] = (struct RadDevRaw){host, bytes, h, en->dev_raw + at};
    return en->dev_raw + at;
}

/* After the plugin's step on a CUDA deployment: the device finished (a refusal a kernel found
 * there is the step's), then what the tools read comes back to the host: the n_out rows of
 * logits, or the n_seq pooled rows (rank 0's: under --tp the tools read no other rank's). */
static int tp_another_failed(const RadEngine *en);
static void dev_finish_step(RadEngine *en, const RadBatch *b) {
    const int rc = en->dev->sync(en->dev_state);
    const char *lib = en->libs[0]->info->name;
    if (en->step_failed) return;
    if (rc != RAD_OK) {
        /* a device's collectives are queued, so a rank another rank released learns it here (NCCL:
         * the aborted communicator's kernels return, the sync fails), not from the collective's call */
        if (rc == RAD_E_IO && en->world > 1 && tp_another_failed(en)) en->step_released = 1;
        step_err(en, "kernel library '%s': the step failed on the device: %s", lib, rad_status_name(rc));
        return;
    }
    if (en->rank) return;
    /* the argmax's ids when rank_step issued it (one float a row), else the logits or pooled rows */
    const int id = en->ids_issued ? en->g.argmax_ids.id : en->g.logits.id >= 0 ? en->g.logits.id : en->g.pooled.id;
    const uint64_t rows = en->g.logits.id >= 0 ? b->n_out : b->n_seq;
    if (id < 0 || !rows) return;
    const RadGBuf *g = &en->g.bufs[id];
    const size_t bytes = (size_t)rows * (size_t)g->d.shape[1] * sizeof(float);
    if (bytes > en->host_out_bytes || en->dev->copy(en->dev_state, en->host_out, buf_at(en, g), bytes, 0) != RAD_OK) {
        step_err(en, "kernel library '%s': copying the step's %s from the device failed", lib,
                 en->ids_issued ? "ids" : en->g.logits.id >= 0 ? "logits" : "pooled rows");
        return;
    }
    for (uint64_t i = 0; en->ids_issued && i < rows; i++) en->host_ids[i] = (int32_t)((const float *)(void *)en->host_out)[i];
    en->ids_valid = en->ids_issued;
}

/* RadWeightDecl.planes: NULL, or every plane of the tensor in its order ("codes,scale"), is the
 * whole weight; a view of some planes (a weight of its scale plane alone) is not served yet, and
 * taking the whole weight in its place would be a substitution. */
static int weight_planes_ok(const RadEngine *en, int i, const RadTensor *t, RadErr *e) {
    const char *want = en->g.w[i].d.planes;
    if (!want) return RAD_OK;
    char have[RAD_MAX_PLANES * 17] = "";
    size_t k = 0;
    for (uint32_t p = 0; p < t->n_planes && k < sizeof have; p++)
        k += (size_t)snprintf(have + k, sizeof have - k, "%s%s", p ? "," : "", t->planes[p].name);
    if (!strcmp(want, have)) return RAD_OK;
    return rad_err_set(e, RAD_E_UNSUPPORTED, "weight '%s' (tensor '%s'): planes '%s': the tensor's planes are '%s'; a view of some "
                       "planes is not served yet (NULL, or every plane in order)", en->g.w[i].name, t->name, want, have);
}

static int bind_weights(RadEngine *en, RadErr *e) {
    en->w = calloc((size_t)(en->g.n_w ? en->g.n_w : 1), sizeof *en->w);
    const RadTensor **tens = malloc((size_t)(en->g.n_w ? en->g.n_w : 1) * sizeof *tens);
    int *first = malloc((size_t)(en->g.n_w ? en->g.n_w : 1) * sizeof *first); /* the first weight reading the same tensor */
    int *pack = malloc((size_t)(en->g.n_w ? en->g.n_w : 1) * sizeof *pack);     /* pack_plan */
    if (!en->w || !tens || !first || !pack) {
        free(tens), free(first), free(pack);
        return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    }
    WExtent *ext = calloc((size_t)(en->g.n_w ? en->g.n_w : 1), sizeof *ext);
    if (!ext) {
        free(tens), free(first), free(pack);
        return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    }
    for (int i = 0; i < en->g.n_w; i++) {
        const RadTensor *t = tens[i] = weight_tensor(en, i);
        first[i] = i;
        int rc = t ? weight_planes_ok(en, i, t, e) : RAD_OK;
        if (!rc && t) rc = weight_extent(en, i, t, &ext[i], e);
        if (rc) {
            free(tens), free(first), free(pack), free(ext);
            return rc;
        }
        for (int j = 0; t && j < i && first[i] == i; j++) /* the same bytes: one tensor, one slice of it */
            if (tens[j] == t && ext[j].s.whole == ext[i].s.whole && (ext[i].s.whole || !memcmp(&ext[j].s, &ext[i].s, sizeof ext[i].s)))
                first[i] = j;
    }
    size_t need = pack_plan(en, tens, ext, first, pack);
    for (int i = 0; i < en->g.n_w; i++) {
        if (!tens[i] || first[i] != i || pack[i] >= 0) continue;
        if (!ext[i].s.whole) { /* a slice: always copied */
            const RadEncInfo *ei = rad_enc_info(tens[i]->enc);
            need += (ext[i].rows * (ext[i].cols / ei->block_elems * ei->block_bytes) + 63) & ~(size_t)63;
            continue;
        }
        for (uint32_t k = 0; k < tens[i]->n_planes; k++)
            if (!en->o.mmap_weights || tens[i]->planes[k].compression) need += (tens[i]->planes[k].nbytes + 63) & ~(size_t)63;
    }
    if (need) {
        const size_t huge = (size_t)2 << 20;
        en->wstore_bytes = (need + huge - 1) & ~(huge - 1);
        void *r = mmap(NULL, en->wstore_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (r == MAP_FAILED) {
            en->wstore_bytes = 0;
            free(tens), free(first), free(pack), free(ext);
            return rad_err_set(e, RAD_E_NOMEM, "%s: cannot allocate %zu bytes for the weights", en->o.model, need);
        }
        en->wstore = r;
#ifdef MADV_HUGEPAGE
        en->wstore_huge = madvise(r, en->wstore_bytes, MADV_HUGEPAGE) == 0; /* a hint: refused without THP */
#endif
    }
    /* what to read: every plane copied (or decompressed) into wstore, or verified where it lies */
    size_t used = 0, n_jobs = 0;
    LoadJob *jobs = calloc(need_jobs(en, tens, first), sizeof *jobs);
    uint8_t **pdst = calloc((size_t)(en->g.n_w ? en->g.n_w : 1), sizeof *pdst); /* packed owners: their region */
    int rc = jobs && pdst ? RAD_OK : rad_err_set(e, RAD_E_NOMEM, "out of memory");
    const int verify = !en->o.no_verify;
    for (int i = 0; i < en->g.n_w && !rc; i++) {
        const RadTensor *t = tens[i];
        if (!t || first[i] != i) continue;
        RadKArg *a = &en->w[i].arg;
        a->dtype = (RadDType)t->enc;
        a->rows = ext[i].rows;
        a->cols = ext[i].cols;
        const RadEncInfo *ei = rad_enc_info(t->enc);
        a->row_stride = a->cols / ei->block_elems * ei->block_bytes; /* bytes between rows */
        if (!ext[i].s.whole) en->w[i].sliced_bytes = a->rows * a->row_stride;
        if (pack[i] >= 0) { /* packed below, after the parallel pass; a raw source is verified in it */
            pdst[i] = en->wstore + used;
            used += (en->libs[pack[i]]->lib->pack_size(en->lib_state[pack[i]], a->dtype, a->rows, a->cols) + 63) & ~(size_t)63;
            if (verify && ext[i].s.whole && !t->planes[0].compression) jobs[n_jobs++] = (LoadJob){.t = t, .k = 0};
            continue;
        }
        if (!ext[i].s.whole) { /* sliced below, after the parallel pass (verified as it is read) */
            pdst[i] = en->wstore + used;
            used += (a->rows * a->row_stride + 63) & ~(size_t)63;
            a->planes[0] = a->data = pdst[i];
            continue;
        }
        for (uint32_t k = 0; k < t->n_planes && k < 4; k++) {
            const RadPlane *p = &t->planes[k];
            if (en->o.mmap_weights && !p->compression) {
                a->planes[k] = p->data;
                if (verify) jobs[n_jobs++] = (LoadJob){.t = t, .k = k};
                continue;
            }
            uint8_t *dst = en->wstore + used;
            used += (p->nbytes + 63) & ~(size_t)63;
            jobs[n_jobs++] = (LoadJob){.t = t, .k = k, .dst = dst};
            a->planes[k] = dst;
        }
        a->data = (void *)a->planes[0];
    }
    if (!rc) rc = run_load_jobs(en, jobs, n_jobs, verify, e);
    for (int i = 0; i < en->g.n_w && !rc; i++) { /* this rank's slices: the stored tensor read (and verified), then cut */
        if (!tens[i] || first[i] != i || ext[i].s.whole) continue;
        const RadTensor *t = tens[i];
        RadKArg *a = &en->w[i].arg;
        uint8_t *whole = malloc(t->planes[0].nbytes ? t->planes[0].nbytes : 1);
        const size_t cut_bytes = (size_t)(a->rows * a->row_stride);
        uint8_t *cut = pack[i] >= 0 ? malloc(cut_bytes ? cut_bytes : 1) : pdst[i];
        if (!whole || !cut) rc = rad_err_set(e, RAD_E_NOMEM, "%s: out of memory slicing '%s'", en->o.model, t->name);
        if (!rc) rc = rad_plane_load(&en->m, t, 0, whole, verify, e);
        if (!rc) copy_slice(t, &ext[i], whole, cut);
        if (!rc && pack[i] >= 0) rc = pack_tensor(en, t, pack[i], a, pdst[i], verify, cut, e);
        if (!rc && pack[i] >= 0) en->n_packed++, en->packed_bytes += a->rows * a->row_stride;
        free(whole);
        if (cut != pdst[i]) free(cut);
    }
    for (int i = 0; i < en->g.n_w && !rc; i++) {
        if (!tens[i] || first[i] != i || pack[i] < 0 || !ext[i].s.whole) continue;
        rc = pack_tensor(en, tens[i], pack[i], &en->w[i].arg, pdst[i], verify, NULL, e);
        if (!rc) en->n_packed++, en->packed_bytes += tens[i]->planes[0].nbytes;
    }
    for (int i = 0; i < en->g.n_w && !rc; i++) /* the same stored tensor: share its bytes */
        if (tens[i] && first[i] != i) en->w[i] = en->w[first[i]];
    for (int i = 0; i < en->g.n_w && !rc; i++) { /* a control-vector row: read where the loaded vector holds it */
        const float *row = weight_cvec(en, i);
        if (!row) continue;
        RadKArg *a = &en->w[i].arg;
        a->dtype = RAD_F32;
        a->rows = 1;
        a->cols = en->ctx.cvec->n_embd;
        a->row_stride = a->cols * sizeof(float);
        a->planes[0] = a->data = (void *)row;
    }
    free(jobs), free(pdst);
    free(tens), free(first), free(pack), free(ext);
    return rc;
}

/* ---- kernel libraries and selection ------------------------------------------------------- */

/* Initialise libs[0, n_libs): a library whose init fails is an error when --kernels names it (or
 * under strict mode); among "all installed" it is left out with one warning, as a bad file on the
 * path is. The failure names the library and, from ABI 1.9, says why (RadKernelLib.init_error). */
static int init_libs(RadEngine *en, int named, int strict, RadErr *e) {
    const int n = en->n_libs;
    /* a CUDA library runs rank r on device r (CUDA_VISIBLE_DEVICES picks which); CPU ones ignore it */
    RadKernelLibConfig cfg = {.struct_size = sizeof cfg, .n_threads = en->o.n_threads, .device_index = (int)en->rank,
                              .rank = en->rank, .world_size = en->world};
    if (en->world > 1 && !en->root && !en->comm && !(en->comm = calloc((size_t)(n ? n : 1), sizeof *en->comm)))
        return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    int kept = 0;
    for (int i = 0; i < n; i++) {
        const RadKernelLib *l = en->libs[i]->lib;
        void *state = NULL;
        cfg.comm = NULL;
        if (en->world > 1) { /* rank 0 names each library's communicator; the others join it */
            const int has = l->struct_size >= offsetof(RadKernelLib, comm_id) + sizeof l->comm_id && l->comm_id;
            if (!en->root && has && l->comm_id(en->world, &en->comm[i]) == RAD_OK) cfg.comm = &en->comm[i];
            for (int j = 0; en->root && j < en->root->n_libs; j++)
                if (!strcmp(en->root->libs[j]->info->name, en->libs[i]->info->name)) cfg.comm = &en->root->comm[j];
        }
        if (l->init && l->init(&cfg, &state) != RAD_OK) {
            const char *why = l->struct_size >= offsetof(RadKernelLib, init_error) + sizeof l->init_error && l->init_error
                                  ? l->init_error() : NULL;
            char because[300] = "";
            if (why && *why) snprintf(because, sizeof because, ": %.280s", why);
            if (named || strict) {
                for (int j = 0; j < kept; j++) /* the ones already up are let go: the caller may pick others */
                    if (en->libs[j]->lib->fini && en->lib_state[j]) en->libs[j]->lib->fini(en->lib_state[j]);
                en->n_libs = 0;
                return rad_err_set(e, RAD_E_IO, "kernel library '%s' (%s): init failed%s%s", en->libs[i]->info->name,
                                   en->libs[i]->path, because, strict && !named ? " (RADIANCE_PLUGINS_STRICT=1)" : "");
            }
            fprintf(stderr, "%s: warning: kernel library '%s' (%s) skipped: init failed%s\n", program_invocation_short_name,
                    en->libs[i]->info->name, en->libs[i]->path, because);
            continue;
        }
        en->libs[kept] = en->libs[i];
        if (en->comm) en->comm[kept] = en->comm[i];
        en->lib_state[kept++] = state;
    }
    if (!kept) return rad_err_set(e, RAD_E_NOTFOUND, "no kernel library could be initialised");
    en->n_libs = kept;
    return RAD_OK;
}

/* What a CUDA deployment does not do yet: refused by name before its library is initialised,
 * never ignored. */
static int cuda_refusals(const RadEngine *en, RadErr *e) {
    const char *lib = en->libs[0]->info->name;
    if (en->o.mmap_weights)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "--mmap: kernel library '%s' is a CUDA library, whose kernels read the "
                           "weights in device memory (copied at load)", lib);
    if (en->o.control_vector)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "--control-vector: not served on CUDA library '%s' yet", lib);
    return RAD_OK;
}

static int pick_libs(RadEngine *en, RadErr *e) {
    int n = 0;
    for (int i = 0; i < en->plugins.n; i++) n += en->plugins.p[i].info->kind == RAD_PLUGIN_KERNELS;
    en->libs = calloc((size_t)(n ? n : 1), sizeof *en->libs);
    en->lib_state = calloc((size_t)(n ? n : 1), sizeof *en->lib_state);
    if (!en->libs || !en->lib_state) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    int strict, rc;
    if ((rc = rad_plugins_strict(&strict, e))) return rc;
    const int named = en->o.kernels && *en->o.kernels;
    if (named && en->o.kernels_any_device) { /* rad-kbench, rad-tune: every named library, whatever its device */
        if ((rc = rad_plugins_pick_kernels(&en->plugins, en->o.kernels, RAD_DEVICE_CPU, RAD_PICK_ANY, en->libs, n, &en->n_libs,
                                           NULL, e)))
            return rc;
        if ((rc = init_libs(en, 1, strict, e))) return rc;
    } else {
        /* A list that starts with CUDA libraries is a CUDA deployment on them; the CPU libraries
         * after them are where it falls back when its library cannot start (checked now all the same). */
        const char *cpu_list = en->o.kernels; /* "" is refused as an empty list */
        if (named && (rc = rad_plugins_pick_kernels(&en->plugins, en->o.kernels, RAD_DEVICE_CUDA, RAD_PICK_LEADING, en->libs, n,
                                                    &en->n_libs, &cpu_list, e)))
            return rc;
        /* Ranks 1.. run where rank 0 runs: on its CUDA library with no fallback (a rank on the CPU
         * could not join the device's collectives), or on the CPU list rank 0 fell back to. */
        if (en->root && !en->root->dev) en->n_libs = 0;
        if (en->n_libs) {
            const RadPlugin **fallback = calloc((size_t)n, sizeof *fallback);
            int n_fallback = 0;
            if (!fallback) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
            rc = *cpu_list ? rad_plugins_pick_kernels(&en->plugins, cpu_list, RAD_DEVICE_CPU, RAD_PICK_ALL, fallback, n, &n_fallback,
                                                      NULL, e)
                           : RAD_OK;
            free(fallback);
            if (rc || (rc = cuda_refusals(en, e))) return rc;
            RadErr why = {0};
            rc = init_libs(en, 1, strict, &why);
            if (rc == RAD_OK) {
                if (en->n_libs > 1)
                    return rad_err_set(e, RAD_E_UNSUPPORTED, "--kernels: '%s' and '%s' are both CUDA libraries; a deployment "
                                       "runs on one", en->libs[0]->info->name, en->libs[1]->info->name);
                en->dev = en->libs[0]->lib, en->dev_state = en->lib_state[0];
            } else if (en->root) {
                return rad_err_set(e, rc, "--tp %u: rank %u: %s", en->world, en->rank, why.msg);
            } else if (!n_fallback) {
                return rad_err_set(e, rc, "%s", why.msg);
            } else { /* the order the user gave: the next libraries serve */
                fprintf(stderr, "%s: warning: %s; --kernels goes on with '%s'\n", program_invocation_short_name, why.msg, cpu_list);
            }
        }
        if (!en->dev) {
            if ((rc = rad_plugins_pick_kernels(&en->plugins, cpu_list, RAD_DEVICE_CPU, RAD_PICK_ALL, en->libs, n, &en->n_libs, NULL,
                                               e)))
                return rc;
            if ((rc = init_libs(en, named, strict, e))) return rc;
        }
    }
    en->sel.p = calloc((size_t)en->n_libs, sizeof *en->sel.p);
    if (!en->sel.p) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    for (int i = 0; i < en->n_libs; i++) en->sel.p[i] = *en->libs[i];
    en->sel.n = en->n_libs;
    return RAD_OK;
}

/* RadKernel.act_dtype, the activations a kernel takes and produces, against the buffers the op
 * declared it reads and writes: a mismatch is refused at open naming the op, the buffer and the
 * kernel, not left to fail (or be misread) at the first step. */
static int act_dtype_ok(const RadEngine *en, const RadGOp *op, int o, const RadKernel *k, int li, RadErr *e) {
    for (int w = 0; w < 2; w++)
        for (uint32_t i = 0; i < (w ? op->n_writes : op->n_reads); i++) {
            const int id = (w ? op->writes : op->reads)[i].id;
            if (id < 0 || id >= en->g.n_bufs || en->g.bufs[id].d.dtype == k->act_dtype) continue;
            return rad_err_set(e, RAD_E_UNSUPPORTED, "op '%s' (#%d) %s buffer '%s' as %s, but its kernel %s:%s takes %s activations",
                               op->op, o, w ? "writes" : "reads", en->g.bufs[id].name,
                               rad_enc_info((RadEnc)en->g.bufs[id].d.dtype)->name, li >= 0 ? en->libs[li]->info->name : "?",
                               k->variant, rad_enc_info((RadEnc)k->act_dtype)->name);
        }
    return RAD_OK;
}

/* The engine's side of each op's table: the graph chose the picks (rad_select_table under
 * en->select), so what is left is to refuse, at open and not mid-step, an op the plugin did not
 * decline but some bucket of which no kernel serves (or one whose activations its buffers are
 * not); to size the workspace of the kernels picked; and to find the KV layer an op reads. */
static int build_candidates(RadEngine *en, RadErr *e) {
    int rc;
    en->cand = calloc((size_t)(en->g.n_ops ? en->g.n_ops : 1), sizeof *en->cand);
    if (!en->cand) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    if (en->o.profile) { /* per bucket: a prefill and a decode may run different kernels of one op */
        en->prof_at = calloc((size_t)(en->g.n_ops ? en->g.n_ops : 1), sizeof *en->prof_at);
        if (!en->prof_at) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
        size_t nb = 0;
        for (int o = 0; o < en->g.n_ops; o++) en->prof_at[o] = (int)nb, nb += (size_t)en->g.ops[o].sel.n_buckets;
        en->prof_n = nb;
        en->prof_ns = calloc(nb ? nb : 1, sizeof *en->prof_ns);
        en->prof_calls = calloc(nb ? nb : 1, sizeof *en->prof_calls);
        if (!en->prof_ns || !en->prof_calls) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    }
    for (int o = 0; o < en->g.n_ops; o++) {
        const RadGOp *op = &en->g.ops[o];
        const RadSelectTable *t = &op->sel;
        RadEngineKernels *c = &en->cand[o];
        c->sel = t;
        int64_t layer; /* looked up once here, not by name at every issue */
        c->layer = rad_graph_op_int(op, "layer", &layer) && layer >= 0 && layer < en->g.n_layer_kv ? (int32_t)layer : -1;
        c->collective = !strcmp(op->op, "all_reduce") || !strcmp(op->op, "all_gather");
        if (op->declined) continue; /* the plugin emits the chain instead */
        if (!rad_select_served(t)) return rad_err_set(e, RAD_E_UNSUPPORTED, "op '%s' (#%d): %s", op->op, o, t->why);
        for (int b = 0; b < t->n_buckets; b++) {
            if (b && t->pick[b] == t->pick[b - 1]) continue; /* the bucket before's kernel: checked and sized */
            if ((rc = act_dtype_ok(en, op, o, t->pick[b], t->pick_lib[b], e))) return rc;
            if (!t->pick[b]->workspace) continue;
            size_t ws = t->pick[b]->workspace(op->params, op->n_params, t->range_hi);
            if (ws > en->workspace_bytes) en->workspace_bytes = ws;
        }
    }
    if (en->workspace_bytes && !(en->workspace = mem_alloc(en, en->workspace_bytes)))
        return rad_err_set(e, RAD_E_NOMEM, "out of %s memory for a %zu-byte kernel workspace", en->dev ? "device" : "host",
                           en->workspace_bytes);
    return RAD_OK;
}

/* Every attention kernel picked against the KV group its layer is bound to: the group's block
 * size came from the kernel picked for decode, and a kernel picked for another bucket must agree
 * with it, read the group's dtype and (narrow KV) its layout. Refused by name at open. */
static int check_kv_kernels(const RadEngine *en, RadErr *e) {
    for (int o = 0; o < en->g.n_ops; o++) {
        const RadGOp *op = &en->g.ops[o];
        const RadSelectTable *t = &op->sel;
        const int layer = en->cand[o].layer;
        if (op->declined || layer < 0 || en->g.layer_kv[layer] < 0) continue;
        const RadGKv *kv = &en->g.kvs[en->g.layer_kv[layer]];
        for (int b = 0; b < t->n_buckets; b++) {
            if (b && t->pick[b] == t->pick[b - 1]) continue;
            char why[256];
            int rc = rad_select_check_kv(t->pick[b], en->libs[t->pick_lib[b]]->info->name, kv->name, kv->block_size,
                                         kv->d.dtype, en->ctx.kv_quant, why, sizeof why);
            if (rc) return rad_err_set(e, rc, "op '%s' (#%d), rows %" PRId64 "..: %s", op->op, o, t->lo[b], why);
        }
    }
    return RAD_OK;
}

/* ---- KV ---------------------------------------------------------------------------------- */

/* The most blocks one sequence of group gi holds at once: its whole context, or, in a window
 * group, the blocks a step of max_tok tokens reads (its first query's window and the step). */
static uint32_t seq_blocks(const RadEngine *en, const RadGKv *k, uint32_t chunk) {
    const uint32_t B = k->block_size, full = (en->ctx.max_ctx + B - 1) / B;
    if (k->d.kind != RAD_KV_WINDOW) return full;
    const uint64_t win = ((uint64_t)k->d.window + en->ctx.max_spec - 1 + chunk + B - 1) / B + 1;
    return win < full ? (uint32_t)win : full;
}

static int build_kv(RadEngine *en, RadErr *e) {
    en->kv = calloc((size_t)(en->g.n_kvs ? en->g.n_kvs : 1), sizeof *en->kv);
    en->kv_state = calloc((size_t)(en->g.n_layer_kv ? en->g.n_layer_kv : 1), sizeof *en->kv_state);
    en->step_table = calloc((size_t)(en->g.n_kvs ? en->g.n_kvs : 1), sizeof *en->step_table);
    en->step_i32 = malloc((3ull * en->ctx.max_tok + 5ull * en->ctx.max_seqs + 1) * sizeof(int32_t));
    if (!en->kv || !en->kv_state || !en->step_table || !en->step_i32) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    if (en->root && en->root->g.n_kvs != en->g.n_kvs)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "plugin '%s': rank %u declares %d KV groups, rank 0 %d", en->arch->info->name,
                           en->rank, en->g.n_kvs, en->root->g.n_kvs);
    for (int gi = 0; gi < en->g.n_kvs; gi++) {
        const RadGKv *k = &en->g.kvs[gi];
        if (k->d.kind != RAD_KV_FULL && k->d.kind != RAD_KV_WINDOW)
            return rad_err_set(e, RAD_E_UNSUPPORTED, "KV group '%s': only FULL and WINDOW groups are served by this engine yet",
                               k->name);
        if (k->zero) /* a rank with no heads of it: this engine gives every rank at least one (rad_tp_share) */
            return rad_err_set(e, RAD_E_UNSUPPORTED, "KV group '%s': plugin '%s' declares it empty on rank %u "
                               "(rad_kv_group_zero): not served; every rank holds at least one KV head", k->name,
                               en->arch->info->name, en->rank);
        if (en->g.n_kvs > RAD_ENGINE_KV_GROUPS_MAX)
            return rad_err_set(e, RAD_E_UNSUPPORTED, "KV group '%s': the model declares %d groups, the engine serves %d", k->name,
                               en->g.n_kvs, RAD_ENGINE_KV_GROUPS_MAX);
        uint32_t layers = 0;
        for (int l = 0; l < en->g.n_layer_kv; l++) layers += en->g.layer_kv[l] == gi;
        const RadEncInfo *ei = rad_enc_info((RadEnc)k->d.dtype);
        uint64_t bb = 2ull * k->d.n_head_kv * k->block_size * k->d.head_dim * ei->block_bytes;
        uint32_t per_seq = seq_blocks(en, k, en->ctx.max_tok); /* a window group: bounded, whatever the context */
        uint32_t blocks = en->root ? en->root->kv[gi].n_blocks : en->o.kv_blocks; /* one block table serves every rank */
        if (!blocks) { /* max_seqs full contexts, within a quarter of the machine's memory (at least one
                        * full context): past it, the scheduler preempts rather than the pool failing */
            uint64_t want = (uint64_t)per_seq * en->ctx.max_seqs, per_block = bb * (layers ? layers : 1);
            long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
            uint64_t budget = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 4 : UINT64_MAX;
            uint64_t fit = per_block ? budget / per_block : want;
            if (fit < per_seq) fit = per_seq;
            blocks = (uint32_t)(want < fit ? want : fit);
        }
        /* a window group keeps max_spec keys more than its window: a verify row's rejected drafts
         * roll back to a position whose window the slide to the drafts' end must not have released */
        int rc = rad_kvcache_init(&en->kv[gi], k->block_size, k->d.kind == RAD_KV_WINDOW ? k->d.window + en->ctx.max_spec : 0, blocks,
                                  en->ctx.max_ctx, en->ctx.max_seqs, layers ? layers : 1, bb, e);
        if (rc) return rc;
        if (!(en->step_table[gi] = calloc((size_t)en->ctx.max_seqs * en->kv[gi].max_blocks, sizeof(int32_t))))
            return rad_err_set(e, RAD_E_NOMEM, "out of memory");
        if (en->dev) { /* the pools live on the device; the manager's host map is never touched (only its indices) */
            if (!en->dev_pools && !(en->dev_pools = calloc((size_t)en->g.n_kvs, sizeof *en->dev_pools)))
                return rad_err_set(e, RAD_E_NOMEM, "out of memory");
            if (!(en->dev_pools[gi] = en->dev->alloc(en->dev_state, en->kv[gi].pool_map_bytes)))
                return rad_err_set(e, RAD_E_NOMEM, "KV group '%s': kernel library '%s' cannot allocate %zu bytes of device memory "
                                   "for %u blocks (--kv-blocks sets fewer)", k->name, en->libs[0]->info->name,
                                   en->kv[gi].pool_map_bytes, en->kv[gi].n_blocks);
        }
        uint32_t li = 0;
        for (int l = 0; l < en->g.n_layer_kv; l++) {
            if (en->g.layer_kv[l] != gi) continue;
            uint8_t *pool = en->kv[gi].pools[li++];
            if (en->dev) pool = en->dev_pools[gi] + (pool - en->kv[gi].pool_map);
            en->kv_state[l] = (RadKvState){.group = {gi}, .pool = pool, .dtype = k->d.dtype, .kv_quant = en->ctx.kv_quant,
                                           .block_size = k->block_size, .n_head_kv = k->d.n_head_kv,
                                           .head_dim = k->d.head_dim, .layer = (uint32_t)l, .block_bytes = bb,
                                           .max_blocks = en->kv[gi].max_blocks, .n_blocks = en->kv[gi].n_blocks};
        }
    }
    return RAD_OK;
}

/* ---- the step-time API ---------------------------------------------------------------------- */


__attribute__((format(printf, 2, 3))) static int step_err(RadEngine *en, const char *fmt, ...) {
    if (!en->step_failed) {
        en->step_failed = 1;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(en->step_msg, sizeof en->step_msg, fmt, ap);
        va_end(ap);
    }
    return RAD_E_SHAPE;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* An issue reads a dozen small tables that the weight stream evicted since the last step: asking
 * for them all at once turns a chain of cache misses into one wait. */
static void issue_prefetch(const RadEngine *en, const RadGOp *op, const RadSelectTable *cand, const RadOperand *ops,
                           uint32_t n_ops) {
    const char *p = (const char *)op->params;
    for (size_t o = 0; o < op->n_params * sizeof *op->params; o += 64) __builtin_prefetch(p + o);
    __builtin_prefetch(cand->lo), __builtin_prefetch(cand->pick), __builtin_prefetch(cand->pick_lib);
    for (uint32_t i = 0; i < n_ops && i < MAX_OPERANDS; i++) {
        if (ops[i].kind == RAD_OPND_WEIGHT && ops[i].w.id >= 0 && ops[i].w.id < en->g.n_w) {
            __builtin_prefetch(&en->w[ops[i].w.id]);
            __builtin_prefetch((const char *)&en->w[ops[i].w.id] + sizeof(RadEngineWeight) - 1);
        } else if (ops[i].kind == RAD_OPND_BUF && ops[i].buf.id >= 0 && ops[i].buf.id < en->g.n_bufs) {
            __builtin_prefetch(&en->g.bufs[ops[i].buf.id]);
            __builtin_prefetch((const char *)&en->g.bufs[ops[i].buf.id] + sizeof(RadGBuf) - 1);
        }
    }
}

static int c_issue(RadCtx *c, rad_op h, const RadOperand *ops, uint32_t n_ops, uint64_t n) {
    RadEngine *en = E(c);
    if (en->step_failed) return RAD_E_SHAPE; /* rad_step_fail (or a failed op) ends the step: nothing more runs */
    if (h.id < 0 || h.id >= en->g.n_ops) return step_err(en, "an undeclared op was issued");
    const RadGOp *op = &en->g.ops[h.id];
    if (n == RAD_EXTENT_BATCH) n = en->batch->n_tok;
    if (n == 0) return RAD_E_SHAPE; /* zero rows is not a call: nothing runs, nothing written */
    const RadSelectTable *cand = &op->sel;
    if ((int64_t)n > cand->range_hi) /* the workspace and the buckets end at the declared range */
        return step_err(en, "op '%s' (#%d) issued over %" PRIu64 " rows, past the %" PRId64 " its range declares", op->op, h.id, n,
                        cand->range_hi);
    issue_prefetch(en, op, cand, ops, n_ops);
    const int bucket = rad_select_bucket(cand, (int64_t)n);
    const RadKernel *k = bucket >= 0 ? cand->pick[bucket] : NULL;
    if (!k) return step_err(en, "op '%s' (#%d) over %" PRIu64 " rows: no selected kernel serves it", op->op, h.id, n);
    if (op->n_params > MAX_PARAMS || n_ops > MAX_OPERANDS) return step_err(en, "op '%s': too many operands", op->op);
    RadParam params[MAX_PARAMS];
    memcpy(params, op->params, op->n_params * sizeof *params);
    for (uint32_t i = 0; i < op->n_params; i++) {
        __builtin_prefetch(params[i].name); /* kernels look parameters up by name */
        if (params[i].kind == RAD_PARAM_RANGE) params[i].lo = params[i].hi = (int64_t)n;
    }
    RadKArg args[MAX_OPERANDS];
    memset(args, 0, sizeof args);
    for (uint32_t i = 0; i < n_ops; i++) {
        const RadOperand *o = &ops[i];
        RadKArg *a = &args[i];
        if (o->kind == RAD_OPND_WEIGHT) {
            if (o->w.id < 0 || o->w.id >= en->g.n_w || !en->w[o->w.id].arg.data)
                return step_err(en, "op '%s': weight operand %u is not loaded", op->op, i);
            *a = en->w[o->w.id].arg;
            if ((a->dtype & RAD_PACKED) && !kernel_packs(k, (RadEnc)(a->dtype & ~RAD_PACKED)))
                return step_err(en, "op '%s': weight operand %u is packed for another kernel's layout", op->op, i);
        } else if (o->kind == RAD_OPND_BUF) {
            if (o->buf.id < 0 || o->buf.id >= en->g.n_bufs) return step_err(en, "op '%s': buffer operand %u undeclared", op->op, i);
            const RadGBuf *b = &en->g.bufs[o->buf.id];
            uint64_t cols = 1;
            for (uint32_t d = 1; d < b->d.rank; d++) cols *= b->d.shape[d];
            if (o->row0 + o->rows > b->d.shape[0])
                return step_err(en, "op '%s': rows [%" PRIu64 ", +%" PRIu64 ") of buffer '%s' past its %" PRIu64 " rows", op->op,
                                o->row0, o->rows, b->name, b->d.shape[0]);
            uint8_t *base = buf_at(en, b);
            size_t esz = rad_enc_info((RadEnc)b->d.dtype)->block_bytes;
            a->data = base + o->row0 * cols * esz;
            a->dtype = b->d.dtype;
            a->rows = o->rows;
            a->cols = cols;
            a->row_stride = cols;
        } else {
            a->data = (void *)o->raw;
            a->dtype = o->dtype;
            a->rows = o->n;
            a->cols = 1;
            a->row_stride = 1;
            if (en->dev) { /* the device copy, and the host values for the kernel's checks (ABI 1.9) */
                const RadEncInfo *ei = rad_enc_info((RadEnc)o->dtype);
                a->planes[1] = o->raw;
                if (!ei || !(a->data = dev_raw(en, o->raw, o->n * ei->block_bytes)))
                    return step_err(en, "op '%s': raw operand %u (%" PRIu64 " values) could not be copied to the device", op->op, i,
                                    o->n);
            }
        }
    }
    RadKernelArgs ka = {.struct_size = sizeof ka, .params = params, .n_params = op->n_params, .n = (int64_t)n,
                        .args = args, .n_args = n_ops, .batch = en->batch, .workspace = en->workspace,
                        .n_threads = en->o.n_threads, .deterministic = (uint32_t)en->o.deterministic};
    const int32_t layer = en->cand[h.id].layer;
    if (layer >= 0) ka.kv = &en->kv_state[layer];
    if (cand->n_knobs && cand->n_knobs[bucket]) /* the tuning table's knob values for this pick */
        ka.knobs = &cand->knobs[(size_t)bucket * RAD_KNOB_MAX], ka.n_knobs = cand->n_knobs[bucket];
    const int li = cand->pick_lib[bucket];
    ka.lib_state = li >= 0 ? en->lib_state[li] : NULL;
    en->n_issues++;
    const uint64_t t0 = en->prof_ns ? now_ns() : 0;
    int rc = k->run(&ka);
    if (en->prof_ns && en->dev && rc == RAD_OK) rc = en->dev->sync(en->dev_state); /* --profile times the device's work */
    if (en->prof_ns) en->prof_ns[en->prof_at[h.id] + bucket] += now_ns() - t0, en->prof_calls[en->prof_at[h.id] + bucket]++;
    if (h.id + 1 < en->g.n_ops) /* a step issues ops mostly in declaration order */
        __builtin_prefetch(&en->g.ops[h.id + 1]), __builtin_prefetch(&en->cand[h.id + 1]);
    if (rc == RAD_E_IO && en->world > 1 && en->cand[h.id].collective) en->step_released = 1; /* another rank failed first */
    if (rc != RAD_OK)
        return step_err(en, "op '%s' (#%d) on %s:%s over %" PRIu64 " rows failed: %s", op->op, h.id,
                        li >= 0 ? en->libs[li]->info->name : "?", k->variant, n, rad_status_name(rc)), rc;
    return RAD_OK;
}

static void c_step_fail(RadCtx *c, const char *what) { step_err(E(c), "%s", what ? what : "the plugin failed the step"); }
static int c_lane(RadCtx *c, int lane) { (void)c; return lane == 0 ? RAD_OK : RAD_E_UNSUPPORTED; }

static const RadCtxApi CTX_API = {sizeof(RadCtxApi), c_issue, c_step_fail, c_lane};

/* ---- what a plugin may declare that this core does not serve ---------------------------------
 * Refused at open by name: an accepted declaration that changes nothing would be a silent
 * substitution (../shared/spec/architecture-plugins.md). docs/PLUGINS.md, "What the core serves". */
static int refuse_unserved(RadEngine *en, const char *model, RadErr *e) {
    const char *pn = en->arch->info->name;
    const RadGraph *g = &en->g;
    if (g->has_drafter) /* its draft passes (RadBatch.draft_pass) are never issued here */
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: plugin '%s' declares a drafter of its own (rad_declare_drafter, depth %u): "
                           "the engine does not run a plugin's draft passes yet (--spec ngram or --draft FILE draft outside "
                           "the model)", model, pn, g->drafter.depth);
    if (g->scores)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: plugin '%s' opts into scored steps (rad_declare_scores): the engine runs "
                           "no host-side scored step", model, pn);
    if (g->n_encoders)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: plugin '%s' declares %d encoder tower(s) (rad_declare_encoder): the engine "
                           "runs no vision or audio encoder", model, pn, g->n_encoders);
    if (g->n_generators)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: plugin '%s' declares %d generation program(s) (rad_declare_generator): the "
                           "engine runs no image, audio or video generation", model, pn, g->n_generators);
    if (en->arch->text_prepare)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: plugin '%s' exports rad_arch_text_prepare: the server does not rewrite "
                           "request text yet, and serving it unrewritten would not be the model's training form", model, pn);
    for (int i = 0; i < g->n_bufs; i++)
        if (g->bufs[i].d.kind == RAD_BUF_DERIVED)
            return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: plugin '%s': buffer '%s' is DERIVED ('%s'): the core computes no "
                               "per-step derivation yet", model, pn, g->bufs[i].name, g->bufs[i].d.derive);
    for (int i = 0; i < g->n_ops; i++)
        for (uint32_t j = 0; j < g->ops[i].n_params; j++)
            if (g->ops[i].params[j].role == RAD_PROLE_CAPACITY)
                return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: plugin '%s': op '%s' parameter '%s' is a CAPACITY "
                                   "(RAD_PROLE_CAPACITY): the core sizes no capacity parameter yet", model, pn, g->ops[i].op,
                                   g->ops[i].params[j].name);
    return RAD_OK;
}

/* Steps are cut at every op's sequence chunk (RAD_PROLE_SEQ_CHUNK: "the core cuts steps on it"):
 * a range parameter's end as selection served it (the declared end, or where the kernels'
 * extents stop below it: rad_select_table), an int parameter's value. */
static void cut_steps(RadEngine *en) {
    for (int i = 0; i < en->g.n_ops; i++) {
        const RadGOp *op = &en->g.ops[i];
        if (op->declined) continue;
        for (uint32_t j = 0; j < op->n_params; j++) {
            const RadParam *p = &op->params[j];
            if (p->role != RAD_PROLE_SEQ_CHUNK) continue;
            const int64_t hi = p->kind == RAD_PARAM_RANGE ? op->sel.range_hi : p->lo;
            if (hi >= 1 && hi < (int64_t)en->ctx.max_tok) en->ctx.max_tok = (uint32_t)hi;
        }
    }
}

/* The persistent region starts zeroed (an accumulator's first step adds to zeros), on the device too. */
static int persist_zero(RadEngine *en, RadErr *e) {
    const size_t n = en->g.persist_bytes;
    if (!n) return RAD_OK;
    if (!en->dev) return memset(en->persist, 0, n), RAD_OK;
    void *z = calloc(1, n);
    const int rc = z ? en->dev->copy(en->dev_state, en->persist, z, n, 1) : RAD_E_NOMEM;
    free(z);
    return rc ? rad_err_set(e, rc, "kernel library '%s': the %zu-byte persistent region could not be zeroed: %s",
                            en->libs[0]->info->name, n, rad_status_name(rc))
              : RAD_OK;
}

/* ---- the tuning table ---------------------------------------------------------------------- */

int rad_engine_kv_type(const char *name, RadDType *out) {
    static const struct { const char *name; RadDType t; } kv[] = {{"f32", RAD_F32}, {"f16", RAD_F16}, {"bf16", RAD_BF16}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if (!strcmp(name, kv[i].name)) return *out = kv[i].t, 1;
    return 0;
}

/* A KV width flag's value into *dtype, *quant; RAD_E_ARG naming the flag when it is not one it takes. */
static int kv_flag_value(int kv_type, const char *value, RadDType *dtype, RadKvQuant *quant, RadErr *e) {
    static const struct { const char *name; RadKvQuant q; } fp8[] = {{"fp8_v4", RAD_KVQ_V4}, {"fp8_k6v4", RAD_KVQ_K6V4}};
    *quant = RAD_KVQ_NONE;
    if (rad_engine_kv_type(value, dtype)) return RAD_OK;
    if (kv_type) return rad_err_set(e, RAD_E_ARG, "--kv-type: '%s' is not f32, f16 or bf16", value);
    for (size_t i = 0; i < sizeof fp8 / sizeof fp8[0]; i++)
        if (!strcmp(value, fp8[i].name)) return *dtype = RAD_F8_E4M3, *quant = fp8[i].q, RAD_OK;
    return rad_err_set(e, RAD_E_ARG, "--kv-cache-dtype: '%s' is not f32, f16, bf16, fp8_v4 or fp8_k6v4", value);
}

int rad_engine_deploy_flag(RadEngineOpts *o, const char *flag, const char *value, RadErr *e) {
    const int kv_type = !strcmp(flag, "--kv-type");
    if (kv_type || !strcmp(flag, "--kv-cache-dtype")) { /* one setting, two spellings: the value first, then the pair */
        RadDType dt;
        RadKvQuant q;
        int rc = kv_flag_value(kv_type, value, &dt, &q, e);
        if (rc) return rc;
        if (o->kv_flag && strcmp(o->kv_flag, flag))
            return rad_err_set(e, RAD_E_ARG, "--kv-type and --kv-cache-dtype: give one of them");
        o->kv_flag = kv_type ? "--kv-type" : "--kv-cache-dtype";
        o->kv_dtype = dt, o->kv_quant = q;
        return RAD_OK;
    }
    if (!strcmp(flag, "--control-vector")) {
        if (!*value) return rad_err_set(e, RAD_E_ARG, "--control-vector: expected a file name");
        o->control_vector = value;
        return RAD_OK;
    }
    if (!strcmp(flag, "--tp-attn-split")) {
        if (strcmp(value, "rows")) return rad_err_set(e, RAD_E_ARG, "--tp-attn-split: '%s' is not rows", value);
        o->tp_attn_rows = 1;
        return RAD_OK;
    }
    if (!strcmp(flag, "--state-cache-dtype")) {
        if (strcmp(value, "f32") && strcmp(value, "f16"))
            return rad_err_set(e, RAD_E_ARG, "--state-cache-dtype: '%s' is not f32 or f16", value);
        o->state_dtype = strcmp(value, "f16") ? (RadDType)0 : RAD_F16;
        return RAD_OK;
    }
    if (!strcmp(flag, "--tp")) {
        double v;
        int rc = rad_num_f64("--tp", value, 1, 64, RAD_NUM_WHOLE, &v, e);
        if (!rc) o->tp = (uint32_t)v;
        return rc;
    }
    if (!strcmp(flag, "--tp-wire")) {
        if (strcmp(value, "exact") && strcmp(value, "lossy"))
            return rad_err_set(e, RAD_E_ARG, "--tp-wire: '%s' is not exact or lossy", value);
        o->tp_wire_lossy = !strcmp(value, "lossy");
        return RAD_OK;
    }
    if (!strcmp(flag, "--tp-wire-min-bytes")) {
        double v;
        int rc = rad_num_f64("--tp-wire-min-bytes", value, 1, (double)(1ull << 40), RAD_NUM_WHOLE, &v, e);
        if (!rc) o->tp_wire_min_bytes = (uint64_t)v;
        return rc;
    }
    if (!strcmp(flag, "--kv-resident")) {
        double v;
        int rc = rad_num_f64("--kv-resident", value, 1, 1 << 24, RAD_NUM_WHOLE, &v, e);
        if (!rc) o->kv_resident = (uint32_t)v;
        return rc;
    }
    return rad_err_set(e, RAD_E_ARG, "%s: not a deployment switch", flag);
}

void rad_engine_deploy_apply(RadEngineOpts *o, const RadEngineOpts *d) {
    if (d->kv_flag) o->kv_dtype = d->kv_dtype;
    o->kv_quant = d->kv_quant;
    o->control_vector = d->control_vector;
    o->tp_attn_rows = d->tp_attn_rows;
    o->state_dtype = d->state_dtype;
    o->kv_resident = d->kv_resident;
    o->tp = d->tp;
    o->tp_wire_lossy = d->tp_wire_lossy;
    o->tp_wire_min_bytes = d->tp_wire_min_bytes;
}

void rad_engine_tune_key(const RadEngine *en, RadTuneKey *k) {
    memset(k, 0, sizeof *k);
    k->container = en->m.id;
    for (int i = 0; i < en->n_libs && k->n_libs < RAD_TUNE_MAX_LIBS; i++, k->n_libs++) {
        const RadPluginInfo *in = en->libs[i]->info;
        snprintf(k->libs[i].name, sizeof k->libs[i].name, "%s", in->name);
        snprintf(k->libs[i].version, sizeof k->libs[i].version, "%s", in->version && *in->version ? in->version : "-");
    }
    rad_tune_cpu(k->cpu_model, sizeof k->cpu_model, k->cpu_flags, sizeof k->cpu_flags);
    k->max_tok = en->ctx.max_tok;
    k->max_seqs = en->ctx.max_seqs;
    k->ctx = en->ctx.max_ctx;
    k->max_tolerance = en->o.max_tolerance;
    k->deterministic = en->o.deterministic != 0;
    k->threads = en->o.n_threads;
    const RadEncInfo *ei = rad_enc_info((RadEnc)en->o.kv_dtype);
    snprintf(k->kv_dtype, sizeof k->kv_dtype, "%s", en->o.kv_quant == RAD_KVQ_V4     ? "fp8_v4" /* the layout, not just the width */
                                                     : en->o.kv_quant == RAD_KVQ_K6V4 ? "fp8_k6v4"
                                                     : ei                             ? ei->name
                                                                                      : "?");
}

const char *rad_engine_tune_warning(const RadEngine *en) { return en->tune_warn[0] ? en->tune_warn : NULL; }

/* --tune: the table read and checked, then its key against this run's: another container,
 * library version, CPU or option set is refused naming the difference (or, asked, ignored). */
static int load_tune(RadEngine *en, RadErr *e) {
    RadTuneTable *t = calloc(1, sizeof *t);
    if (!t) return rad_err_set(e, RAD_E_NOMEM, "--tune %s: out of memory", en->o.tune);
    int rc = rad_tune_read(en->o.tune, t, e);
    if (rc) return free(t), rc;
    RadTuneKey here;
    rad_engine_tune_key(en, &here);
    char why[560];
    if (rad_tune_key_diff(&t->key, &here, why, sizeof why)) {
        rad_tune_free(t);
        free(t);
        if (!en->o.tune_ignore_mismatch)
            return rad_err_set(e, RAD_E_UNSUPPORTED, "--tune %s: %s (re-tune, or --tune-ignore-mismatch to run without it)",
                               en->o.tune, why);
        snprintf(en->tune_warn, sizeof en->tune_warn, "--tune %s ignored: %s", en->o.tune, why);
        return RAD_OK;
    }
    en->tune = t;
    return RAD_OK;
}

/* ---- open / close ------------------------------------------------------------------------- */

static int engine_open(RadEngine *en, const RadEngineOpts *o, uint32_t rank, uint32_t world, const RadEngine *root,
                       RadErr *e) {
    memset(en, 0, sizeof *en);
    en->o = *o;
    en->rank = rank, en->world = world, en->root = root;
    if (!en->o.max_tok) en->o.max_tok = RAD_SERVE_MAX_TOK;
    if (!en->o.max_seqs) en->o.max_seqs = 1;
    if (en->o.max_tolerance <= 0) en->o.max_tolerance = 1e-3;
    if (!en->o.n_threads) { /* "all cores", resolved once: kernels are never told 0 */
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        en->o.n_threads = nc > 0 ? (uint32_t)nc : 1;
    }
    en->guard = -1;
    int rc = rad_model_open(o->model, &en->m, e);
    if (rc) return rc;
    if (strcmp(en->m.format, "rad") != 0)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: a %s file; radiance runs .rad containers (make one with rad-convert)",
                           o->model, en->m.format);
    if (en->m.n_tensors == 0) /* rad-convert --vocab-only: --tokenize/--detokenize read it without an engine */
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: this container holds no weights (vocabulary only)", o->model);
    /* a read past a truncation ends in one line and a documented status, not a death by SIGBUS */
    en->guard = rad_model_guard(&en->m, o->mmap_weights ? "changed while mapped (--mmap): truncated (SIGBUS reading the weights)"
                                                         : "truncated while loading (SIGBUS reading the weights)");
    if ((rc = rad_model_meta(&en->m, &en->meta, e))) return rc;
    if ((rc = rad_meta_table_fill(&en->meta, &en->m.meta, &en->m.chat, &en->meta_keys, &en->meta_vals, e))) return rc;
    char **dirs;
    int n_dirs = rad_plugin_dirs(o->plugin_dirs, o->n_plugin_dirs, &dirs);
    rc = rad_plugins_load(&en->plugins, dirs, n_dirs, e);
    rad_plugin_dirs_free(dirs, n_dirs);
    if (rc) return rc;
    const char *origin = "native";
    rad_dict_gets(&en->m.meta, "model.quant_origin", &origin, NULL);
    if ((rc = rad_plugins_find_arch(&en->plugins, en->meta.arch_id, en->meta.quant, origin, &en->arch, e))) return rc;
    /* the deployment switches: a control vector is read and checked before the probe may refuse it */
    if (o->control_vector && (rc = rad_cvec_load(o->control_vector, &en->meta, &en->cvec, e))) return rc;
    RadDeployFlags flags = {.kv_quant = o->kv_quant, .control_vector = o->control_vector != NULL,
                            .tp_attn_rows = o->tp_attn_rows, .state_f16 = o->state_dtype == RAD_F16,
                            .kv_resident = o->kv_resident != 0, .spec_depth = o->speculate ? o->spec_depth : 0};
    RadArchProbe probe;
    if ((rc = rad_plugin_check_flags(en->arch, &en->meta, &flags, &probe, e))) return rc;
    if (o->kv_resident) /* granted, but this core keeps every block resident: refused, never ignored */
        return rad_err_set(e, RAD_E_UNSUPPORTED, "--kv-resident %u: plugin '%s' may stream KV, but the engine does not stream KV yet",
                           o->kv_resident, en->arch->info->name);
    if ((rc = pick_libs(en, e))) return rc;
    en->ctx = rad_build_ctx_for(&en->meta, &(RadStepBounds){.max_tok = en->o.max_tok, .max_seqs = en->o.max_seqs,
                                                             .max_ctx = o->max_ctx, .max_out_rows = o->max_out_rows,
                                                             .kv_dtype = o->kv_dtype});
    en->ctx.rank = rank, en->ctx.world_size = world; /* the plugin declares this rank's share */
    en->ctx.tp_wire_lossy = world > 1 && o->tp_wire_lossy;
    en->ctx.tp_wire_min_bytes = o->tp_wire_min_bytes ? o->tp_wire_min_bytes : 65536;
    en->ctx.kv_quant = o->kv_quant; /* each switch reaches the declare only past its probe bit */
    en->ctx.cvec = en->cvec;
    en->ctx.tp_attn_rows = o->tp_attn_rows;
    if (o->state_dtype) en->ctx.state_dtype = o->state_dtype;
    /* a verify row carries 1 + max_spec tokens, each with logits; the depth: asked, else the probe's */
    if (o->speculate)
        en->ctx.max_spec = o->spec_depth ? o->spec_depth : probe.draft_depth ? probe.draft_depth : RAD_SPEC_DEPTH_DEFAULT;
    if (en->ctx.max_spec > RAD_SPEC_DEPTH_MAX)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "speculative decoding: plugin '%s' drafts %u tokens a row; the engine verifies "
                           "at most %d", en->arch->info->name, en->ctx.max_spec, RAD_SPEC_DEPTH_MAX);
    if (o->scope && *o->scope) en->ctx.is_draft = 1, en->ctx.scope = o->scope;
    if (o->tune && (rc = load_tune(en, e))) return rc;
    en->select = (RadSelectOpts){.libs = &en->sel, .max_tolerance = en->o.max_tolerance, .deterministic = en->o.deterministic,
                                 .tune = en->tune};
    if ((rc = rad_graph_declare(&en->g, en->arch, &en->meta, &en->ctx, &en->select, container_lookup, en, e))) return rc;
    if ((rc = rad_graph_check_encodings(&en->g, e))) return rc;
    if ((rc = refuse_unserved(en, o->model, e))) return rc;
    if ((rc = rad_graph_plan(&en->g, e))) return rc;
    en->arena = mem_alloc(en, en->g.arena_bytes);
    en->persist = mem_alloc(en, en->g.persist_bytes);
    if (!en->arena || !en->persist)
        return rad_err_set(e, RAD_E_NOMEM, "cannot allocate the %" PRIu64 "-byte activation arena%s", en->g.arena_bytes,
                           en->dev ? " in device memory" : "");
    if ((rc = persist_zero(en, e))) return rc;
    if (en->dev) { /* a step's raw operands, and the host copy of what it returns */
        en->dev_raw_cap = (size_t)16 * 4 * ((size_t)en->ctx.max_tok + en->ctx.max_seqs + 1) + ((size_t)64 << 10);
        const int out = en->g.logits.id >= 0 ? en->g.logits.id : en->g.pooled.id;
        en->host_out_bytes = out >= 0 ? (size_t)en->g.bufs[out].d.shape[0] * (size_t)en->g.bufs[out].d.shape[1] * sizeof(float) : 0;
        if (en->g.argmax >= 0 && !(en->host_ids = malloc((size_t)en->g.bufs[en->g.argmax_ids.id].d.shape[0] * sizeof *en->host_ids)))
            return rad_err_set(e, RAD_E_NOMEM, "out of memory");
        if (!(en->dev_raw = en->dev->alloc(en->dev_state, en->dev_raw_cap)) || !(en->host_out = malloc(en->host_out_bytes + 1)))
            return rad_err_set(e, RAD_E_NOMEM, "out of memory for a step's operands on kernel library '%s'", en->libs[0]->info->name);
    }
    if ((rc = build_candidates(en, e))) return rc; /* first: the picks decide which weights are packed */
    cut_steps(en);
    if ((rc = check_kv_kernels(en, e))) return rc;
    if ((rc = bind_weights(en, e))) return rc;
    if ((rc = dev_upload_weights(en, e))) return rc;
    if (!en->o.mmap_weights) { /* every weight is in wstore now: the file is never read again */
        rad_model_unguard(en->guard);
        en->guard = -1;
        rad_model_release_data(&en->m);
    } else if ((rc = rad_model_check_unchanged(&en->m, e))) { /* changed while loading */
        return rc;
    }
    if ((rc = build_kv(en, e))) return rc;
    en->head.struct_size = sizeof en->head;
    en->head.api = &CTX_API;
    en->head.model = en->g.model;
    return RAD_OK;
}

/* ---- tensor-parallel ranks: engines stepped in lock-step on threads of their own ------------- */

typedef struct RadTp {
    uint32_t n;                    /* ranks, rank 0 included */
    RadEngine **rank;              /* [n] rank 0 is the root itself */
    pthread_t *th;                 /* [n] threads of ranks 1..n-1 */
    uint32_t started;              /* threads running */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen;                  /* steps handed out */
    uint32_t left;                 /* ranks 1.. still in the current step */
    int quit;
    const RadBatch *b;             /* the current step's batch (rank 0's) */
    atomic_int failed;             /* 1: a rank's own failure poisoned the communicators this step */
} RadTp;

/* The group's lock-step state, from any rank (rank 0 holds it). */
static RadTp *tp_of(const RadEngine *en) { return en->root ? en->root->tp : en->tp; }

static int tp_another_failed(const RadEngine *en) {
    const RadTp *tp = tp_of(en);
    return tp && atomic_load(&tp->failed);
}

/* Every library's communicator poisoned (on = 1: this rank left its step early, so no rank waits
 * on it) or usable again (on = 0, every rank out of the step). */
static void comm_abort_all(RadEngine *en, int on) {
    for (int i = 0; i < en->n_libs; i++) {
        const RadKernelLib *l = en->libs[i]->lib;
        if (l->struct_size >= offsetof(RadKernelLib, comm_abort) + sizeof l->comm_abort && l->comm_abort)
            l->comm_abort(en->lib_state[i], on);
    }
}

/* One rank's part of a step: its KV states read the batch's block tables (rank 0's), and the
 * plugin issues its ops on this rank's weights, arena and pools. */
static void rank_step(RadEngine *en, const RadBatch *b) {
    en->batch = b;
    en->step_failed = en->step_released = 0;
    en->step_msg[0] = 0;
    for (int l = 0; l < en->g.n_layer_kv; l++) {
        int gi = en->g.layer_kv[l];
        if (gi < 0) continue;
        en->kv_state[l].block_table = b->kv && (uint32_t)gi < b->n_kv ? b->kv[gi].block_table : NULL;
    }
    en->n_dev_raw_seen = 0, en->dev_raw_used = 0;
    /* a device library may record the step's launches between its step hooks (CUDA graphs);
     * --profile syncs after every op, so it runs without them */
    const int hooks = en->dev && !en->prof_ns && en->dev->struct_size >= offsetof(RadKernelLib, step_end) + sizeof en->dev->step_end &&
                      en->dev->step_begin && en->dev->step_end;
    int rc = hooks ? en->dev->step_begin(en->dev_state, b) : RAD_OK;
    en->ids_valid = en->ids_issued = 0;
    if (rc) step_err(en, "kernel library '%s': step_begin failed: %s", en->libs[0]->info->name, rad_status_name(rc));
    else en->arch->step(&en->head, b);
    if (!rc && !en->step_failed && en->want_ids && b->n_out) { /* the core's argmax (want_ids: rank 0, served) */
        const RadOperand o[2] = {brows(en->g.logits, b->n_out), brows(en->g.argmax_ids, b->n_out)};
        en->ids_issued = c_issue(&en->head, (rad_op){en->g.argmax}, o, 2, b->n_out) == RAD_OK;
    }
    if (hooks && !rc && (rc = en->dev->step_end(en->dev_state, !en->step_failed)) != RAD_OK)
        step_err(en, "kernel library '%s': step_end failed: %s", en->libs[0]->info->name, rad_status_name(rc));
    if (en->dev) dev_finish_step(en, b);
    en->batch = NULL;
    if (en->step_failed && en->world > 1) {
        RadTp *tp = tp_of(en);
        if (tp && !en->step_released) atomic_store(&tp->failed, 1); /* before the release the others see */
        comm_abort_all(en, 1);
    }
}

static void *rank_thread(void *arg) {
    RadEngine *en = arg;
    RadTp *tp = tp_of(en);
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&tp->mu);
        while (tp->gen == seen && !tp->quit) pthread_cond_wait(&tp->go, &tp->mu);
        if (tp->quit) {
            pthread_mutex_unlock(&tp->mu);
            return NULL;
        }
        seen = tp->gen;
        const RadBatch *b = tp->b;
        pthread_mutex_unlock(&tp->mu);
        rank_step(en, b);
        pthread_mutex_lock(&tp->mu);
        if (--tp->left == 0) pthread_cond_signal(&tp->done);
        pthread_mutex_unlock(&tp->mu);
    }
}

/* Rank 0's step with every rank: ranks 1.. start on their threads, rank 0 runs here, and the
 * step ends when all have; a failure is the first rank's, named. */
static void tp_step(RadEngine *en, const RadBatch *b) {
    RadTp *tp = en->tp;
    pthread_mutex_lock(&tp->mu);
    tp->b = b;
    atomic_store(&tp->failed, 0);
    tp->left = tp->n - 1;
    tp->gen++;
    pthread_cond_broadcast(&tp->go);
    pthread_mutex_unlock(&tp->mu);
    rank_step(en, b);
    pthread_mutex_lock(&tp->mu);
    while (tp->left) pthread_cond_wait(&tp->done, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
    int failed = en->step_failed;
    for (uint32_t r = 1; r < tp->n; r++) { /* a rank's own failure, not the collectives it released */
        const RadEngine *q = tp->rank[r];
        if (!q->step_failed) continue;
        failed = 1;
        if (q->step_released || (en->step_failed && !en->step_released)) continue;
        en->step_failed = 1, en->step_released = 0;
        snprintf(en->step_msg, sizeof en->step_msg, "rank %u: %.480s", r, q->step_msg);
    }
    if (failed) comm_abort_all(en, 0);
}

static void tp_close(RadEngine *en) {
    RadTp *tp = en->tp;
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    tp->quit = 1;
    pthread_cond_broadcast(&tp->go);
    pthread_mutex_unlock(&tp->mu);
    for (uint32_t r = 0; r < tp->started; r++) pthread_join(tp->th[r], NULL);
    for (uint32_t r = 1; r < tp->n; r++) rad_engine_close(tp->rank[r]);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->go);
    pthread_cond_destroy(&tp->done);
    free(tp->rank);
    free(tp->th);
    free(tp);
    en->tp = NULL;
}

/* Ranks 1..world-1 opened against rank 0 (its communicators, its KV block counts), then their threads. */
static int tp_open(RadEngine *en, const RadEngineOpts *o, RadErr *e) {
    RadTp *tp = calloc(1, sizeof *tp);
    if (!tp) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    en->tp = tp;
    tp->n = en->world;
    tp->rank = calloc(tp->n, sizeof *tp->rank);
    tp->th = calloc(tp->n, sizeof *tp->th);
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->go, NULL);
    pthread_cond_init(&tp->done, NULL);
    if (!tp->rank || !tp->th) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    tp->rank[0] = en;
    RadEngineOpts ro = *o;
    ro.mmap_weights = 0, ro.profile = 0; /* a rank's slices are copies; rank 0 times the step */
    for (uint32_t r = 1; r < tp->n; r++) {
        RadEngine *q = malloc(sizeof *q);
        if (!q) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory for rank %u", o->model, r);
        int rc = engine_open(q, &ro, r, tp->n, en, e);
        if (rc) {
            rad_engine_close(q);
            return rc;
        }
        tp->rank[r] = q;
    }
    for (uint32_t r = 1; r < tp->n; r++) {
        if (pthread_create(&tp->th[tp->started], NULL, rank_thread, tp->rank[r]))
            return rad_err_set(e, RAD_E_NOMEM, "cannot start the thread of rank %u", r);
        tp->started++;
    }
    return RAD_OK;
}

RadEngine *rad_engine_rank(RadEngine *en, uint32_t r) {
    if (r == 0) return en;
    return en->tp && r < en->tp->n ? en->tp->rank[r] : NULL;
}

int rad_engine_open(RadEngine **out, const RadEngineOpts *o, RadErr *e) {
    *out = NULL;
    RadEngine *en = malloc(sizeof *en);
    if (!en) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory for the engine", o->model);
    const uint32_t world = o->tp > 1 ? o->tp : 1;
    RadEngineOpts ro = *o;
    if (world > 1) { /* the threads, shared out: each rank's kernels get their part */
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        uint32_t total = o->n_threads ? o->n_threads : nc > 0 ? (uint32_t)nc : 1;
        ro.n_threads = total / world ? total / world : 1;
    }
    int rc = engine_open(en, &ro, 0, world, NULL, e);
    if (!rc && world > 1) rc = tp_open(en, &ro, e);
    if (rc) return rad_engine_close(en), rc; /* what a failed open took is freed here, not by the caller */
    *out = en;
    return RAD_OK;
}

void rad_engine_close(RadEngine *en) {
    if (!en) return;
    tp_close(en);
    if (en->guard >= 0) rad_model_unguard(en->guard);
    if (en->wstore) munmap(en->wstore, en->wstore_bytes);
    free(en->w);
    free(en->cand); /* the tables themselves are the graph's */
    free(en->prof_ns);
    free(en->prof_calls);
    free(en->prof_at);
    for (int i = 0; en->kv && i < en->g.n_kvs; i++) rad_kvcache_free(&en->kv[i]);
    for (int i = 0; en->step_table && i < en->g.n_kvs; i++) free(en->step_table[i]);
    free(en->step_table);
    free(en->step_i32);
    free(en->kv);
    free(en->kv_state);
    mem_free(en, en->arena);
    mem_free(en, en->persist);
    mem_free(en, en->workspace);
    if (en->dev) {
        for (int i = 0; en->dev_pools && i < en->g.n_kvs; i++) mem_free(en, en->dev_pools[i]);
        mem_free(en, en->dev_weights);
        mem_free(en, en->dev_raw);
    }
    free(en->dev_pools);
    free(en->host_out);
    free(en->host_ids);
    free(en->cvec);
    for (int i = 0; i < en->n_libs; i++)
        if (en->libs[i]->lib->fini && en->lib_state[i]) en->libs[i]->lib->fini(en->lib_state[i]);
    free(en->libs);
    free(en->lib_state);
    free(en->comm);
    free(en->sel.p);
    rad_graph_free(&en->g);
    if (en->tune) rad_tune_free(en->tune);
    free(en->tune);
    if (en->meta_keys) rad_meta_table_free(&en->meta, en->meta_keys, en->meta_vals);
    rad_plugins_free(&en->plugins);
    rad_model_free(&en->m);
    free(en);
}

RadEngineLimits rad_engine_limits(const RadEngine *en) {
    return (RadEngineLimits){.max_ctx = en->ctx.max_ctx, .max_seqs = en->ctx.max_seqs, .max_tok = en->ctx.max_tok,
                             .n_threads = en->o.n_threads, .max_spec = en->ctx.max_spec};
}

const RadPlugin *rad_engine_arch(const RadEngine *en) { return en->arch; }
const RadModelMeta *rad_engine_meta(const RadEngine *en) { return &en->meta; }
const RadDict *rad_engine_tok_data(const RadEngine *en) { return &en->m.tok; }

const RadGraph *rad_engine_graph(const RadEngine *en) { return &en->g; }

const RadKArg *rad_engine_weight(const RadEngine *en, int w) {
    return w >= 0 && w < en->g.n_w && en->w[w].arg.data ? &en->w[w].arg : NULL;
}

int rad_engine_weight_slice(RadEngine *en, const RadModelFile *m, int w, void **bytes, uint64_t *n, RadErr *e) {
    *bytes = NULL, *n = 0;
    if (w < 0 || w >= en->g.n_w || !en->w[w].sliced_bytes) return RAD_OK;
    const RadGWeight *gw = &en->g.w[w];
    const RadTensor *t = rad_model_find(m, stored_name(en, gw->d.source ? gw->d.source : gw->name));
    WExtent x;
    int rc = t ? weight_extent(en, w, t, &x, e) : rad_err_set(e, RAD_E_NOTFOUND, "weight '%s': not in the container", gw->name);
    if (rc) return rc;
    uint8_t *whole = malloc(t->planes[0].nbytes ? t->planes[0].nbytes : 1), *cut = malloc(en->w[w].sliced_bytes);
    if (!whole || !cut) rc = rad_err_set(e, RAD_E_NOMEM, "out of memory");
    if (!rc) rc = rad_plane_load(m, t, 0, whole, 0, e);
    if (!rc) copy_slice(t, &x, whole, cut);
    free(whole);
    if (rc) return free(cut), rc;
    *bytes = cut, *n = en->w[w].sliced_bytes;
    return RAD_OK;
}

uint32_t rad_engine_world(const RadEngine *en) { return en->world; }

/* Rank r's engine (rank 0 is en itself), NULL past the ranks. */
static const RadEngine *rank_engine(const RadEngine *en, uint32_t rank) {
    return rank == 0 ? en : en->tp && rank < en->tp->n ? en->tp->rank[rank] : NULL;
}

const RadPlugin *rad_engine_rank_lib(const RadEngine *en, uint32_t rank, int i, void **state) {
    const RadEngine *q = rank_engine(en, rank);
    return q ? rad_engine_lib(q, i, state) : NULL;
}

const RadGraph *rad_engine_rank_graph(const RadEngine *en, uint32_t rank) {
    const RadEngine *q = rank_engine(en, rank);
    return q ? &q->g : NULL;
}

void rad_engine_comm_abort(RadEngine *en, int on) { comm_abort_all(en, on); }

const RadPlugin *rad_engine_lib(const RadEngine *en, int i, void **state) {
    if (i < 0 || i >= en->n_libs) return NULL;
    if (state) *state = en->lib_state[i];
    return en->libs[i];
}

/* ---- steps -------------------------------------------------------------------------------- */

const char *rad_engine_fail_closed(const RadEngine *en) { return en->changed ? en->changed_msg : NULL; }

/* --mmap: the file must be as it was at open before a step reads it and after, or the step's
 * results are refused (a write(2) moves mtime before it changes a byte, so a step that read
 * changed bytes sees it afterwards). Once changed, every step fails: no answer from those bytes. */
static int weights_unchanged(RadEngine *en, RadErr *e) {
    if (!en->o.mmap_weights) return RAD_OK;
    if (!en->changed) {
        RadErr w = {0};
        if (rad_model_check_unchanged(&en->m, &w) == RAD_OK) return RAD_OK;
        en->changed = 1;
        snprintf(en->changed_msg, sizeof en->changed_msg, "%s", w.msg);
    }
    return rad_err_set(e, RAD_E_IO, "%s", en->changed_msg);
}

int rad_engine_step(RadEngine *en, const RadBatch *b, RadErr *e) {
    if (b->n_tok == 0) return rad_err_set(e, RAD_E_SHAPE, "a step of zero tokens");
    if (b->n_tok > en->ctx.max_tok) return rad_err_set(e, RAD_E_LIMIT, "a step of %u tokens exceeds max_tok %u", b->n_tok, en->ctx.max_tok);
    int rc = weights_unchanged(en, e);
    if (rc) return rc;
    const uint64_t t0 = en->prof_ns ? now_ns() : 0;
    if (en->tp) tp_step(en, b); /* every rank, in lock-step */
    else rank_step(en, b);
    en->want_ids = 0; /* asked for one step at a time */
    if (en->prof_ns) en->prof_step_ns += now_ns() - t0, en->prof_steps++;
    if (en->step_failed) return rad_err_set(e, RAD_E_SHAPE, "step: %s", en->step_msg);
    return weights_unchanged(en, e);
}

const float *rad_engine_logits(const RadEngine *en, uint32_t *n_vocab) {
    if (en->g.logits.id < 0) return NULL;
    const RadGBuf *b = &en->g.bufs[en->g.logits.id];
    if (n_vocab) *n_vocab = (uint32_t)b->d.shape[1];
    if (en->dev && en->ids_valid) return NULL; /* that step's logits stayed on the device: its ids came back */
    if (en->dev) return (const float *)(void *)en->host_out; /* the step's rows, copied back */
    return (const float *)(void *)buf_at(en, b);
}

int rad_engine_serves_ids(const RadEngine *en) {
    return en->dev && en->host_ids && en->g.argmax >= 0 && !en->g.ops[en->g.argmax].declined; /* declined: not served */
}
void rad_engine_want_ids(RadEngine *en, int on) { en->want_ids = on && rad_engine_serves_ids(en); }
const int32_t *rad_engine_ids(const RadEngine *en) { return en->ids_valid ? en->host_ids : NULL; }

/* ---- an embedding program: pooled rows, no KV ------------------------------------------------ */

uint32_t rad_engine_pooled_dim(const RadEngine *en) {
    if (en->g.pooled.id < 0) return 0;
    return (uint32_t)en->g.bufs[en->g.pooled.id].d.shape[1];
}

uint32_t rad_engine_embed_max(const RadEngine *en) {
    uint32_t lim = en->ctx.max_ctx < en->ctx.max_tok ? en->ctx.max_ctx : en->ctx.max_tok, v = 0;
    if (rad_meta_u32(&en->meta, "pooling.max_tokens", 0, &v) == 1 && v && v < lim) lim = v;
    return lim;
}

/* The refusal of generation on an embedding program (and the reverse), one line each. */
static int refuse_pooled(const RadEngine *en, RadErr *e) {
    return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: an embedding model (plugin '%s' declares a pooled output): it does not "
                       "generate", en->o.model, en->arch->info->name);
}

int rad_engine_embed(RadEngine *en, const RadEngineText *texts, uint32_t n_seq, float *out, RadErr *e) {
    const uint32_t dim = rad_engine_pooled_dim(en);
    if (!dim)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: a generation model (plugin '%s' declares logits): it has no pooled "
                           "output (embeddings)", en->o.model, en->arch->info->name);
    if (!n_seq) return rad_err_set(e, RAD_E_SHAPE, "an embedding step of zero sequences");
    if (n_seq > en->ctx.max_seqs)
        return rad_err_set(e, RAD_E_LIMIT, "an embedding step of %u sequences exceeds max_seqs %u", n_seq, en->ctx.max_seqs);
    uint32_t S = en->ctx.max_seqs, T = en->ctx.max_tok, t = 0, max_q = 0;
    int32_t *tok = en->step_i32, *posv = tok + T, *outs = posv + T, *cu = outs + T, *sid = cu + S + 1, *ql = sid + S,
            *cl = ql + S;
    cu[0] = 0;
    for (uint32_t i = 0; i < n_seq; i++) {
        const uint32_t n = texts[i].n;
        if (!n || !texts[i].tokens) return rad_err_set(e, RAD_E_SHAPE, "text %u: zero tokens (an embedding needs one)", i);
        if (n > rad_engine_embed_max(en))
            return rad_err_set(e, RAD_E_LIMIT, "text %u: %u tokens exceed the %u an embedding takes (rad_engine_embed_max)", i, n,
                               rad_engine_embed_max(en));
        if ((uint64_t)t + n > T)
            return rad_err_set(e, RAD_E_LIMIT, "an embedding step of %" PRIu64 " tokens exceeds max_tok %u", (uint64_t)t + n, T);
        /* the model's rows, which may be fewer than the tokenizer's ids (EmbeddingGemma: 262144
         * rows, <image_soft_token> is id 262144): named here, not a failed step */
        for (uint32_t j = 0; j < n; j++)
            if (texts[i].tokens[j] < 0 || (en->meta.n_vocab > 0 && texts[i].tokens[j] >= en->meta.n_vocab))
                return rad_err_set(e, RAD_E_ARG, "text %u: token %d at index %u is outside the model's vocabulary (%d)", i,
                                   texts[i].tokens[j], j, en->meta.n_vocab);
        for (uint32_t j = 0; j < n; j++) tok[t + j] = texts[i].tokens[j], posv[t + j] = (int32_t)j;
        t += n;
        cu[i + 1] = (int32_t)t;
        sid[i] = (int32_t)i;
        ql[i] = cl[i] = (int32_t)n;
        if (n > max_q) max_q = n;
    }
    RadBatch bt = {.struct_size = sizeof bt, .phase = RAD_PHASE_PREFILL, .n_tok = t, .n_seq = n_seq, .token_ids = tok,
                   .positions = posv, .cu_seqlens = cu, .seq_ids = sid, .n_out = 0, .out_ids = outs, .q_lens = ql,
                   .ctx_lens = cl, .max_q_len = max_q, .max_ctx_len = max_q, .kv = NULL, .n_kv = 0};
    int rc = rad_engine_step(en, &bt, e);
    if (rc) return rc;
    const RadGBuf *b = &en->g.bufs[en->g.pooled.id];
    memcpy(out, en->dev ? en->host_out : (en->arena + b->offset), (size_t)n_seq * dim * sizeof *out);
    return RAD_OK;
}

/* A slot for seq_id in every group, or -1 (the slots this call took given back). */
static int take_slots(RadEngine *en, int32_t seq_id, int *slot, RadErr *e) {
    for (int gi = 0; gi < en->g.n_kvs; gi++) {
        if ((slot[gi] = rad_kvcache_seq(&en->kv[gi], seq_id)) >= 0) continue;
        for (int j = 0; j < gi; j++)
            if (en->kv[j].seqs[slot[j]].len == 0) rad_kvcache_release(&en->kv[j], slot[j]);
        return rad_err_set(e, RAD_E_LIMIT, "no free sequence slot (max_seqs %u)", en->ctx.max_seqs), -1;
    }
    return 0;
}

/* Blocks a reservation of group gi can count on for seq_id growing from its length: the free
 * ones and those its window slide releases first. */
static uint32_t kv_avail(const RadEngine *en, int gi, int32_t seq_id) {
    const RadKvCache *c = &en->kv[gi];
    int slot = rad_kvcache_find(c, seq_id);
    return c->n_free + (slot >= 0 ? rad_kvcache_freeable(c, seq_id, c->seqs[slot].len) : 0);
}

int rad_engine_reserve(RadEngine *en, int32_t seq_id, uint32_t len, RadErr *e) {
    int slot[RAD_ENGINE_KV_GROUPS_MAX];
    if (take_slots(en, seq_id, slot, e)) return RAD_E_LIMIT;
    /* all or nothing: every group is checked before any takes a block */
    for (int gi = 0; gi < en->g.n_kvs; gi++) {
        const RadKvCache *c = &en->kv[gi];
        uint32_t need = rad_kvcache_need(c, seq_id, len), avail = kv_avail(en, gi, seq_id);
        int rc = RAD_OK;
        if ((uint64_t)(len + c->block_size - 1) / c->block_size > c->max_blocks)
            rc = rad_err_set(e, RAD_E_LIMIT, "sequence of %u tokens exceeds the context served (%u)", len,
                             c->max_blocks * c->block_size);
        else if (need > avail)
            rc = rad_err_set(e, RAD_E_LIMIT, "KV cache full: %u more blocks needed in group '%s', %u free", need,
                             en->g.kvs[gi].name, avail);
        if (rc) {
            for (int j = 0; j < en->g.n_kvs; j++)
                if (en->kv[j].seqs[slot[j]].len == 0) rad_kvcache_release(&en->kv[j], slot[j]);
            return rc;
        }
    }
    for (int gi = 0; gi < en->g.n_kvs; gi++) {
        int rc = rad_kvcache_reserve(&en->kv[gi], slot[gi], len, e);
        if (rc) return rc; /* cannot happen: counted above */
    }
    return RAD_OK;
}

/* A step's tokens from pos on must find what their window reads still held: a sequence
 * rewound to before what a window group released cannot be served (drop it and recompute). */
static int check_rewind(const RadEngine *en, int32_t seq_id, uint32_t pos, RadErr *e) {
    for (int gi = 0; gi < en->g.n_kvs; gi++) {
        const RadKvCache *c = &en->kv[gi];
        int slot = rad_kvcache_find(c, seq_id);
        /* what the attention reads: its own window, not the max_spec keys more the group keeps */
        const uint32_t W = c->window ? c->window - en->ctx.max_spec : 0;
        const uint32_t need = W && pos + 1 > W ? (pos + 1 - W) / c->block_size : 0;
        if (slot >= 0 && c->seqs[slot].first > need)
            return rad_err_set(e, RAD_E_ARG, "sequence %d: a step at position %u, but KV group '%s' (window %u) has released "
                               "the blocks before position %u", seq_id, pos, en->g.kvs[gi].name, W,
                               c->seqs[slot].first * c->block_size);
    }
    return RAD_OK;
}

int rad_engine_step_seqs(RadEngine *en, const RadEngineSeq *seqs, uint32_t n_seq, int32_t *out_row, RadErr *e) {
    if (rad_engine_pooled_dim(en)) return refuse_pooled(en, e);
    if (!n_seq) return rad_err_set(e, RAD_E_SHAPE, "a step of zero sequences");
    if (n_seq > en->ctx.max_seqs)
        return rad_err_set(e, RAD_E_LIMIT, "a step of %u sequences exceeds max_seqs %u", n_seq, en->ctx.max_seqs);
    uint64_t n_tok = 0;
    uint32_t n_out = 0, n_dec = 0;
    uint32_t n_spec = 0;
    for (uint32_t i = 0; i < n_seq; i++) {
        if (!seqs[i].n || !seqs[i].tokens)
            return rad_err_set(e, RAD_E_SHAPE, "sequence %d: a step of zero tokens", seqs[i].seq_id);
        if (seqs[i].n_draft && (seqs[i].n_draft > en->ctx.max_spec || seqs[i].n != 1 + seqs[i].n_draft))
            return rad_err_set(e, RAD_E_ARG, "sequence %d: a verify row of %u tokens with %u drafts (the engine serves 1 + at "
                               "most %u)", seqs[i].seq_id, seqs[i].n, seqs[i].n_draft, en->ctx.max_spec);
        if (seqs[i].n_draft > n_spec) n_spec = seqs[i].n_draft;
        for (uint32_t j = 0; j < i; j++)
            if (seqs[j].seq_id == seqs[i].seq_id)
                return rad_err_set(e, RAD_E_ARG, "sequence %d appears twice in one step", seqs[i].seq_id);
        if ((uint64_t)seqs[i].pos + seqs[i].n > en->ctx.max_ctx)
            return rad_err_set(e, RAD_E_LIMIT, "sequence %d: %u tokens exceed the context served (%u)", seqs[i].seq_id,
                               seqs[i].pos + seqs[i].n, en->ctx.max_ctx);
        n_tok += seqs[i].n;
        n_out += seqs[i].n_draft ? seqs[i].n : seqs[i].want_logits != 0;
        n_dec += seqs[i].n == 1 + seqs[i].n_draft;
    }
    if (n_tok > en->ctx.max_tok)
        return rad_err_set(e, RAD_E_LIMIT, "a step of %" PRIu64 " tokens exceeds max_tok %u", n_tok, en->ctx.max_tok);
    for (uint32_t i = 0; i < n_seq; i++) {
        int rc = check_rewind(en, seqs[i].seq_id, seqs[i].pos, e);
        if (rc) return rc;
    }
    /* all or nothing: the blocks every sequence needs, in every group, are counted before any
     * is taken (what a window slide would release counted as free) */
    for (int gi = 0; gi < en->g.n_kvs; gi++) {
        uint64_t need = 0, avail = en->kv[gi].n_free;
        for (uint32_t i = 0; i < n_seq; i++) {
            need += rad_kvcache_need(&en->kv[gi], seqs[i].seq_id, seqs[i].pos + seqs[i].n);
            avail += kv_avail(en, gi, seqs[i].seq_id) - en->kv[gi].n_free;
        }
        if (need > avail)
            return rad_err_set(e, RAD_E_LIMIT, "KV cache full: the step needs %" PRIu64 " more blocks in group '%s', %" PRIu64
                               " free", need, en->g.kvs[gi].name, avail);
    }
    for (uint32_t i = 0; i < n_seq; i++) {
        int rc = rad_engine_reserve(en, seqs[i].seq_id, seqs[i].pos + seqs[i].n, e);
        if (rc) return rc;
    }
    /* the batch: decode rows first (stable), then the prefill chunks */
    uint32_t S = en->ctx.max_seqs, T = en->ctx.max_tok;
    int32_t *tok = en->step_i32, *posv = tok + T, *outs = posv + T, *cu = outs + T, *sid = cu + S + 1,
            *ql = sid + S, *cl = ql + S, *order = cl + S;
    uint32_t k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < n_seq; i++)
            if ((seqs[i].n == 1 + seqs[i].n_draft) == (pass == 0)) order[k++] = (int32_t)i;
    uint32_t t = 0, o = 0, max_q = 0, max_ctx = 0;
    cu[0] = 0;
    for (uint32_t b = 0; b < n_seq; b++) {
        const RadEngineSeq *q = &seqs[order[b]];
        for (uint32_t j = 0; j < q->n; j++) tok[t + j] = q->tokens[j], posv[t + j] = (int32_t)(q->pos + j);
        t += q->n;
        cu[b + 1] = (int32_t)t;
        sid[b] = q->seq_id;
        ql[b] = (int32_t)q->n;
        cl[b] = (int32_t)(q->pos + q->n);
        if (q->n > max_q) max_q = q->n;
        if (q->pos + q->n > max_ctx) max_ctx = q->pos + q->n;
        if (out_row) out_row[order[b]] = q->want_logits || q->n_draft ? (int32_t)o : -1;
        if (q->n_draft)
            for (uint32_t j = 0; j < q->n; j++) outs[o++] = (int32_t)(t - q->n + j);
        else if (q->want_logits)
            outs[o++] = (int32_t)(t - 1);
        for (int gi = 0; gi < en->g.n_kvs; gi++) {
            const RadKvCache *c = &en->kv[gi];
            int slot = rad_kvcache_find(c, q->seq_id); /* reserved above */
            memcpy(en->step_table[gi] + (size_t)b * c->max_blocks, c->seqs[slot].blocks, c->max_blocks * sizeof(int32_t));
        }
    }
    RadKvState gstate[RAD_ENGINE_KV_GROUPS_MAX];
    uint32_t n_kv = (uint32_t)en->g.n_kvs; /* build_kv refused more than RAD_ENGINE_KV_GROUPS_MAX */
    for (uint32_t gi = 0; gi < n_kv; gi++)
        gstate[gi] = (RadKvState){.group = {(int32_t)gi}, .block_table = en->step_table[gi],
                                  .max_blocks = en->kv[gi].max_blocks, .block_size = en->kv[gi].block_size,
                                  .n_blocks = en->kv[gi].n_blocks};
    RadBatch bt = {.struct_size = sizeof bt,
                   .phase = n_dec == n_seq ? RAD_PHASE_DECODE : n_dec ? RAD_PHASE_MIXED : RAD_PHASE_PREFILL,
                   .n_tok = t, .n_seq = n_seq, .n_seq_decode = n_dec, .token_ids = tok, .positions = posv,
                   .cu_seqlens = cu, .seq_ids = sid, .n_out = n_out, .out_ids = outs, .q_lens = ql, .ctx_lens = cl,
                   .max_q_len = max_q, .max_ctx_len = max_ctx, .kv = gstate, .n_kv = n_kv, .n_spec = n_spec};
    return rad_engine_step(en, &bt, e);
}

/* One sequence's tokens in steps of at most max_tok; logits of the last token (want == 1) or of
 * every token into all_out (want == 2). */
static int forward(RadEngine *en, int32_t seq_id, const int32_t *tokens, uint32_t n, uint32_t pos, int want,
                   float *all_out, RadErr *e) {
    if (rad_engine_pooled_dim(en)) return refuse_pooled(en, e);
    if (!n) return rad_err_set(e, RAD_E_SHAPE, "a forward of zero tokens");
    int rc = check_rewind(en, seq_id, pos, e);
    if (rc) return rc;
    int slot[RAD_ENGINE_KV_GROUPS_MAX];
    if (take_slots(en, seq_id, slot, e)) return RAD_E_LIMIT;
    RadKvState gstate[RAD_ENGINE_KV_GROUPS_MAX];
    uint32_t n_kv = (uint32_t)en->g.n_kvs; /* build_kv refused more than RAD_ENGINE_KV_GROUPS_MAX */
    for (uint32_t gi = 0; gi < n_kv; gi++)
        gstate[gi] = (RadKvState){.group = {(int32_t)gi}, .block_table = en->kv[gi].seqs[slot[gi]].blocks,
                                  .max_blocks = en->kv[gi].max_blocks, .block_size = en->kv[gi].block_size,
                                  .n_blocks = en->kv[gi].n_blocks};
    int32_t *positions = malloc(en->ctx.max_tok * sizeof *positions), *out = malloc(en->ctx.max_tok * sizeof *out);
    if (!positions || !out) rc = rad_err_set(e, RAD_E_NOMEM, "out of memory");
    for (uint32_t done = 0; done < n && !rc;) {
        uint32_t c = n - done < en->ctx.max_tok ? n - done : en->ctx.max_tok;
        /* chunk by chunk, so a window group releases what each chunk's window has left */
        if ((rc = rad_engine_reserve(en, seq_id, pos + done + c, e))) break;
        for (uint32_t i = 0; i < c; i++) positions[i] = (int32_t)(pos + done + i), out[i] = (int32_t)i;
        int last = done + c == n;
        uint32_t n_out = want == 2 ? c : (want == 1 && last) ? 1 : 0;
        int32_t cu[2] = {0, (int32_t)c}, sid[1] = {seq_id}, ql[1] = {(int32_t)c}, cl[1] = {(int32_t)(pos + done + c)};
        RadBatch b = {.struct_size = sizeof b, .phase = c == 1 ? RAD_PHASE_DECODE : RAD_PHASE_PREFILL, .n_tok = c, .n_seq = 1,
                      .n_seq_decode = c == 1 ? 1 : 0, .token_ids = tokens + done, .positions = positions,
                      .cu_seqlens = cu, .seq_ids = sid, .n_out = n_out, .out_ids = want == 2 ? out : out + c - 1,
                      .q_lens = ql, .ctx_lens = cl, .max_q_len = c, .max_ctx_len = pos + done + c, .kv = gstate, .n_kv = n_kv};
        rc = rad_engine_step(en, &b, e);
        if (!rc && want == 2) {
            uint32_t nv;
            const float *lg = rad_engine_logits(en, &nv);
            memcpy(all_out + (size_t)done * nv, lg, (size_t)c * nv * sizeof *lg);
        }
        done += c;
    }
    free(positions);
    free(out);
    return rc;
}

int rad_engine_forward(RadEngine *en, int32_t seq_id, const int32_t *tokens, uint32_t n, uint32_t pos, int want_logits,
                       RadErr *e) {
    return forward(en, seq_id, tokens, n, pos, want_logits ? 1 : 0, NULL, e);
}

int rad_engine_forward_all(RadEngine *en, int32_t seq_id, const int32_t *tokens, uint32_t n, uint32_t pos, float *out,
                           RadErr *e) {
    return forward(en, seq_id, tokens, n, pos, 2, out, e);
}

void rad_engine_kv_truncate(RadEngine *en, int32_t seq_id, uint32_t len) {
    for (int gi = 0; gi < en->g.n_kvs; gi++) {
        int slot = rad_kvcache_find(&en->kv[gi], seq_id);
        if (slot >= 0) rad_kvcache_truncate(&en->kv[gi], slot, len);
    }
}

void rad_engine_drop_seq(RadEngine *en, int32_t seq_id) {
    for (int gi = 0; gi < en->g.n_kvs; gi++) {
        int slot = rad_kvcache_find(&en->kv[gi], seq_id);
        if (slot >= 0) rad_kvcache_release(&en->kv[gi], slot);
    }
}

/* ---- the KV cache, for a scheduler: every group ---------------------------------------------- */

/* The block size every group shares (what the prefix cache hashes by), or 0 when they differ. */
static uint32_t common_block(const RadEngine *en) {
    for (int gi = 1; gi < en->g.n_kvs; gi++)
        if (en->kv[gi].block_size != en->kv[0].block_size) return 0;
    return en->g.n_kvs ? en->kv[0].block_size : 0;
}

void rad_engine_kv_stats(const RadEngine *en, RadEngineKvStats *st) {
    memset(st, 0, sizeof *st);
    st->n_groups = (uint32_t)en->g.n_kvs;
    st->block_size = en->g.n_kvs ? (common_block(en) ? common_block(en) : en->kv[0].block_size) : 0;
    for (int gi = 0; gi < en->g.n_kvs; gi++) {
        const RadKvCache *c = &en->kv[gi];
        const RadGKv *k = &en->g.kvs[gi];
        st->n_blocks += c->n_blocks, st->n_free += c->n_free, st->n_cached_free += c->n_cached_free;
        if (gi < RAD_ENGINE_KV_GROUPS_MAX)
            st->group[gi] = (RadEngineKvGroup){.name = k->name, .kind = k->d.kind, .window = c->window,
                                               .block_size = c->block_size, .n_blocks = c->n_blocks, .n_free = c->n_free,
                                               .n_cached_free = c->n_cached_free, .seq_blocks = seq_blocks(en, k, en->ctx.max_tok),
                                               .n_layers = c->n_layers};
    }
}

uint32_t rad_engine_kv_free_blocks(const RadEngine *en) {
    uint32_t n = 0;
    for (int gi = 0; gi < en->g.n_kvs; gi++) n += en->kv[gi].n_free;
    return n;
}

uint32_t rad_engine_kv_need(const RadEngine *en, int32_t seq_id, uint32_t len) {
    uint32_t n = 0;
    for (int gi = 0; gi < en->g.n_kvs; gi++) n += rad_kvcache_need(&en->kv[gi], seq_id, len);
    return n;
}

int rad_engine_kv_fits(const RadEngine *en, int32_t seq_id, uint32_t len) {
    for (int gi = 0; gi < en->g.n_kvs; gi++)
        if (rad_kvcache_need(&en->kv[gi], seq_id, len) > kv_avail(en, gi, seq_id)) return 0;
    return 1;
}

uint32_t rad_engine_kv_room(const RadEngine *en, int32_t seq_id) {
    uint64_t room = UINT32_MAX;
    for (int gi = 0; gi < en->g.n_kvs; gi++) {
        const RadKvCache *c = &en->kv[gi];
        int slot = rad_kvcache_find(c, seq_id);
        const uint32_t len = slot >= 0 ? c->seqs[slot].len : 0, B = c->block_size;
        const uint64_t r = (uint64_t)(len + B - 1) / B * B - len + (uint64_t)kv_avail(en, gi, seq_id) * B;
        if (r < room) room = r;
    }
    return (uint32_t)room;
}

int rad_engine_kv_fits_pool(const RadEngine *en, uint32_t len, uint32_t chunk, char *why, size_t n) {
    for (int gi = 0; gi < en->g.n_kvs; gi++) {
        const RadKvCache *c = &en->kv[gi];
        uint64_t need = ((uint64_t)len + c->block_size - 1) / c->block_size;
        const uint32_t most = seq_blocks(en, &en->g.kvs[gi], chunk ? chunk : en->ctx.max_tok);
        if (need > most) need = most;
        if (need > c->n_blocks) {
            if (why && n) snprintf(why, n, "the request needs %" PRIu64 " KV blocks of group '%s'; its whole pool has %u", need,
                                   en->g.kvs[gi].name, c->n_blocks);
            return 0;
        }
    }
    return 1;
}

int rad_engine_kv_adopt_prefix(RadEngine *en, int32_t seq_id, const int32_t *tokens, uint32_t n_blocks, int share,
                               uint64_t *hashes) {
    int slot[RAD_ENGINE_KV_GROUPS_MAX];
    RadErr e = {0};
    if (en->g.n_kvs < 1 || take_slots(en, seq_id, slot, &e)) return -1;
    const uint32_t B = common_block(en);
    if (!B) return 0; /* groups of different block sizes hash differently: no prefix is shared */
    rad_kvcache_hash_chain(tokens, 0, n_blocks, B, hashes);
    if (!share) return 0;
    /* the longest prefix every group still holds: a full group every block of it, a window
     * group what the next query (at hit·B) reads */
    uint32_t hit = n_blocks;
    for (int gi = 0; gi < en->g.n_kvs; gi++)
        if (!en->kv[gi].window) {
            uint32_t h = rad_kvcache_lookup(&en->kv[gi], hashes, n_blocks);
            if (h < hit) hit = h;
        }
    for (int gi = 0; gi < en->g.n_kvs; gi++) {
        const RadKvCache *c = &en->kv[gi];
        while (c->window && hit && !rad_kvcache_cached(c, hashes, rad_kvcache_first(c, hit * B), hit)) hit--;
    }
    for (int gi = 0; gi < en->g.n_kvs && hit; gi++) rad_kvcache_adopt(&en->kv[gi], slot[gi], hashes, hit);
    return (int)hit;
}

int rad_engine_kv_publish(RadEngine *en, int32_t seq_id, const int32_t *tokens, uint32_t from, uint32_t to,
                          uint64_t *hashes) {
    int slot = en->g.n_kvs < 1 ? -1 : rad_kvcache_find(&en->kv[0], seq_id);
    if (slot < 0) return RAD_E_NOTFOUND;
    const uint32_t B = common_block(en);
    if (!B) return RAD_OK; /* nothing is shared across block sizes */
    rad_kvcache_hash_chain(tokens, from, to, B, hashes); /* the new blocks only, chained on */
    for (int gi = 0; gi < en->g.n_kvs; gi++) {
        RadKvCache *c = &en->kv[gi];
        int sg = rad_kvcache_find(c, seq_id);
        for (uint32_t b = from; sg >= 0 && b < to; b++) rad_kvcache_publish(c, sg, b, hashes[b]);
    }
    return RAD_OK;
}

/* ---- debug views ---------------------------------------------------------------------------- */

void rad_engine_dump_profile(const RadEngine *en, FILE *f) {
    if (!en->prof_ns || !en->prof_steps) return;
    /* one line per (op name, kernel): the layers' copies of an op summed */
    typedef struct Row { const char *op; const RadKernel *k; int lib; uint64_t ns, calls; } Row;
    int cap = en->g.n_ops + 1;
    Row *rows = calloc((size_t)cap, sizeof *rows);
    if (!rows) return;
    int n = 0;
    uint64_t in_ops = 0;
    for (int o = 0; o < en->g.n_ops; o++) {
        const RadSelectTable *t = &en->g.ops[o].sel;
        for (int b = 0; b < t->n_buckets; b++) {
            const int at = en->prof_at[o] + b;
            if (!en->prof_calls[at]) continue;
            const RadKernel *k = t->pick[b];
            int r = 0;
            while (r < n && !(strcmp(rows[r].op, en->g.ops[o].op) == 0 && rows[r].k == k)) r++;
            if (r == n) {
                Row *nr = r + 1 > cap ? realloc(rows, (size_t)(cap *= 2) * sizeof *rows) : rows;
                if (!nr) break;
                rows = nr;
                rows[n++] = (Row){en->g.ops[o].op, k, t->pick_lib[b], 0, 0};
            }
            rows[r].ns += en->prof_ns[at], rows[r].calls += en->prof_calls[at];
            in_ops += en->prof_ns[at];
        }
    }
    for (int i = 1; i < n; i++) /* most time first */
        for (int j = i; j > 0 && rows[j].ns > rows[j - 1].ns; j--) {
            Row t = rows[j];
            rows[j] = rows[j - 1], rows[j - 1] = t;
        }
    const double steps = (double)en->prof_steps, total = (double)en->prof_step_ns;
    fprintf(f, "profile: %" PRIu64 " steps, %.3f ms a step (a line per op and kernel run)\n", en->prof_steps,
            total / steps * 1e-6);
    fprintf(f, "%-16s %-22s %9s %7s %10s %9s\n", "op", "kernel", "ms/step", "share", "calls/step", "us/call");
    for (int i = 0; i < n; i++) {
        int li = rows[i].k ? rows[i].lib : -1;
        char kn[64];
        snprintf(kn, sizeof kn, "%s:%s", li >= 0 ? en->libs[li]->info->name : "?", rows[i].k ? rows[i].k->variant : "?");
        fprintf(f, "%-16s %-22s %9.3f %6.1f%% %10.1f %9.2f\n", rows[i].op, kn, (double)rows[i].ns / steps * 1e-6,
                100.0 * (double)rows[i].ns / total, (double)rows[i].calls / steps, (double)rows[i].ns / (double)rows[i].calls * 1e-3);
    }
    fprintf(f, "%-16s %-22s %9.3f %6.1f%%\n", "(outside ops)", "plugin step, issue", (total - (double)in_ops) / steps * 1e-6,
            100.0 * (total - (double)in_ops) / total);
    free(rows);
}

/* Under a tuning table: whether buckets i and j came out of it the same way. */
static int same_tune(const RadSelectTable *c, int i, int j) {
    return !c->tune_line || (c->tune_line[i] == c->tune_line[j] && strcmp(c->tune_note[i], c->tune_note[j]) == 0);
}

/* " (table line 7: threads=2 prefetch=4096)", or why the table's entry was skipped. */
static void dump_tune(FILE *f, const RadSelectTable *c, int b) {
    if (!c->tune_line) return;
    if (c->tune_line[b]) {
        fprintf(f, " (from the table, line %d", c->tune_line[b]);
        for (uint32_t k = 0; k < c->n_knobs[b]; k++)
            fprintf(f, "%s%s=%" PRId64, k ? " " : ": ", rad_kernel_knob(c->pick[b], k)->name, c->knobs[(size_t)b * RAD_KNOB_MAX + k]);
        fputc(')', f);
    } else if (c->tune_note[b][0]) {
        fprintf(f, " (default rule: %s)", c->tune_note[b]);
    }
}

void rad_engine_dump_graph(const RadEngine *en, FILE *f) {
    fprintf(f, "model %s: plugin '%s' (%s, \"%s\"), %d ops, %d weights, %d buffers; libraries:", en->o.model,
            en->arch->info->name, en->arch->arch_id, en->arch->quant, en->g.n_ops, en->g.n_w, en->g.n_bufs);
    for (int i = 0; i < en->n_libs; i++) fprintf(f, " %s", en->libs[i]->info->name);
    fputc('\n', f);
    if (en->tune) fprintf(f, "tuning table %s: %d entries (rule 1: its choice where valid, the default rule elsewhere)\n",
                          en->o.tune, en->tune->n);
    /* the plugin's own account of the shape it declared (rad_note), before the ops it explains */
    for (int i = 0; i < en->g.n_notes; i++) fprintf(f, "note: %s\n", en->g.notes[i]);
    if (en->ctx.max_tok < en->o.max_tok) /* cut_steps */
        fprintf(f, "steps: at most %u tokens, not %u: an op's sequence chunk ends there (its buckets below)\n", en->ctx.max_tok,
                en->o.max_tok);
    for (int o = 0; o < en->g.n_ops; o++) {
        const RadGOp *op = &en->g.ops[o];
        const RadSelectTable *c = &op->sel;
        fprintf(f, "op %4d %-14s", o, op->op);
        for (uint32_t w = 0; w < op->n_w; w++)
            fprintf(f, " %s(%s)", en->g.w[op->w[w].id].name, rad_enc_info(en->g.w[op->w[w].id].enc) ? rad_enc_info(en->g.w[op->w[w].id].enc)->name : "absent");
        if (op->declined || !rad_select_served(c)) { /* only a declined op opens unresolved */
            fprintf(f, "  -> unresolved: %s%s\n", c->why,
                    op->declined ? " (declined: the plugin emits the chain)" : "");
            continue;
        }
        fprintf(f, "  ->");
        for (int i = 0; i < c->n; i++) {
            char hi[24] = "inf";
            if (c->k[i]->n_max) snprintf(hi, sizeof hi, "%" PRId64, c->k[i]->n_max);
            fprintf(f, "%s %s:%s[%" PRId64 "..%s]", i ? "," : "", en->libs[c->k_lib[i]]->info->name, c->k[i]->variant,
                    c->k[i]->n_min, hi);
        }
        fprintf(f, "  buckets:");
        for (int i = 0, j; i < c->n_buckets; i = j) { /* neighbours with the same kernel (and table line) print as one */
            for (j = i + 1; j < c->n_buckets && c->pick[j] == c->pick[i] && same_tune(c, i, j);) j++;
            fprintf(f, "%s rows %" PRId64 "..%" PRId64 " %s:%s", i ? "," : "", c->lo[i], j < c->n_buckets ? c->lo[j] - 1 : c->range_hi,
                    en->libs[c->pick_lib[i]]->info->name, c->pick[i]->variant);
            dump_tune(f, c, i);
        }
        fprintf(f, "  (%s%s)\n", c->why, en->o.deterministic ? "; batch-invariant first" : "");
    }
}

static void dump_rank_placement(const RadEngine *en, FILE *f) {
    uint64_t wbytes[RAD_ENC_COUNT] = {0}, total = 0;
    int n_sliced = 0;
    for (int i = 0; i < en->g.n_w; i++) {
        const RadTensor *t = weight_tensor(en, i);
        int seen = 0; /* a tied head counts once: the weights reading one tensor share its bytes */
        for (int j = 0; t && j < i && !seen; j++) seen = en->w[j].arg.data == en->w[i].arg.data;
        if (!t || seen) continue;
        const uint64_t nb = en->w[i].sliced_bytes ? en->w[i].sliced_bytes : t->planes[0].nbytes;
        n_sliced += en->w[i].sliced_bytes != 0;
        wbytes[en->g.w[i].enc] += nb;
        total += nb;
    }
    if (en->world > 1)
        fprintf(f, "rank %u of %u: %d weights sliced (their rows or columns of this rank), the rest whole\n", en->rank, en->world,
                n_sliced);
    if (en->dev)
        fprintf(f, "weights: %" PRIu64 " bytes from %s, sent in %zu bytes to the device memory of kernel library '%s'; arena, "
                "workspace and KV pools there too\n", total, en->o.model, en->dev_weights_bytes, en->libs[0]->info->name);
    else if (en->wstore)
        fprintf(f, "weights: %" PRIu64 " bytes from %s, copied into %zu bytes of anonymous memory (%s)\n", total, en->o.model,
                en->wstore_bytes, en->wstore_huge ? "transparent huge pages asked" : "huge pages refused: 4 KiB pages");
    else
        fprintf(f, "weights: %" PRIu64 " bytes, read in place from the mapping of %s (--mmap)\n", total, en->o.model);
    for (int k = 0; k < RAD_ENC_COUNT; k++)
        if (wbytes[k]) fprintf(f, "  %-6s %" PRIu64 " bytes\n", rad_enc_info((RadEnc)k)->name, wbytes[k]);
    int n_cvec = 0;
    for (int i = 0; i < en->g.n_w; i++) n_cvec += weight_cvec(en, i) != NULL;
    if (n_cvec)
        fprintf(f, "  control vector: %d layers' f32 [%u] rows, read in place from %s as loaded\n", n_cvec, en->ctx.cvec->n_embd,
                en->o.control_vector);
    if (en->n_packed)
        fprintf(f, "  packed at load: %d tensors, %" PRIu64 " bytes, in their kernel library's layout (--no-repack: none)\n",
                en->n_packed, en->packed_bytes);
    fprintf(f, "arena: %" PRIu64 " bytes for %d transient buffers (%" PRIu64 " without sharing); persistent %" PRIu64 "\n",
            en->g.arena_bytes, en->g.n_bufs, en->g.naive_bytes, en->g.persist_bytes);
    for (int i = 0; i < en->g.n_bufs; i++) {
        const RadGBuf *b = &en->g.bufs[i];
        fprintf(f, "  %-14s offset %10" PRIu64 "  bytes %10" PRIu64 "  live ops [%d, %d]%s\n", b->name, b->offset, b->bytes,
                b->first, b->last, b->undeclared_use ? " (no declared use: whole program)" : "");
    }
    for (int gi = 0; gi < en->g.n_kvs; gi++) {
        const RadKvCache *c = &en->kv[gi];
        const RadGKv *k = &en->g.kvs[gi];
        char kind[48];
        if (c->window) snprintf(kind, sizeof kind, "window %u", c->window);
        else snprintf(kind, sizeof kind, "full");
        fprintf(f, "kv group '%s' (%s): %u blocks of %u tokens, at most %u per sequence, %" PRIu64 " bytes per block per layer, "
                   "%u layers: %" PRIu64 " bytes%s\n",
                k->name, kind, c->n_blocks, c->block_size, seq_blocks(en, k, en->ctx.max_tok), c->block_bytes, c->n_layers,
                (uint64_t)c->n_blocks * c->block_bytes * c->n_layers,
                k->replicated ? " (replicated: another rank holds the same KV heads)" : "");
        if (en->world > 1) fprintf(f, "  %u KV heads of head_dim %u on this rank\n", k->d.n_head_kv, k->d.head_dim);
    }
    fprintf(f, "workspace: %zu bytes\n", en->workspace_bytes);
}

void rad_engine_dump_placement(const RadEngine *en, FILE *f) {
    if (en->tp)
        fprintf(f, "tensor parallelism: %u ranks, threads of this process, %u kernel threads each; rank 0's block tables "
                   "serve every rank's KV pools\n", en->world, en->o.n_threads);
    dump_rank_placement(en, f);
    for (uint32_t r = 1; en->tp && r < en->tp->n; r++) dump_rank_placement(en->tp->rank[r], f);
}
