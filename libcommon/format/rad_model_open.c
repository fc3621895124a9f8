/* rad_model_open: detects what a path holds and hands it to the right reader. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libcommon/format/rad_gguf.h"
#include "libcommon/format/rad_container.h"
#include "libcommon/format/rad_model.h"
#include "libcommon/io/rad_src.h"
#include "libcommon/format/rad_hf.h"
#include "libcommon/format/rad_safetensors.h"

/* stdin with the first bytes already read for detection, replayed before the rest. */
typedef struct PeekFd {
    uint8_t buf[16];
    size_t n, pos;
    int fd;
} PeekFd;

static long peek_read(void *user, void *dst, size_t n, RadErr *e) {
    PeekFd *p = user;
    if (p->pos < p->n) {
        size_t k = p->n - p->pos < n ? p->n - p->pos : n;
        memcpy(dst, p->buf + p->pos, k);
        p->pos += k;
        return (long)k;
    }
    for (;;) {
        ssize_t r = read(p->fd, dst, n);
        if (r >= 0) return (long)r;
        if (errno != EINTR) {
            rad_err_set(e, RAD_E_IO, "<stdin>: read failed: %s", strerror(errno));
            return -1;
        }
    }
}

enum Kind { K_UNKNOWN, K_RAD, K_GGUF, K_SAFETENSORS };

static enum Kind sniff(const uint8_t *b, size_t n) {
    if (n >= 8 && memcmp(b, "RADIANCE", 8) == 0) return K_RAD;
    if (n >= 4 && memcmp(b, "GGUF", 4) == 0) return K_GGUF;
    if (n >= 9) { /* safetensors: u64 header length, then a JSON object */
        uint64_t len = 0;
        for (int i = 7; i >= 0; i--) len = len << 8 | b[i];
        if (len >= 2 && len < ((uint64_t)1 << 40) && b[8] == '{') return K_SAFETENSORS;
    }
    return K_UNKNOWN;
}

static int load_kind(enum Kind k, RadIn *in, RadModelFile *m, RadErr *e) {
    switch (k) {
    case K_RAD: return rad_container_load(in, m, e);
    case K_GGUF: return rad_gguf_load(in, m, e);
    case K_SAFETENSORS: return rad_safetensors_load(in, m, e);
    default: break;
    }
    rad_in_close(in);
    return RAD_E_UNSUPPORTED;
}

/* A regular file mapped read-only, its descriptor and identity kept in w (from the
 * same fstat that sized the map, so the watch describes exactly what is mapped). */
static int map_file(RadIn *in, const char *path, RadFileWatch *w, RadErr *e) {
    memset(w, 0, sizeof *w);
    struct stat st;
    int fd, rc = rad_in_map_file(in, path, &st, &fd, e);
    if (rc) return rc;
    rad_file_watch_init(w, fd, &st);
    return RAD_OK;
}

static int open_stdin(RadModelFile *m, RadErr *e) {
    PeekFd *p = calloc(1, sizeof *p);
    if (!p) return rad_err_set(e, RAD_E_NOMEM, "<stdin>: out of memory");
    p->fd = 0;
    while (p->n < sizeof p->buf) {
        ssize_t r = read(0, p->buf + p->n, sizeof p->buf - p->n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        p->n += (size_t)r;
    }
    enum Kind k = sniff(p->buf, p->n);
    if (k == K_UNKNOWN) {
        free(p);
        return rad_err_set(e, RAD_E_UNSUPPORTED, "<stdin>: not a .rad, GGUF or safetensors stream (archives and folders must be given by path)");
    }
    RadIn in;
    rad_in_init_fn(&in, peek_read, p, "<stdin>");
    in.owned = p; /* freed by rad_in_close */
    return load_kind(k, &in, m, e);
}

int rad_model_open(const char *path, RadModelFile *m, RadErr *e) {
    memset(m, 0, sizeof *m);
    int rc;
    if (strcmp(path, "-") == 0) {
        rc = open_stdin(m, e);
    } else {
        struct stat st;
        if (stat(path, &st) != 0) return rad_err_set(e, RAD_E_IO, "%s: %s", path, strerror(errno));
        if (S_ISDIR(st.st_mode)) {
            RadSrc s;
            rc = rad_src_open(&s, path, e);
            if (rc) return rc;
            rc = rad_model_load_src(&s, m, e);
            rad_src_free(&s);
        } else {
            RadIn in;
            RadFileWatch w;
            rc = map_file(&in, path, &w, e);
            if (rc) return rc;
            enum Kind k = sniff(in.data, in.size < 16 ? in.size : 16);
            if (k != K_UNKNOWN) {
                rc = load_kind(k, &in, m, e); /* a loader may clear m: the watch goes on after */
                if (rc) close(w.fd);
                else m->watch = w;
            } else {
                close(w.fd);
                rad_in_close(&in);
                if (!rad_src_looks_like_archive(path))
                    return rad_err_set(e, RAD_E_UNSUPPORTED, "%s: unknown format (not .rad, GGUF, safetensors or an archive)", path);
                RadSrc s;
                rc = rad_src_open(&s, path, e);
                if (rc) return rc;
                rc = rad_model_load_src(&s, m, e);
                rad_src_free(&s);
            }
        }
    }
    if (!m->path[0]) snprintf(m->path, sizeof m->path, "%s", strcmp(path, "-") ? path : "<stdin>");
    return rc;
}

/* ---- a source's model ------------------------------------------------------------------------------- */

int rad_model_load_src(RadSrc *s, RadModelFile *m, RadErr *e) {
    if (rad_src_has(s, "config.json")) return rad_hf_load(s, m, e);
    uint64_t gi = 0, si = 0;
    uint64_t ng = rad_src_count_suffix(s, ".gguf", &gi);
    uint64_t ns = rad_src_count_suffix(s, ".safetensors", &si);
    char list[384];
    if (ng == 1) {
        RadIn in;
        int rc = rad_src_read(s, s->entries[gi].name, &in, RAD_SRC_NO_LIMIT, e);
        if (rc) return rc;
        rc = rad_gguf_load(&in, m, e);
        if (!m->path[0]) snprintf(m->path, sizeof m->path, "%s", s->path);
        return rc;
    }
    if (ng > 1) {
        rad_src_describe(s, list, sizeof list, 8);
        return rad_err_set(e, RAD_E_ARG, "%s: holds %" PRIu64 " .gguf files, pick one (holds: %s)",
                           s->path, ng, list);
    }
    if (rad_src_has(s, "model.safetensors.index.json")) {
        snprintf(m->format, sizeof m->format, "safetensors");
        snprintf(m->path, sizeof m->path, "%s", s->path);
        return rad_hf_load_weights(s, m, e);
    }
    if (ns == 1) {
        RadIn in;
        int rc = rad_src_read(s, s->entries[si].name, &in, RAD_SRC_NO_LIMIT, e);
        if (rc) return rc;
        return rad_safetensors_load(&in, m, e);
    }
    rad_src_describe(s, list, sizeof list, 8);
    if (ns > 1)
        return rad_err_set(e, RAD_E_ARG, "%s: holds %" PRIu64 " .safetensors files but no "
                           "config.json or model.safetensors.index.json (holds: %s)",
                           s->path, ns, list);
    return rad_err_set(e, RAD_E_NOTFOUND, "%s: no config.json, .gguf or .safetensors file (holds: %s)",
                       s->path, list);
}
