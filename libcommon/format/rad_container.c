/* The .rad container: see docs/FORMAT.md for the layout this file reads and writes. */
#include "libcommon/format/rad_container.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

static const char *const SECTION_TAGS[3] = {"META", "TOKN", "CHAT"};
#define TAG_TENS "TENS"

/* ---- shared helpers -------------------------------------------------------------------- */

static int enc_by_name(const char *s, RadEnc *out) {
    for (int i = 0; i < RAD_ENC_COUNT; i++)
        if (strcmp(rad_enc_info((RadEnc)i)->name, s) == 0) {
            *out = (RadEnc)i;
            return 1;
        }
    return 0;
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }

static void put_le(uint8_t *p, uint64_t x, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(x >> (8 * i));
}
static uint64_t get_le(const uint8_t *p, int n) {
    uint64_t x = 0;
    for (int i = n - 1; i >= 0; i--) x = x << 8 | p[i];
    return x;
}

/* A tensor or plane name: UTF-8 (checked by the caller) without control bytes, so every message
 * that quotes it stays one readable line. Returns the first offending byte's offset, or -1. */
static long name_control_at(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f) return (long)(p - (const unsigned char *)s);
    return -1;
}

/* ---- writer ---------------------------------------------------------------------------- */

typedef struct WPlane {
    char name[16];
    const uint8_t *data;  /* logical bytes (borrowed) */
    uint64_t nbytes;
    uint8_t *zbuf;        /* compressed copy, or NULL when stored raw */
    uint64_t stored;
    uint64_t offset;
    uint64_t checksum;
} WPlane;

typedef struct WTensor {
    char *name;
    RadEnc enc;
    uint32_t rank;
    uint64_t shape[RAD_MAX_RANK];
    uint32_t n_planes;
    WPlane planes[RAD_MAX_PLANES];
} WTensor;

struct RadWriter {
    char path[4096];   /* final path, or "-" */
    char tmp[4200];    /* temporary beside it; empty when writing stdout */
    FILE *f;
    RadWriteOpts o;
    RadDict kv[3];
    WTensor *t;
    uint64_t n_t;
    RadDict names;       /* t[].name as keys (hashed): duplicates refused in linear time */
    int done;
};

int rad_writer_init(RadWriter **wp, const char *path, const RadWriteOpts *o, int overwrite, RadErr *e) {
    *wp = NULL;
    RadWriter *w = calloc(1, sizeof *w);
    if (!w) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", path);
    if (o) w->o = *o;
    if (!w->o.alignment) w->o.alignment = RAD_DEFAULT_ALIGN;
    if (!w->o.compress_min) w->o.compress_min = 4096;
    uint32_t a = w->o.alignment;
    if (a < 8 || a > (1u << 20) || (a & (a - 1))) {
        free(w);
        return rad_err_set(e, RAD_E_ARG, "alignment %u: must be a power of two in [8, 1048576]", a);
    }
    if (w->o.zstd_level < 0 || w->o.zstd_level > ZSTD_maxCLevel()) {
        free(w);
        return rad_err_set(e, RAD_E_ARG, "zstd level %d: must be 0..%d", o->zstd_level, ZSTD_maxCLevel());
    }
    if (strlen(path) >= sizeof w->path) {
        free(w);
        return rad_err_set(e, RAD_E_ARG, "output path too long");
    }
    snprintf(w->path, sizeof w->path, "%s", strcmp(path, "-") ? path : "stdout"); /* messages say stdout */
    if (strcmp(path, "-") == 0) {
        w->f = stdout;
    } else {
        struct stat st;
        if (!overwrite && stat(path, &st) == 0) {
            free(w);
            return rad_err_set(e, RAD_E_IO, "%s: exists (use --force to replace it)", path);
        }
        snprintf(w->tmp, sizeof w->tmp, "%s.tmp.XXXXXX", path);
        int fd = mkstemp(w->tmp);
        if (fd < 0) {
            int err = errno;
            free(w);
            return rad_err_set(e, RAD_E_IO, "%s: cannot create a temporary beside it: %s", path, strerror(err));
        }
        fchmod(fd, 0644);
        w->f = fdopen(fd, "wb");
        if (!w->f) {
            close(fd);
            unlink(w->tmp);
            free(w);
            return rad_err_set(e, RAD_E_IO, "%s: fdopen failed", path);
        }
    }
    for (int i = 0; i < 3; i++) rad_dict_init(&w->kv[i]);
    rad_dict_init(&w->names);
    *wp = w;
    return RAD_OK;
}

int rad_writer_set_kv(RadWriter *w, int which, const RadDict *kv, RadErr *e) {
    if (which < 0 || which > 2) return rad_err_set(e, RAD_E_ARG, "metadata table %d: no such table", which);
    for (uint64_t i = 0; i < kv->n; i++) {
        int rc = rad_dict_set(&w->kv[which], kv->keys[i].p, &kv->vals[i], e);
        if (rc) return rc;
    }
    return RAD_OK;
}

int rad_writer_add_tensor(RadWriter *w, const char *name, RadEnc enc, uint32_t rank,
                          const uint64_t *shape, uint32_t n_planes, const RadPlaneSrc *planes,
                          RadErr *e) {
    uint64_t nbytes;
    int rc = rad_tensor_bytes(enc, rank, shape, NULL, &nbytes, name, e);
    if (rc) return rc;
    if (n_planes < 1 || n_planes > RAD_MAX_PLANES)
        return rad_err_set(e, RAD_E_ARG, "tensor '%s': %u planes (1..%d)", name, n_planes, RAD_MAX_PLANES);
    if (!rad_utf8_valid(name, strlen(name)) || !*name)
        return rad_err_set(e, RAD_E_ARG, "tensor name is empty or not valid UTF-8");
    if (name_control_at(name) >= 0 || strlen(name) > 4096)
        return rad_err_set(e, RAD_E_ARG, "tensor name: a control byte at byte %ld, or longer than 4096 bytes", name_control_at(name));
    if (n_planes == 1 && planes[0].nbytes != nbytes)
        return rad_err_set(e, RAD_E_SHAPE, "tensor '%s': %" PRIu64 " bytes given, %s of this shape needs %" PRIu64,
                           name, planes[0].nbytes, rad_enc_info(enc)->name, nbytes);
    for (uint32_t i = 0; i < n_planes; i++)
        if (!planes[i].name || !*planes[i].name || strlen(planes[i].name) >= sizeof w->t[0].planes[0].name ||
            name_control_at(planes[i].name) >= 0 || !rad_utf8_valid(planes[i].name, strlen(planes[i].name)))
            return rad_err_set(e, RAD_E_ARG, "tensor '%s': plane %u has no name, one too long (15 bytes at most) or not text", name, i);
    if (n_planes > 1 && enc == RAD_ENC_F8_E4M3) {
        const char *pn[RAD_MAX_PLANES];
        uint64_t pb[RAD_MAX_PLANES];
        for (uint32_t i = 0; i < n_planes; i++) pn[i] = planes[i].name, pb[i] = planes[i].nbytes;
        if ((rc = rad_tensor_planes_check(name, enc, rank, shape, n_planes, pn, pb, e))) return rc;
    }
    if (rad_dict_get(&w->names, name)) return rad_err_set(e, RAD_E_ARG, "tensor '%s' added twice", name);
    if ((w->n_t & (w->n_t - 1)) == 0) {
        WTensor *nt = realloc(w->t, (w->n_t ? w->n_t * 2 : 16) * sizeof *nt);
        if (!nt) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
        w->t = nt;
    }
    WTensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    t->enc = enc;
    t->rank = rank;
    memcpy(t->shape, shape, rank * sizeof *shape);
    t->n_planes = n_planes;
    for (uint32_t i = 0; i < n_planes; i++) {
        snprintf(t->planes[i].name, sizeof t->planes[i].name, "%s", planes[i].name);
        t->planes[i].data = planes[i].data;
        t->planes[i].nbytes = planes[i].nbytes;
    }
    if ((rc = rad_dict_set_bool(&w->names, name, 1, e))) {
        free(t->name);
        return rc;
    }
    w->n_t++;
    return RAD_OK;
}

static int put_u32(RadBuf *b, uint32_t x, RadErr *e) { uint8_t c[4]; put_le(c, x, 4); return rad_buf_put(b, c, 4, e); }
static int put_u64(RadBuf *b, uint64_t x, RadErr *e) { uint8_t c[8]; put_le(c, x, 8); return rad_buf_put(b, c, 8, e); }
static int put_str(RadBuf *b, const char *s, RadErr *e) {
    uint64_t n = strlen(s);
    int rc = put_u64(b, n, e);
    return rc ? rc : rad_buf_put(b, s, n, e);
}

/* A section: tag, reserved, length, payload. */
static int put_section(RadBuf *h, const char *tag, const RadBuf *payload, RadErr *e) {
    int rc = rad_buf_put(h, tag, 4, e);
    if (!rc) rc = put_u32(h, 0, e);
    if (!rc) rc = put_u64(h, payload->len, e);
    if (!rc) rc = rad_buf_put(h, payload->p, payload->len, e);
    return rc;
}

static int build_header(RadWriter *w, RadBuf *h, RadErr *e) {
    int rc = RAD_OK;
    for (int i = 0; i < 3 && !rc; i++) {
        if (i > 0 && w->kv[i].n == 0) continue; /* META always; tokenizer/chat only when present */
        RadBuf p = {0};
        rc = put_u64(&p, w->kv[i].n, e);
        if (!rc) rc = rad_dict_write(&w->kv[i], &p, e);
        if (!rc) rc = put_section(h, SECTION_TAGS[i], &p, e);
        rad_buf_free(&p);
    }
    RadBuf p = {0};
    if (!rc) rc = put_u64(&p, w->n_t, e);
    for (uint64_t i = 0; i < w->n_t && !rc; i++) {
        const WTensor *t = &w->t[i];
        rc = put_str(&p, t->name, e);
        if (!rc) rc = put_str(&p, rad_enc_info(t->enc)->name, e);
        if (!rc) rc = put_u32(&p, t->rank, e);
        for (uint32_t d = 0; d < t->rank && !rc; d++) rc = put_u64(&p, t->shape[d], e);
        if (!rc) rc = put_u32(&p, t->n_planes, e);
        for (uint32_t j = 0; j < t->n_planes && !rc; j++) {
            const WPlane *pl = &t->planes[j];
            rc = put_str(&p, pl->name, e);
            if (!rc) rc = put_u64(&p, pl->offset, e);
            if (!rc) rc = put_u64(&p, pl->nbytes, e);
            if (!rc) rc = put_u64(&p, pl->stored, e);
            if (!rc) rc = put_u32(&p, pl->zbuf ? RAD_COMP_ZSTD : RAD_COMP_NONE, e);
            if (!rc) rc = put_u32(&p, 0, e);
            if (!rc) rc = put_u64(&p, pl->checksum, e);
        }
    }
    if (!rc) rc = put_section(h, TAG_TENS, &p, e);
    rad_buf_free(&p);
    return rc;
}

static int write_all(RadWriter *w, const void *p, uint64_t n, RadErr *e) {
    if (n && fwrite(p, 1, n, w->f) != n)
        return rad_err_set(e, RAD_E_IO, "%s: write failed: %s", w->path, strerror(errno));
    return RAD_OK;
}

static int write_zeros(RadWriter *w, uint64_t n, RadErr *e) {
    static const uint8_t z[4096];
    while (n) {
        uint64_t k = n < sizeof z ? n : sizeof z;
        int rc = write_all(w, z, k, e);
        if (rc) return rc;
        n -= k;
    }
    return RAD_OK;
}

int rad_writer_finish(RadWriter *w, RadErr *e) {
    int rc = RAD_OK;
    /* pass 1: checksum, compress, lay out offsets */
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_t; i++) {
        WTensor *t = &w->t[i];
        for (uint32_t j = 0; j < t->n_planes; j++) {
            WPlane *pl = &t->planes[j];
            pl->checksum = XXH3_64bits(pl->data, pl->nbytes);
            pl->stored = pl->nbytes;
            if (w->o.zstd_level > 0 && pl->nbytes >= w->o.compress_min) {
                size_t bound = ZSTD_compressBound(pl->nbytes);
                uint8_t *z = malloc(bound);
                if (!z) return rad_err_set(e, RAD_E_NOMEM, "tensor '%s': out of memory compressing", t->name);
                size_t zn = ZSTD_compress(z, bound, pl->data, pl->nbytes, w->o.zstd_level);
                if (ZSTD_isError(zn) || zn >= pl->nbytes) {
                    free(z); /* incompressible (or failed): store raw */
                } else {
                    pl->zbuf = z;
                    pl->stored = zn;
                }
            }
            off = align_up(off, w->o.alignment);
            pl->offset = off;
            off += pl->stored;
        }
    }
    uint64_t data_bytes = off;
    RadBuf h = {0};
    rc = build_header(w, &h, e);
    if (rc) goto out;
    uint64_t data_offset = align_up(RAD_PREFIX_BYTES + h.len, w->o.alignment);
    uint8_t pre[RAD_PREFIX_BYTES] = {0};
    memcpy(pre, RAD_MAGIC, 8);
    put_le(pre + 8, RAD_VERSION_MAJOR, 4);
    put_le(pre + 12, RAD_VERSION_MINOR, 4);
    put_le(pre + 16, h.len, 8);
    put_le(pre + 24, data_offset, 8);
    put_le(pre + 32, data_bytes, 8);
    put_le(pre + 40, w->o.alignment, 4);
    put_le(pre + 44, 0, 4);
    put_le(pre + 48, XXH3_64bits(h.p, h.len), 8);
    /* pass 2: write */
    rc = write_all(w, pre, sizeof pre, e);
    if (!rc) rc = write_all(w, h.p, h.len, e);
    if (!rc) rc = write_zeros(w, data_offset - RAD_PREFIX_BYTES - h.len, e);
    uint64_t pos = 0;
    for (uint64_t i = 0; i < w->n_t && !rc; i++) {
        for (uint32_t j = 0; j < w->t[i].n_planes && !rc; j++) {
            WPlane *pl = &w->t[i].planes[j];
            rc = write_zeros(w, pl->offset - pos, e);
            if (!rc) rc = write_all(w, pl->zbuf ? pl->zbuf : pl->data, pl->stored, e);
            pos = pl->offset + pl->stored;
        }
    }
    if (!rc && fflush(w->f) != 0) rc = rad_err_set(e, RAD_E_IO, "%s: write failed: %s", w->path, strerror(errno));
    if (!rc && w->tmp[0]) {
        if (fsync(fileno(w->f)) != 0)
            rc = rad_err_set(e, RAD_E_IO, "%s: fsync failed: %s", w->path, strerror(errno));
        FILE *f = w->f;
        w->f = NULL;
        if (fclose(f) != 0 && !rc) rc = rad_err_set(e, RAD_E_IO, "%s: close failed: %s", w->path, strerror(errno));
        if (!rc && rename(w->tmp, w->path) != 0)
            rc = rad_err_set(e, RAD_E_IO, "%s: rename failed: %s", w->path, strerror(errno));
    }
    if (!rc) w->done = 1;
out:
    rad_buf_free(&h);
    return rc;
}

const char *rad_writer_tmp_path(const RadWriter *w) { return w ? w->tmp : ""; }

void rad_writer_free(RadWriter *w) {
    if (!w) return;
    if (w->f && w->f != stdout) fclose(w->f);
    if (w->tmp[0] && !w->done) unlink(w->tmp);
    for (int i = 0; i < 3; i++) rad_dict_free(&w->kv[i]);
    for (uint64_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        for (uint32_t j = 0; j < w->t[i].n_planes; j++) free(w->t[i].planes[j].zbuf);
    }
    free(w->t);
    rad_dict_free(&w->names);
    free(w);
}

int rad_model_write(const RadModelFile *m, const char *path, const RadWriteOpts *o, int overwrite, RadErr *e) {
    RadWriter *w;
    int rc = rad_writer_init(&w, path, o, overwrite, e);
    if (rc) return rc;
    uint8_t **bufs = calloc(m->n_tensors * RAD_MAX_PLANES + 1, sizeof *bufs);
    if (!bufs) rc = rad_err_set(e, RAD_E_NOMEM, "out of memory");
    if (!rc) rc = rad_writer_set_kv(w, 0, &m->meta, e);
    if (!rc) rc = rad_writer_set_kv(w, 1, &m->tok, e);
    if (!rc) rc = rad_writer_set_kv(w, 2, &m->chat, e);
    for (uint64_t i = 0; i < m->n_tensors && !rc; i++) {
        const RadTensor *t = &m->tensors[i];
        RadPlaneSrc ps[RAD_MAX_PLANES];
        for (uint32_t j = 0; j < t->n_planes && !rc; j++) {
            const RadPlane *p = &t->planes[j];
            ps[j] = (RadPlaneSrc){p->name, p->data, p->nbytes};
            if (!p->data)
                rc = rad_err_set(e, RAD_E_UNSUPPORTED, "tensor '%s': source data is not mapped", t->name);
            else if (p->compression != RAD_COMP_NONE) {
                uint8_t *b = malloc(p->nbytes ? p->nbytes : 1);
                bufs[i * RAD_MAX_PLANES + j] = b;
                if (!b) rc = rad_err_set(e, RAD_E_NOMEM, "tensor '%s': out of memory", t->name);
                else rc = rad_plane_read(m, t, j, b, e);
                ps[j].data = b;
            }
        }
        if (!rc) rc = rad_writer_add_tensor(w, t->name, t->enc, t->rank, t->shape, t->n_planes, ps, e);
    }
    if (!rc) rc = rad_writer_finish(w, e);
    rad_writer_free(w);
    if (bufs)
        for (uint64_t i = 0; i < m->n_tensors * RAD_MAX_PLANES; i++) free(bufs[i]);
    free(bufs);
    return rc;
}

/* ---- reader ---------------------------------------------------------------------------- */

/* A cursor over the header bytes, which are always in memory once read. */
static int hdr_str(RadIn *h, char **out, uint64_t max, const char *what, RadErr *e) {
    uint64_t n;
    int rc = rad_in_u64(h, &n, what, e);
    if (rc) return rc;
    if (n > max || n > rad_in_remaining(h))
        return rad_err_set(e, RAD_E_FORMAT, "%s: %s: length %" PRIu64 " is too long", h->name, what, n);
    rc = rad_in_read_alloc(h, n, out, what, e);
    if (rc) return rc;
    if (strlen(*out) != n || !rad_utf8_valid(*out, n)) {
        int nul = strlen(*out) != n;
        free(*out);
        *out = NULL;
        return rad_err_set(e, RAD_E_FORMAT, "%s: %s %s", h->name, what, nul ? "holds a NUL byte" : "is not valid UTF-8 text");
    }
    return RAD_OK;
}

/* A name read from the table: not empty, no control bytes (hdr_str has checked UTF-8 and NUL). */
static int check_name(RadIn *h, const char *name, uint64_t i, const char *tname, const char *what, RadErr *e) {
    if (!*name)
        return tname ? rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s': %s is empty", h->name, tname, what)
                     : rad_err_set(e, RAD_E_FORMAT, "%s: tensor table entry %" PRIu64 ": %s is empty", h->name, i, what);
    long at = name_control_at(name);
    if (at >= 0)
        return tname ? rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s': %s holds control byte 0x%02x at byte %ld", h->name, tname,
                                   what, (unsigned char)name[at], at)
                     : rad_err_set(e, RAD_E_FORMAT, "%s: tensor table entry %" PRIu64 ": %s holds control byte 0x%02x at byte %ld",
                                   h->name, i, what, (unsigned char)name[at], at);
    return RAD_OK;
}

/* The smallest table entry: a one-byte name and encoding, rank 0, one plane with a one-byte name. */
#define MIN_TENSOR_ENTRY (8 + 1 + 8 + 1 + 4 + 4 + 8 + 1 + 8 + 8 + 8 + 4 + 4 + 8)

static int read_tensors(RadIn *h, RadModelFile *m, uint64_t data_bytes, uint32_t align, RadErr *e) {
    uint64_t n;
    int rc = rad_in_u64(h, &n, "tensor count", e);
    if (rc) return rc;
    if (n > rad_in_remaining(h) / MIN_TENSOR_ENTRY)
        return rad_err_set(e, RAD_E_FORMAT, "%s: tensor count %" PRIu64 " exceeds what the tensor table's %" PRIu64 " bytes can hold",
                           h->name, n, rad_in_remaining(h));
    for (uint64_t i = 0; i < n && !rc; i++) {
        RadTensor t = {0};
        char *enc = NULL;
        rc = hdr_str(h, &t.name, 4096, "tensor name", e);
        if (rc) break;
        rc = check_name(h, t.name, i, NULL, "tensor name", e);
        if (!rc) rc = hdr_str(h, &enc, 64, "tensor encoding", e);
        if (!rc && !enc_by_name(enc, &t.enc))
            rc = rad_err_set(e, RAD_E_UNSUPPORTED, "%s: tensor '%s': unknown encoding '%s'", h->name, t.name, enc);
        free(enc);
        if (!rc) rc = rad_in_u32(h, &t.rank, "tensor rank", e);
        if (!rc && t.rank > RAD_MAX_RANK)
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s': rank %u exceeds %d", h->name, t.name, t.rank, RAD_MAX_RANK);
        for (uint32_t d = 0; d < t.rank && !rc; d++) rc = rad_in_u64(h, &t.shape[d], "tensor shape", e);
        uint64_t want = 0;
        if (!rc) {
            rc = rad_tensor_bytes(t.enc, t.rank, t.shape, NULL, &want, t.name, e);
            if (rc) { /* prefix the file name: the shared helper only knows the tensor */
                RadErr inner = *e;
                rad_err_clear(e);
                rc = rad_err_set(e, inner.code, "%s: %s", h->name, inner.msg);
            }
        }
        if (!rc) rc = rad_in_u32(h, &t.n_planes, "plane count", e);
        if (!rc && (t.n_planes < 1 || t.n_planes > RAD_MAX_PLANES))
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s': %u planes (1..%d)", h->name, t.name, t.n_planes, RAD_MAX_PLANES);
        for (uint32_t j = 0; j < t.n_planes && !rc; j++) {
            RadPlane *p = &t.planes[j];
            char *pn = NULL;
            uint32_t reserved;
            rc = hdr_str(h, &pn, sizeof p->name - 1, "plane name", e);
            if (rc) break;
            rc = check_name(h, pn, i, t.name, "a plane name", e);
            snprintf(p->name, sizeof p->name, "%s", pn);
            free(pn);
            for (uint32_t k = 0; k < j && !rc; k++)
                if (strcmp(t.planes[k].name, p->name) == 0)
                    rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s': plane '%s' appears twice", h->name, t.name, p->name);
            if (!rc) rc = rad_in_u64(h, &p->offset, "plane offset", e);
            if (!rc) rc = rad_in_u64(h, &p->nbytes, "plane bytes", e);
            if (!rc) rc = rad_in_u64(h, &p->stored_bytes, "plane stored bytes", e);
            if (!rc) rc = rad_in_u32(h, &p->compression, "plane compression", e);
            if (!rc) rc = rad_in_u32(h, &reserved, "plane reserved", e);
            if (!rc) rc = rad_in_u64(h, &p->checksum, "plane checksum", e);
            if (rc) break;
            if (p->compression > RAD_COMP_ZSTD)
                rc = rad_err_set(e, RAD_E_UNSUPPORTED, "%s: tensor '%s' plane '%s': unknown compression %u", h->name, t.name, p->name, p->compression);
            else if (reserved != 0)
                rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' plane '%s': reserved field is %u, not 0", h->name, t.name, p->name, reserved);
            else if (p->compression == RAD_COMP_NONE && p->stored_bytes != p->nbytes)
                rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' plane '%s': stored %" PRIu64 " bytes but holds %" PRIu64 " uncompressed",
                                 h->name, t.name, p->name, p->stored_bytes, p->nbytes);
            else if (p->compression == RAD_COMP_ZSTD && p->nbytes > 0 && p->stored_bytes > ZSTD_compressBound(p->nbytes))
                rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' plane '%s': compressed size larger than zstd's bound", h->name, t.name, p->name);
            else if (p->offset % align)
                rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' plane '%s': offset %" PRIu64 " not aligned to %u", h->name, t.name, p->name, p->offset, align);
            else if (p->offset > data_bytes || p->stored_bytes > data_bytes - p->offset)
                rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' plane '%s': data [%" PRIu64 ", +%" PRIu64 ") past the data area (%" PRIu64 " bytes)",
                                 h->name, t.name, p->name, p->offset, p->stored_bytes, data_bytes);
        }
        if (!rc && t.n_planes == 1 && t.planes[0].nbytes != want)
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s': %" PRIu64 " bytes, but %s of this shape is %" PRIu64,
                             h->name, t.name, t.planes[0].nbytes, rad_enc_info(t.enc)->name, want);
        if (!rc && t.n_planes > 1 && t.enc == RAD_ENC_F8_E4M3) { /* the one multi-plane form a kernel reads */
            const char *pn[RAD_MAX_PLANES];
            uint64_t pb[RAD_MAX_PLANES];
            for (uint32_t j = 0; j < t.n_planes; j++) pn[j] = t.planes[j].name, pb[j] = t.planes[j].nbytes;
            RadErr why = {0};
            if (rad_tensor_planes_check(t.name, t.enc, t.rank, t.shape, t.n_planes, pn, pb, &why))
                rc = rad_err_set(e, RAD_E_FORMAT, "%s: %s", h->name, why.msg);
        }
        if (!rc && rad_model_find(m, t.name)) /* the model's name index: linear in the tensors */
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' appears twice", h->name, t.name);
        if (!rc) rc = rad_model_add_tensor(m, &t, e);
        free(t.name);
    }
    if (!rc && rad_in_remaining(h) != 0)
        rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor table: %" PRIu64 " bytes left over after %" PRIu64 " tensors", h->name,
                         rad_in_remaining(h), n);
    return rc;
}

/* Every plane with its tensor, sorted by offset: for the overlap check and for reading a stream
 * in order. */
typedef struct PlaneRef {
    RadPlane *p;
    const RadTensor *t;
} PlaneRef;

static int cmp_plane(const void *a, const void *b) {
    const RadPlane *x = ((const PlaneRef *)a)->p, *y = ((const PlaneRef *)b)->p;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int plane_list(RadModelFile *m, PlaneRef **out, uint64_t *n, RadErr *e) {
    uint64_t k = 0;
    for (uint64_t i = 0; i < m->n_tensors; i++) k += m->tensors[i].n_planes;
    PlaneRef *v = malloc((k ? k : 1) * sizeof *v);
    if (!v) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", m->path);
    k = 0;
    for (uint64_t i = 0; i < m->n_tensors; i++)
        for (uint32_t j = 0; j < m->tensors[i].n_planes; j++) v[k++] = (PlaneRef){&m->tensors[i].planes[j], &m->tensors[i]};
    qsort(v, k, sizeof *v, cmp_plane);
    *out = v;
    *n = k;
    return RAD_OK;
}

int rad_container_load(RadIn *in_, RadModelFile *m, RadErr *e) {
    memset(m, 0, sizeof *m);
    m->ins = calloc(1, sizeof *m->ins);
    if (!m->ins) {
        rad_in_close(in_);
        return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    }
    m->ins[0] = *in_;
    m->n_ins = 1;
    memset(in_, 0, sizeof *in_);
    RadIn *in = &m->ins[0];
    snprintf(m->path, sizeof m->path, "%s", in->name);
    snprintf(m->format, sizeof m->format, "rad");

    uint8_t pre[RAD_PREFIX_BYTES];
    int rc = rad_in_read(in, pre, sizeof pre, "prefix", e);
    if (rc) return rc;
    if (memcmp(pre, RAD_MAGIC, 8) != 0)
        return rad_err_set(e, RAD_E_FORMAT, "%s: not a .rad container (bad magic)", in->name);
    uint32_t major = (uint32_t)get_le(pre + 8, 4), minor = (uint32_t)get_le(pre + 12, 4);
    if (major != RAD_VERSION_MAJOR)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: .rad version %u.%u is not supported (this reader knows %u.x)",
                           in->name, major, minor, RAD_VERSION_MAJOR);
    m->version = major;
    uint64_t hbytes = get_le(pre + 16, 8), data_offset = get_le(pre + 24, 8), data_bytes = get_le(pre + 32, 8);
    uint32_t align = (uint32_t)get_le(pre + 40, 4), pflags = (uint32_t)get_le(pre + 44, 4);
    uint64_t hsum = get_le(pre + 48, 8), preserved = get_le(pre + 56, 8);
    if (align < 8 || align > (1u << 20) || (align & (align - 1)))
        return rad_err_set(e, RAD_E_FORMAT, "%s: alignment %u is not a power of two in [8, 1048576]", in->name, align);
    if (pflags != 0 || preserved != 0) /* 1.0 defines neither: a file that sets them was not written for this reader */
        return rad_err_set(e, RAD_E_FORMAT, "%s: prefix %s is %" PRIu64 ", not 0", in->name, pflags ? "flags" : "reserved",
                           pflags ? (uint64_t)pflags : preserved);
    if (hbytes > RAD_HEADER_MAX || hbytes > rad_in_remaining(in))
        return rad_err_set(e, RAD_E_FORMAT, "%s: header length %" PRIu64 " exceeds the file", in->name, hbytes);
    if (data_offset < RAD_PREFIX_BYTES + hbytes || data_offset % align)
        return rad_err_set(e, RAD_E_FORMAT, "%s: data offset %" PRIu64 " overlaps the header or is not aligned", in->name, data_offset);
    if (rad_in_is_mapped(in) && (data_offset > in->size || data_bytes > in->size - data_offset))
        return rad_err_set(e, RAD_E_FORMAT, "%s: truncated: data area [%" PRIu64 ", +%" PRIu64 ") past end of file (%" PRIu64 " bytes)",
                           in->name, data_offset, data_bytes, in->size);
    if (rad_in_is_mapped(in) && in->size - data_offset != data_bytes) /* the file is exactly prefix, header, data */
        return rad_err_set(e, RAD_E_FORMAT, "%s: %" PRIu64 " bytes after the data area [%" PRIu64 ", +%" PRIu64 ") (the file is %" PRIu64 " bytes)",
                           in->name, in->size - data_offset - data_bytes, data_offset, data_bytes, in->size);
    m->data_offset = data_offset;
    m->alignment = align;

    char *hdr = NULL;
    rc = rad_in_read_alloc(in, hbytes, &hdr, "header", e);
    if (rc) return rc;
    if (XXH3_64bits(hdr, hbytes) != hsum) {
        free(hdr);
        return rad_err_set(e, RAD_E_CHECKSUM, "%s: header checksum mismatch (corrupt header)", in->name);
    }
    m->id = hsum;
    RadIn h;
    rad_in_init_owned(&h, hdr, hbytes, in->name);
    int seen_tens = 0, seen[3] = {0};
    while (!rc && rad_in_remaining(&h) > 0) {
        char tag[5] = {0};
        uint32_t reserved;
        uint64_t len;
        rc = rad_in_read(&h, tag, 4, "section tag", e);
        if (!rc) rc = rad_in_u32(&h, &reserved, "section", e);
        if (!rc) rc = rad_in_u64(&h, &len, "section length", e);
        if (rc) break;
        if (len > rad_in_remaining(&h)) {
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: section '%.4s' length %" PRIu64 " exceeds the header", in->name, tag, len);
            break;
        }
        RadIn s;
        rad_in_init_mem(&s, h.data + h.pos, len, in->name);
        h.pos += len;
        int which = -1;
        for (int i = 0; i < 3; i++)
            if (memcmp(tag, SECTION_TAGS[i], 4) == 0) which = i;
        if (which >= 0 || memcmp(tag, TAG_TENS, 4) == 0) {
            int *flag = which >= 0 ? &seen[which] : &seen_tens;
            if (*flag) {
                rc = rad_err_set(e, RAD_E_FORMAT, "%s: section '%.4s' appears twice", in->name, tag);
                break;
            }
            *flag = 1;
            if (reserved != 0) { /* a known section's framing is 1.0's; an unknown one may come from a later minor */
                rc = rad_err_set(e, RAD_E_FORMAT, "%s: section '%.4s': reserved field is %u, not 0", in->name, tag, reserved);
                break;
            }
        }
        if (which >= 0) {
            RadDict *dst = which == 0 ? &m->meta : which == 1 ? &m->tok : &m->chat;
            uint64_t n;
            rc = rad_in_u64(&s, &n, "metadata count", e);
            if (!rc) rc = rad_dict_read(&s, dst, n, e);
        } else if (memcmp(tag, TAG_TENS, 4) == 0) {
            rc = read_tensors(&s, m, data_bytes, align, e);
        } /* unknown sections: skipped (a minor version may add them) */
        if (!rc && which >= 0 && rad_in_remaining(&s) != 0)
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: section '%.4s' has %" PRIu64 " trailing bytes", in->name, tag, rad_in_remaining(&s));
    }
    rad_in_close(&h);
    if (rc) return rc;
    if (!seen[0] || !seen_tens)
        return rad_err_set(e, RAD_E_FORMAT, "%s: header lacks the %s section", in->name, !seen[0] ? "META" : "TENS");
    /* overlapping planes */
    PlaneRef *v;
    uint64_t np;
    rc = plane_list(m, &v, &np, e);
    if (rc) return rc;
    for (uint64_t i = 1; i < np && !rc; i++)
        if (v[i - 1].p->offset + v[i - 1].p->stored_bytes > v[i].p->offset)
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' plane '%s' and tensor '%s' plane '%s' overlap in the data area", in->name,
                             v[i - 1].t->name, v[i - 1].p->name, v[i].t->name, v[i].p->name);
    free(v);
    if (rc) return rc;
    if (rad_in_is_mapped(in))
        for (uint64_t i = 0; i < m->n_tensors; i++)
            for (uint32_t j = 0; j < m->tensors[i].n_planes; j++)
                m->tensors[i].planes[j].data = in->data + data_offset + m->tensors[i].planes[j].offset;
    return RAD_OK;
}

/* Plane j of t, whose bytes must be mapped: the readers below take them where they lie. */
static int mapped_plane(const RadModelFile *m, const RadTensor *t, uint32_t j, const RadPlane **p, RadErr *e) {
    if (j >= t->n_planes) return rad_err_set(e, RAD_E_ARG, "tensor '%s': no plane %u", t->name, j);
    *p = &t->planes[j];
    if (!(*p)->data) return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: tensor '%s': data not mapped (stream input)", m->path, t->name);
    return RAD_OK;
}

int rad_plane_read(const RadModelFile *m, const RadTensor *t, uint32_t j, void *dst, RadErr *e) {
    const RadPlane *p = NULL;
    int rc = mapped_plane(m, t, j, &p, e);
    if (rc) return rc;
    if (p->compression == RAD_COMP_NONE) {
        memcpy(dst, p->data, p->nbytes);
        return RAD_OK;
    }
    size_t r = ZSTD_decompress(dst, p->nbytes, p->data, p->stored_bytes);
    if (ZSTD_isError(r) || r != p->nbytes)
        return rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' plane '%s': zstd data is corrupt (%s)", m->path, t->name,
                           p->name, ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short output");
    return RAD_OK;
}

/* Hashes a plane's logical bytes, taking stored bytes from a map or from the stream. */
static int hash_plane(RadModelFile *m, const RadTensor *t, const RadPlane *p, uint64_t *out, RadErr *e) {
    RadIn *in = &m->ins[0];
    XXH3_state_t *st = XXH3_createState();
    ZSTD_DStream *zd = p->compression == RAD_COMP_ZSTD ? ZSTD_createDStream() : NULL;
    enum { CHUNK = 1 << 20 };
    /* buffers only where needed, and no larger: a table of 200,000 small planes is checked at once */
    size_t ibn = p->data ? 0 : p->stored_bytes < CHUNK ? (size_t)p->stored_bytes + 1 : CHUNK;
    uint8_t *ib = ibn ? malloc(ibn) : NULL, *ob = zd ? malloc(ZSTD_DStreamOutSize()) : NULL;
    int rc = RAD_OK;
    if (!st || (ibn && !ib) || (p->compression == RAD_COMP_ZSTD && (!zd || !ob))) {
        rc = rad_err_set(e, RAD_E_NOMEM, "out of memory checking '%s'", t->name);
        goto out;
    }
    XXH3_64bits_reset(st);
    uint64_t left = p->stored_bytes, produced = 0;
    const uint8_t *map = p->data;
    size_t zret = 1;
    while (left > 0 && !rc) {
        size_t k = left < CHUNK ? (size_t)left : CHUNK;
        const uint8_t *src;
        if (map) {
            src = map;
            map += k;
        } else {
            rc = rad_in_read(in, ib, k, t->name, e);
            src = ib;
        }
        if (rc) break;
        left -= k;
        if (!zd) {
            XXH3_64bits_update(st, src, k);
            produced += k;
            continue;
        }
        ZSTD_inBuffer zi = {src, k, 0};
        while (zi.pos < zi.size) {
            ZSTD_outBuffer zo = {ob, ZSTD_DStreamOutSize(), 0};
            zret = ZSTD_decompressStream(zd, &zo, &zi);
            if (ZSTD_isError(zret)) {
                rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' plane '%s': zstd data is corrupt (%s)", m->path,
                                 t->name, p->name, ZSTD_getErrorName(zret));
                break;
            }
            produced += zo.pos;
            if (produced > p->nbytes) {
                rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' plane '%s': decompresses past %" PRIu64 " bytes",
                                 m->path, t->name, p->name, p->nbytes);
                break;
            }
            XXH3_64bits_update(st, ob, zo.pos);
        }
    }
    if (!rc && (produced != p->nbytes || (zd && zret != 0)))
        rc = rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' plane '%s': holds %" PRIu64 " bytes, expected %" PRIu64,
                         m->path, t->name, p->name, produced, p->nbytes);
    if (!rc) *out = XXH3_64bits_digest(st);
out:
    XXH3_freeState(st);
    ZSTD_freeDStream(zd);
    free(ib);
    free(ob);
    return rc;
}

static int mismatch(RadErr *e, const RadModelFile *m, const RadTensor *t, const RadPlane *p, uint64_t h) {
    return rad_err_set(e, RAD_E_CHECKSUM, "%s: tensor '%s' plane '%s': checksum mismatch (stored %016" PRIx64 ", computed %016" PRIx64 ")",
                       m->path, t->name, p->name, p->checksum, h);
}

int rad_plane_verify(const RadModelFile *m, const RadTensor *t, uint32_t j, RadErr *e) {
    const RadPlane *p = NULL;
    int rc = mapped_plane(m, t, j, &p, e);
    if (rc) return rc;
    uint64_t h = 0;
    rc = hash_plane((RadModelFile *)m, t, p, &h, e); /* a mapped plane: the stream is not touched */
    if (rc) return rc;
    return h == p->checksum ? RAD_OK : mismatch(e, m, t, p, h);
}

int rad_plane_load(const RadModelFile *m, const RadTensor *t, uint32_t j, void *dst_, int verify, RadErr *e) {
    if (!verify) return rad_plane_read(m, t, j, dst_, e);
    const RadPlane *p = NULL;
    int rc = mapped_plane(m, t, j, &p, e);
    if (rc) return rc;
    /* in chunks that stay in cache between the copy (or decompression) and the hash */
    enum { CHUNK = 256 << 10 };
    uint8_t *dst = dst_;
    XXH3_state_t *st = XXH3_createState();
    if (!st) return rad_err_set(e, RAD_E_NOMEM, "out of memory loading '%s'", t->name);
    XXH3_64bits_reset(st);
    if (p->compression == RAD_COMP_NONE) {
        for (uint64_t at = 0; at < p->nbytes; at += CHUNK) {
            size_t k = p->nbytes - at < CHUNK ? (size_t)(p->nbytes - at) : CHUNK;
            memcpy(dst + at, p->data + at, k);
            XXH3_64bits_update(st, dst + at, k);
        }
    } else {
        ZSTD_DCtx *z = ZSTD_createDCtx();
        if (!z) return XXH3_freeState(st), rad_err_set(e, RAD_E_NOMEM, "out of memory loading '%s'", t->name);
        ZSTD_inBuffer zi = {p->data, p->stored_bytes, 0};
        ZSTD_outBuffer zo = {dst, 0, 0};
        size_t zret = 1;
        while (zo.pos < p->nbytes) {
            size_t was = zo.pos;
            zo.size = p->nbytes - zo.pos < CHUNK ? p->nbytes : zo.pos + CHUNK;
            zret = ZSTD_decompressStream(z, &zo, &zi);
            if (ZSTD_isError(zret) || (zo.pos == was && zi.pos == zi.size)) break;
            XXH3_64bits_update(st, dst + was, zo.pos - was);
        }
        int over = 0; /* output full: the frame's end (last block, checksum) may still be unread */
        while (!ZSTD_isError(zret) && zret != 0 && zi.pos < zi.size && !over) {
            uint8_t x;
            ZSTD_outBuffer zx = {&x, 1, 0};
            size_t before = zi.pos;
            zret = ZSTD_decompressStream(z, &zx, &zi);
            over = zx.pos != 0 || zi.pos == before;
        }
        int bad = over || ZSTD_isError(zret) || zo.pos != p->nbytes || zret != 0 || zi.pos != zi.size;
        ZSTD_freeDCtx(z);
        if (bad)
            return XXH3_freeState(st),
                   rad_err_set(e, RAD_E_FORMAT, "%s: tensor '%s' plane '%s': zstd data is corrupt (%s)", m->path, t->name, p->name,
                               ZSTD_isError(zret) ? ZSTD_getErrorName(zret) : "its size is not the plane's");
    }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h == p->checksum ? RAD_OK : mismatch(e, m, t, p, h);
}

int rad_container_check(RadModelFile *m, RadCheckFn report, void *user, RadErr *e) {
    if (strcmp(m->format, "rad") != 0)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: --check needs a .rad container (a %s file carries no checksums)", m->path, m->format);
    PlaneRef *v;
    uint64_t np;
    int rc = plane_list(m, &v, &np, e);
    if (rc) return rc;
    RadIn *in = &m->ins[0];
    int bad = 0;
    RadErr first = {0};
    for (uint64_t i = 0; i < np && !rc; i++) {
        const RadTensor *t = v[i].t;
        if (!rad_in_is_mapped(in)) { /* stream: skip to the plane's offset */
            uint64_t at = m->data_offset + v[i].p->offset;
            if (at < in->pos) {
                rc = rad_err_set(e, RAD_E_FORMAT, "%s: plane out of order", m->path);
                break;
            }
            rc = rad_in_skip(in, at - in->pos, "padding", e);
            if (rc) break;
        }
        uint64_t h = 0;
        rc = hash_plane(m, t, v[i].p, &h, e);
        if (rc) break;
        int ok = h == v[i].p->checksum;
        if (!ok) {
            if (!bad) mismatch(&first, m, t, v[i].p, h);
            bad++;
        }
        if (report) report(user, t, v[i].p, ok);
    }
    free(v);
    if (rc) return rc;
    if (bad) return rad_err_set(e, RAD_E_CHECKSUM, "%s", first.msg);
    return RAD_OK;
}
