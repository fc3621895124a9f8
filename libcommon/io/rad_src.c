#include "libcommon/io/rad_src.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>


/* ---- paths ---------------------------------------------------------------------------- */

enum { NP_OK = 0, NP_EMPTY = 1, NP_ABSOLUTE = 2, NP_DOTDOT = 3, NP_NOMEM = 4 };

/* Normalises a relative path: drops empty and "." components. Refuses absolute paths and
 * ".." components. *out is malloc'd on NP_OK. */
static int norm_path(const char *p, char **out) {
    *out = NULL;
    if (p[0] == '/' || p[0] == '\\') return NP_ABSOLUTE;
    size_t len = strlen(p);
    char *r = malloc(len + 1);
    if (!r) return NP_NOMEM;
    size_t o = 0;
    const char *c = p;
    while (*c) {
        const char *slash = strchr(c, '/');
        size_t cl = slash ? (size_t)(slash - c) : strlen(c);
        if (cl == 2 && c[0] == '.' && c[1] == '.') {
            free(r);
            return NP_DOTDOT;
        }
        if (cl > 0 && !(cl == 1 && c[0] == '.')) {
            if (o) r[o++] = '/';
            memcpy(r + o, c, cl);
            o += cl;
        }
        c += cl;
        if (*c == '/') c++;
    }
    r[o] = 0;
    if (o == 0) {
        free(r);
        return NP_EMPTY;
    }
    *out = r;
    return NP_OK;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static bool ends_with_ci(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcasecmp(s + a - b, suffix) == 0;
}

/* ---- the entry list ---------------------------------------------------------------------- */

typedef struct List {
    RadSrcEntry *v;  /* [n] */
    uint64_t n, cap;
} List;

static int list_add(List *l, char *name, char *member, uint64_t size, uint64_t ordinal) {
    if (l->n == l->cap) {
        uint64_t nc = l->cap ? l->cap * 2 : 32;
        RadSrcEntry *nv = realloc(l->v, nc * sizeof *nv);
        if (!nv) return RAD_E_NOMEM;
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = (RadSrcEntry){name, member, size, ordinal, NULL};
    return RAD_OK;
}

static void list_free(List *l) {
    for (uint64_t i = 0; i < l->n; i++) {
        free(l->v[i].name);
        free(l->v[i].member);
        free(l->v[i].cache);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int cmp_entry_name(const void *a, const void *b) {
    return strcmp(((const RadSrcEntry *)a)->name, ((const RadSrcEntry *)b)->name);
}
static int cmp_ptr_name(const void *a, const void *b) {
    return strcmp((*(const RadSrcEntry *const *)a)->name, (*(const RadSrcEntry *const *)b)->name);
}

/* ---- folders ------------------------------------------------------------------------------ */

static int list_dir(const char *top, const char *dir, const char *rel, int depth, List *l,
                    RadErr *e) {
    DIR *d = opendir(dir);
    if (!d) return rad_err_set(e, RAD_E_IO, "%s: cannot list: %s", dir, strerror(errno));
    int rc = RAD_OK;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue; /* ".", "..", and hidden files (.git, .cache) */
        char *full = NULL, *r = NULL;
        if (asprintf(&full, "%s/%s", dir, de->d_name) < 0) full = NULL;
        if (asprintf(&r, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) < 0) r = NULL;
        if (!full || !r) {
            free(full);
            free(r);
            rc = rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", top);
            break;
        }
        struct stat lst, st;
        bool ok = lstat(full, &lst) == 0 && stat(full, &st) == 0;
        /* a FIFO, socket or device is listed too, so reading it is refused by name
         * (rad_open_regular) rather than the member looking absent */
        if (ok && !S_ISDIR(st.st_mode)) {
            if (l->n >= RAD_SRC_MAX_FILES) {
                free(full);
                free(r);
                rc = rad_err_set(e, RAD_E_LIMIT, "%s: more than %d files (is this a model folder?)",
                                 top, RAD_SRC_MAX_FILES);
                break;
            }
            if (list_add(l, r, NULL, S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0, 0)) {
                free(full);
                free(r);
                rc = rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", top);
                break;
            }
            r = NULL;
        } else if (ok && S_ISDIR(st.st_mode) && !S_ISLNK(lst.st_mode) && depth < RAD_SRC_MAX_DEPTH) {
            rc = list_dir(top, full, r, depth + 1, l, e);
        }
        free(full);
        free(r);
        if (rc) break;
    }
    closedir(d);
    return rc;
}

/* ---- archives ----------------------------------------------------------------------------- */

/* libarchive reports "no format recognised" with this errno (archive_private.h: EFTYPE where
 * it exists, else EILSEQ); it is not in the public header. */
#ifndef ARCHIVE_ERRNO_FILE_FORMAT
#ifdef EFTYPE
#define ARCHIVE_ERRNO_FILE_FORMAT EFTYPE
#else
#define ARCHIVE_ERRNO_FILE_FORMAT EILSEQ
#endif
#endif
#define NOT_ARCHIVE "not a folder or a supported archive (.tar, .tar.gz, .tar.zst, .zip)"

/* The archive's file, opened with rad_open_regular (a FIFO is refused, never waited on) and
 * read through these callbacks, which count the raw bytes read for the bomb checks. */
typedef struct ArFile {
    int fd;
    uint64_t raw;           /* bytes read from the file */
    uint8_t buf[1 << 16];
} ArFile;

static la_ssize_t arf_read(struct archive *a, void *u, const void **buf) {
    ArFile *f = u;
    for (;;) {
        ssize_t r = read(f->fd, f->buf, sizeof f->buf);
        if (r >= 0) {
            f->raw += (uint64_t)r;
            *buf = f->buf;
            return r;
        }
        if (errno != EINTR) {
            archive_set_error(a, errno, "read failed: %s", strerror(errno));
            return -1;
        }
    }
}

static la_int64_t arf_skip(struct archive *a, void *u, la_int64_t n) {
    ArFile *f = u;
    (void)a;
    off_t old = lseek(f->fd, 0, SEEK_CUR), now;
    if (old < 0 || (now = lseek(f->fd, n, SEEK_CUR)) < 0) return 0; /* 0: libarchive reads instead */
    return now - old;
}

static la_int64_t arf_seek(struct archive *a, void *u, la_int64_t off, int whence) {
    ArFile *f = u;
    off_t r = lseek(f->fd, off, whence);
    if (r < 0) {
        archive_set_error(a, errno, "seek failed: %s", strerror(errno));
        return ARCHIVE_FATAL;
    }
    return r;
}

static int arf_close(struct archive *a, void *u) {
    ArFile *f = u;
    (void)a;
    close(f->fd);
    free(f);
    return ARCHIVE_OK;
}

/* Opens path for reading with the formats and filters Radiance supports; *file (optional)
 * gets the reader's file state, owned by the archive. */
static int ar_open(const char *path, struct archive **out, ArFile **file, uint64_t *size, RadErr *e) {
    *out = NULL;
    struct stat st;
    int fd = rad_open_regular(path, &st, e);
    if (fd < 0) return e ? e->code : RAD_E_IO;
    ArFile *f = malloc(sizeof *f);
    struct archive *a = f ? archive_read_new() : NULL;
    if (!a) {
        free(f);
        close(fd);
        return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", path);
    }
    f->fd = fd;
    f->raw = 0;
    if (size) *size = (uint64_t)st.st_size;
    /* Compression filters through their libraries; the return value only says whether an
     * external program would be used, which is fine. */
    archive_read_support_filter_gzip(a);
    archive_read_support_filter_zstd(a);
    archive_read_support_filter_xz(a);
    archive_read_support_filter_bzip2(a);
    archive_read_support_filter_lz4(a);
    archive_read_support_format_tar(a);
    archive_read_support_format_zip(a);
    archive_read_set_callback_data(a, f);
    archive_read_set_read_callback(a, arf_read);
    archive_read_set_skip_callback(a, arf_skip);
    archive_read_set_seek_callback(a, arf_seek);
    archive_read_set_close_callback(a, arf_close); /* also called when the open fails */
    if (archive_read_open1(a) != ARCHIVE_OK) {
        /* Opening reads the first block and picks the format: no bidder is "unsupported". */
        int en = archive_errno(a), rc;
        if (en == ARCHIVE_ERRNO_FILE_FORMAT)
            rc = rad_err_set(e, RAD_E_UNSUPPORTED, "%s: " NOT_ARCHIVE, path);
        else if (en > 0) /* a system errno: the file could not be opened or read */
            rc = rad_err_set(e, RAD_E_IO, "%s: cannot open: %s", path, archive_error_string(a));
        else             /* ARCHIVE_ERRNO_MISC: a damaged compressed stream, ... */
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: %s", path, archive_error_string(a));
        archive_read_free(a);
        return rc;
    }
    *out = a;
    if (file) *file = f;
    return RAD_OK;
}

/* Whether out bytes inflated from raw archive bytes is within the bomb bound. */
static bool ratio_ok(uint64_t out, uint64_t raw) {
    return out <= RAD_SRC_RATIO_FREE || (out - RAD_SRC_RATIO_FREE) / RAD_SRC_MAX_RATIO <= raw;
}

/* A declared member size that the ratio bound could never let through. */
static int check_declared(const char *name, uint64_t size, uint64_t ar_size, RadErr *e) {
    if (size == UINT64_MAX || ratio_ok(size, ar_size)) return RAD_OK;
    return rad_err_set(e, RAD_E_LIMIT, "%s: declares %" PRIu64 " bytes, more than %u times the "
                       "archive's %" PRIu64 " (an archive bomb?)", name, size, RAD_SRC_MAX_RATIO, ar_size);
}

/* Where a member's bytes go: a growing buffer, a file, or nowhere (only counted). */
typedef struct Sink {
    uint8_t *buf;
    uint64_t cap;
    int fd;             /* >= 0: write here */
    bool discard;       /* only count */
    const char *tmpdir; /* for messages */
} Sink;

static int sink_put(Sink *k, uint64_t len, const uint8_t *p, size_t n, uint64_t limit,
                    const char *name, RadErr *e) {
    if (k->fd >= 0) {
        while (n) {
            ssize_t w = write(k->fd, p, n);
            if (w < 0 && errno == EINTR) continue;
            if (w < 0)
                return rad_err_set(e, RAD_E_IO, "%s: writing its temporary copy in %s: %s", name,
                                   k->tmpdir, strerror(errno));
            p += w;
            n -= (size_t)w;
        }
        return RAD_OK;
    }
    if (k->discard) return RAD_OK;
    if (len + n > k->cap) {
        uint64_t nc = k->cap ? k->cap : (1u << 20);
        while (nc < len + n) nc *= 2;
        if (nc > limit) nc = limit;
        uint8_t *nb = nc > SIZE_MAX - 1 ? NULL : realloc(k->buf, (size_t)nc);
        if (!nb) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory for %" PRIu64 " bytes", name, nc);
        k->buf = nb;
        k->cap = nc;
    }
    memcpy(k->buf + len, p, n);
    return RAD_OK;
}

/* Reads the current member's data (size bytes, or UINT64_MAX when unknown) into the sink,
 * refusing more than max_bytes, and an expansion beyond RAD_SRC_MAX_RATIO of the archive bytes
 * read meanwhile. Memory grows as bytes arrive, so a header that declares a huge member cannot
 * force a huge allocation before the bytes exist. */
static int ar_pump(struct archive *a, ArFile *f, const char *name, uint64_t size, uint64_t max_bytes,
                   Sink *k, uint64_t *out_len, RadErr *e) {
    if (size != UINT64_MAX && size > max_bytes)
        return rad_err_set(e, RAD_E_LIMIT, "%s: %" PRIu64 " bytes exceeds the limit of %" PRIu64,
                           name, size, max_bytes);
    uint64_t limit = size != UINT64_MAX ? size : max_bytes; /* the most we accept */
    uint64_t raw0 = f->raw, len = 0;
    size_t chunk = 1u << 20;
    uint8_t *tmp = malloc(chunk);
    if (!tmp) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", name);
    int rc = RAD_OK;
    for (;;) {
        la_ssize_t r = archive_read_data(a, tmp, chunk);
        if (r < 0) {
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: %s", name, archive_error_string(a));
            break;
        }
        if (r == 0) break;
        if ((uint64_t)r > limit - len) {
            if (size != UINT64_MAX)
                rc = rad_err_set(e, RAD_E_FORMAT, "%s: member is longer than its declared %" PRIu64
                                 " bytes", name, size);
            else
                rc = rad_err_set(e, RAD_E_LIMIT, "%s: member exceeds the limit of %" PRIu64
                                 " bytes", name, max_bytes);
            break;
        }
        if (!ratio_ok(len + (uint64_t)r, f->raw - raw0)) {
            rc = rad_err_set(e, RAD_E_LIMIT, "%s: inflates to more than %u times the archive bytes "
                             "it is read from (%" PRIu64 " bytes from %" PRIu64 "; an archive bomb?)",
                             name, RAD_SRC_MAX_RATIO, len + (uint64_t)r, f->raw - raw0);
            break;
        }
        if ((rc = sink_put(k, len, tmp, (size_t)r, limit, name, e))) break;
        len += (uint64_t)r;
    }
    free(tmp);
    if (!rc && size != UINT64_MAX && len != size)
        rc = rad_err_set(e, RAD_E_FORMAT, "%s: truncated: %" PRIu64 " of %" PRIu64 " bytes", name,
                         len, size);
    if (!rc) *out_len = len;
    return rc;
}

/* ar_pump into memory: *out is malloc'd (NUL-free, exactly *out_len bytes, at least 1 allocated). */
static int ar_slurp(struct archive *a, ArFile *f, const char *name, uint64_t size, uint64_t max_bytes,
                    uint8_t **out, uint64_t *out_len, RadErr *e) {
    *out = NULL;
    Sink k = {.fd = -1};
    uint64_t len = 0;
    int rc = ar_pump(a, f, name, size, max_bytes, &k, &len, e);
    if (!rc && !k.buf && !(k.buf = malloc(1))) rc = rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", name);
    if (rc) {
        free(k.buf);
        return rc;
    }
    *out = k.buf;
    *out_len = len;
    return RAD_OK;
}

/* The whole compressed stream within the bomb bound (many small members). */
static int check_stream(struct archive *a, ArFile *f, const char *path, RadErr *e) {
    uint64_t out = (uint64_t)archive_filter_bytes(a, 0);
    if (archive_filter_count(a) < 2 || ratio_ok(out, f->raw)) return RAD_OK;
    return rad_err_set(e, RAD_E_LIMIT, "%s: inflates to more than %u times its size (%" PRIu64
                       " bytes from %" PRIu64 " so far; an archive bomb?)", path, RAD_SRC_MAX_RATIO,
                       out, f->raw);
}

static const char *entry_path(struct archive_entry *ent) {
    const char *p = archive_entry_pathname(ent);
    return p ? p : archive_entry_pathname_utf8(ent);
}

/* Lists an archive's regular members. Returns RAD_E_UNSUPPORTED when no format recognised it. */
static int list_archive(RadSrc *s, List *l, RadErr *e) {
    struct archive *a;
    ArFile *f;
    int rc = ar_open(s->path, &a, &f, &s->ar_size, e);
    if (rc) return rc;
    /* a compressed stream cannot seek: skipping a member inflates it anyway, so it is read
     * here, under the bomb bound, instead of by libarchive's unbounded skip */
    bool compressed = archive_filter_count(a) > 1;
    uint64_t ordinal = 0, cached = 0;
    struct archive_entry *ent;
    for (;; ordinal++) {
        int r = archive_read_next_header(a, &ent);
        if (r == ARCHIVE_EOF) break;
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
            if (ordinal == 0 && archive_format(a) == 0)
                rc = rad_err_set(e, RAD_E_UNSUPPORTED, "%s: " NOT_ARCHIVE, s->path);
            else
                rc = rad_err_set(e, RAD_E_FORMAT, "%s: unreadable archive (member #%" PRIu64 "): %s",
                                 s->path, ordinal, archive_error_string(a));
            break;
        }
        if ((rc = check_stream(a, f, s->path, e))) break;
        const char *p = entry_path(ent);
        if (!p) {
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: member #%" PRIu64 " has an unreadable name",
                             s->path, ordinal);
            break;
        }
        char *name = NULL;
        int np = norm_path(p, &name);
        if (np == NP_ABSOLUTE || np == NP_DOTDOT) {
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: member '%s': %s", s->path, p,
                             np == NP_ABSOLUTE ? "absolute path" : "path escapes the archive ('..')");
            break;
        }
        if (np == NP_NOMEM) {
            rc = rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", s->path);
            break;
        }
        if (np == NP_EMPTY || archive_entry_filetype(ent) != AE_IFREG || archive_entry_hardlink(ent)) {
            free(name);
            continue;
        }
        if (l->n >= RAD_SRC_MAX_FILES) {
            free(name);
            rc = rad_err_set(e, RAD_E_LIMIT, "%s: more than %d members", s->path, RAD_SRC_MAX_FILES);
            break;
        }
        uint64_t size = archive_entry_size_is_set(ent) && archive_entry_size(ent) >= 0
                            ? (uint64_t)archive_entry_size(ent) : UINT64_MAX;
        char label[512];
        snprintf(label, sizeof label, "%s:%s", s->path, p);
        if ((rc = check_declared(label, size, s->ar_size, e))) {
            free(name);
            break;
        }
        char *member = strdup(p);
        if (!member || list_add(l, name, member, size, ordinal)) {
            free(name);
            free(member);
            rc = rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", s->path);
            break;
        }
        uint64_t len;
        if (size <= RAD_SRC_CACHE_MEMBER && cached + size <= RAD_SRC_CACHE_TOTAL &&
            (ends_with_ci(name, ".json") || ends_with_ci(name, ".jinja"))) {
            if ((rc = ar_slurp(a, f, label, size, size, &l->v[l->n - 1].cache, &len, e))) break;
            cached += size;
        } else if (compressed) {
            Sink k = {.fd = -1, .discard = true};
            if ((rc = ar_pump(a, f, label, size, RAD_SRC_NO_LIMIT, &k, &len, e))) break;
        }
        if ((rc = check_stream(a, f, s->path, e))) break;
    }
    archive_read_free(a);
    return rc;
}

/* Strips a single top-level folder shared by every member; sets s->stem. */
static int strip_root(RadSrc *s, List *l, RadErr *e) {
    char *root = NULL;
    if (l->n > 0) {
        const char *f = l->v[0].name, *sl = strchr(f, '/');
        if (sl) {
            size_t rl = (size_t)(sl - f) + 1; /* with the '/' */
            bool all = true;
            for (uint64_t i = 0; i < l->n && all; i++)
                all = strncmp(l->v[i].name, f, rl) == 0;
            if (all) {
                if (!(root = strndup(f, rl - 1))) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", s->path);
                for (uint64_t i = 0; i < l->n; i++)
                    memmove(l->v[i].name, l->v[i].name + rl, strlen(l->v[i].name + rl) + 1);
            }
        }
    }
    if (root) {
        s->stem = root;
        return RAD_OK;
    }
    const char *b = base_name(s->path);
    static const char *exts[] = {".tar.gz", ".tar.zst", ".tar.xz", ".tar.bz2", ".tar.lz4",
                                 ".tgz", ".tzst", ".txz", ".tar", ".zip"};
    size_t bl = strlen(b);
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++)
        if (ends_with_ci(b, exts[i]) && bl > strlen(exts[i])) {
            bl -= strlen(exts[i]);
            break;
        }
    if (!(s->stem = strndup(b, bl))) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", s->path);
    return RAD_OK;
}

/* The name-sorted table for lookups; refuses two members with one name (after the root is
 * stripped). */
static int index_names(RadSrc *s, const List *l, RadErr *e) {
    const RadSrcEntry **v = malloc((l->n ? l->n : 1) * sizeof *v);
    if (!v) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", s->path);
    for (uint64_t i = 0; i < l->n; i++) v[i] = &l->v[i];
    if (l->n > 1) qsort(v, l->n, sizeof *v, cmp_ptr_name);
    for (uint64_t i = 1; i < l->n; i++)
        if (strcmp(v[i]->name, v[i - 1]->name) == 0) {
            int rc = rad_err_set(e, RAD_E_FORMAT, "%s: member '%s' appears twice", s->path,
                                 v[i]->member ? v[i]->member : v[i]->name);
            free(v);
            return rc;
        }
    s->by_name = v;
    return RAD_OK;
}

/* ---- open / free --------------------------------------------------------------------------- */

int rad_src_open(RadSrc *s, const char *path, RadErr *e) {
    memset(s, 0, sizeof *s);
    struct stat st;
    if (stat(path, &st) != 0) return rad_err_set(e, RAD_E_IO, "%s: %s", path, strerror(errno));
    if (!(s->path = strdup(path))) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", path);
    List l = {0};
    int rc;
    if (S_ISDIR(st.st_mode)) {
        size_t pl = strlen(s->path);
        while (pl > 1 && s->path[pl - 1] == '/') s->path[--pl] = 0;
        if ((rc = list_dir(s->path, s->path, "", 0, &l, e))) goto fail;
        if (l.n) qsort(l.v, l.n, sizeof *l.v, cmp_entry_name);
        char *real = realpath(s->path, NULL);
        s->stem = strdup(real ? base_name(real) : base_name(s->path));
        free(real);
        if (!s->stem) {
            rc = rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", path);
            goto fail;
        }
    } else if (S_ISREG(st.st_mode)) {
        s->is_archive = true;
        if ((rc = list_archive(s, &l, e))) goto fail;
        if ((rc = strip_root(s, &l, e))) goto fail;
    } else {
        rc = rad_err_set(e, RAD_E_UNSUPPORTED, "%s: not a folder or a regular file", path);
        goto fail;
    }
    if ((rc = index_names(s, &l, e))) goto fail;
    s->entries = l.v;
    s->n = l.n;
    return RAD_OK;
fail:
    list_free(&l);
    rad_src_free(s);
    return rc;
}

void rad_src_free(RadSrc *s) {
    if (!s) return;
    for (uint64_t i = 0; i < s->n; i++) {
        free(s->entries[i].name);
        free(s->entries[i].member);
        free(s->entries[i].cache);
    }
    free(s->entries);
    free(s->by_name);
    free(s->path);
    free(s->stem);
    if (s->ar) archive_read_free(s->ar);
    memset(s, 0, sizeof *s);
}

bool rad_src_looks_like_archive(const char *path) {
    struct archive *a;
    if (ar_open(path, &a, NULL, NULL, NULL)) return false;
    struct archive_entry *ent;
    int r = archive_read_next_header(a, &ent);
    bool ok = r == ARCHIVE_OK || r == ARCHIVE_WARN || (r == ARCHIVE_EOF && archive_format(a) != 0);
    archive_read_free(a);
    return ok;
}

/* ---- lookup ------------------------------------------------------------------------------- */

/* A binary search of the sorted table: a folder of 100,000 files costs no scan per lookup. */
static const RadSrcEntry *find_norm(const RadSrc *s, const char *n) {
    uint64_t lo = 0, hi = s->by_name ? s->n : 0;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->by_name[mid]->name, n);
        if (c == 0) return s->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const RadSrcEntry *rad_src_find(const RadSrc *s, const char *rel) {
    char *n = NULL;
    if (norm_path(rel, &n) != NP_OK) return NULL;
    const RadSrcEntry *r = find_norm(s, n);
    free(n);
    return r;
}

bool rad_src_has(const RadSrc *s, const char *rel) { return rad_src_find(s, rel) != NULL; }

uint64_t rad_src_count_suffix(const RadSrc *s, const char *suffix, uint64_t *first) {
    uint64_t c = 0;
    for (uint64_t i = 0; i < s->n; i++)
        if (ends_with_ci(s->entries[i].name, suffix)) {
            if (c == 0 && first) *first = i;
            c++;
        }
    return c;
}

void rad_src_describe(const RadSrc *s, char *buf, size_t size, int max) {
    size_t o = 0;
    if (size == 0) return;
    buf[0] = 0;
    if (s->n == 0) {
        snprintf(buf, size, "nothing");
        return;
    }
    for (uint64_t i = 0; i < s->n && (int64_t)i < max; i++) {
        int w = snprintf(buf + o, size - o, "%s%s", i ? ", " : "", s->entries[i].name);
        if (w < 0 || (size_t)w >= size - o) return;
        o += (size_t)w;
    }
    if (s->n > (uint64_t)max)
        snprintf(buf + o, size - o, " (and %" PRIu64 " more)", s->n - (uint64_t)max);
}

/* ---- reading ------------------------------------------------------------------------------ */

/* An unlinked temporary file for a member's bytes; -1 with e set. */
static int spool_open(const char *name, const char **dir, RadErr *e) {
    const char *d = getenv("TMPDIR");
    if (!d || !*d) d = "/tmp";
    *dir = d;
    char *t = NULL;
    if (asprintf(&t, "%s/rad-member.XXXXXX", d) < 0) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", name), -1;
    int fd = mkostemp(t, O_CLOEXEC);
    if (fd < 0) {
        rad_err_set(e, RAD_E_IO, "%s: cannot make a temporary copy in %s: %s", name, d, strerror(errno));
        free(t);
        return -1;
    }
    unlink(t); /* gone with the last reference, whatever happens next */
    free(t);
    return fd;
}

static int ar_read(RadSrc *s, const RadSrcEntry *en, RadIn *out, uint64_t max_bytes, RadErr *e) {
    char name[sizeof out->name];
    snprintf(name, sizeof name, "%s:%s", s->path, en->member);
    if (en->size != UINT64_MAX && en->size > max_bytes)
        return rad_err_set(e, RAD_E_LIMIT, "%s: %" PRIu64 " bytes exceeds the limit of %" PRIu64,
                           name, en->size, max_bytes);
    if (en->cache) {
        uint8_t *copy = malloc(en->size ? (size_t)en->size : 1);
        if (!copy) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", name);
        if (en->size) memcpy(copy, en->cache, (size_t)en->size);
        rad_in_init_owned(out, copy, en->size, name);
        return RAD_OK;
    }
    /* Reuse the open reader when the member lies ahead of it; else start over. */
    if (s->ar && s->ar_pos >= en->ordinal + 1) {
        archive_read_free(s->ar);
        s->ar = NULL;
    }
    if (!s->ar) {
        struct archive *a;
        ArFile *f;
        int rc = ar_open(s->path, &a, &f, NULL, e);
        if (rc) return rc;
        s->ar = a;
        s->ar_fd = f;
        s->ar_pos = 0; /* headers read so far */
    }
    struct archive *a = s->ar;
    ArFile *f = s->ar_fd;
    struct archive_entry *ent = NULL;
    int rc = RAD_OK;
    while (s->ar_pos <= en->ordinal) {
        int r = archive_read_next_header(a, &ent);
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
            rc = rad_err_set(e, RAD_E_FORMAT, "%s: cannot reach the member: %s", name,
                             r == ARCHIVE_EOF ? "archive ended" : archive_error_string(a));
            goto fail;
        }
        s->ar_pos++;
    }
    const char *p = entry_path(ent);
    if (!p || strcmp(p, en->member) != 0) {
        rc = rad_err_set(e, RAD_E_IO, "%s: the archive changed while it was being read", name);
        goto fail;
    }
    uint64_t len;
    if (max_bytes != RAD_SRC_NO_LIMIT) {
        uint8_t *buf;
        if ((rc = ar_slurp(a, f, name, en->size, max_bytes, &buf, &len, e))) goto fail;
        rad_in_init_owned(out, buf, len, name);
        return RAD_OK;
    }
    /* weights: inflated into a temporary file and mapped, so memory stays flat */
    Sink k = {.fd = -1};
    if ((k.fd = spool_open(name, &k.tmpdir, e)) < 0) {
        rc = e ? e->code : RAD_E_IO;
        goto fail;
    }
    rc = ar_pump(a, f, name, en->size, max_bytes, &k, &len, e);
    void *map = NULL;
    if (!rc && len > 0 && (map = mmap(NULL, (size_t)len, PROT_READ, MAP_PRIVATE, k.fd, 0)) == MAP_FAILED)
        rc = rad_err_set(e, RAD_E_IO, "%s: cannot map its temporary copy: %s", name, strerror(errno));
    close(k.fd);
    if (rc) goto fail;
    rad_in_init_mem(out, len ? map : (const void *)"", len, name);
    out->kind = RAD_IN_MMAP; /* rad_in_close unmaps */
    return RAD_OK;
fail:
    archive_read_free(s->ar);
    s->ar = NULL;
    s->ar_fd = NULL;
    return rc;
}

int rad_src_read(RadSrc *s, const char *rel, RadIn *out, uint64_t max_bytes, RadErr *e) {
    memset(out, 0, sizeof *out);
    out->fd = -1;
    char *n = NULL;
    int np = norm_path(rel, &n);
    if (np == NP_NOMEM) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", s->path);
    if (np != NP_OK)
        return rad_err_set(e, RAD_E_ARG, "%s: '%s' is not a relative path inside it", s->path, rel);
    const RadSrcEntry *en = find_norm(s, n);
    if (!en) {
        int rc = rad_err_set(e, RAD_E_NOTFOUND, "%s: no file '%s'", s->path, n);
        free(n);
        return rc;
    }
    if (s->is_archive) {
        free(n);
        return ar_read(s, en, out, max_bytes, e);
    }
    char *full = NULL;
    if (asprintf(&full, "%s/%s", s->path, n) < 0) full = NULL;
    free(n);
    if (!full) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", s->path);
    int rc = rad_in_open_file(out, full, e);
    if (!rc && out->size > max_bytes) {
        rc = rad_err_set(e, RAD_E_LIMIT, "%s: %" PRIu64 " bytes exceeds the limit of %" PRIu64,
                         full, out->size, max_bytes);
        rad_in_close(out);
    }
    free(full);
    return rc;
}

