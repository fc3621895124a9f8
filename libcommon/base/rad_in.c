#include "libcommon/base/rad_in.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void set_name(RadIn *in, const char *name) {
    snprintf(in->name, sizeof in->name, "%s", name ? name : "<input>");
}

void rad_in_init_mem(RadIn *in, const void *data, uint64_t size, const char *name) {
    memset(in, 0, sizeof *in);
    set_name(in, name);
    in->data = data;
    in->size = size;
    in->kind = RAD_IN_MEM;
    in->fd = -1;
}

void rad_in_init_owned(RadIn *in, void *data, uint64_t size, const char *name) {
    rad_in_init_mem(in, data, size, name);
    in->owned = data;
}

int rad_open_regular(const char *path, struct stat *st, RadErr *e) {
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) return rad_err_set(e, RAD_E_IO, "%s: cannot open: %s", path, strerror(errno)), -1;
    struct stat s;
    if (fstat(fd, &s) != 0 || !S_ISREG(s.st_mode)) {
        close(fd);
        return rad_err_set(e, RAD_E_IO, "%s: not a regular file%s", path,
                           S_ISFIFO(s.st_mode) ? " (a FIFO: give '-' to read a pipe)" : S_ISDIR(s.st_mode) ? " (a directory)" : ""), -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int err = errno;
        close(fd);
        return rad_err_set(e, RAD_E_IO, "%s: fcntl: %s", path, strerror(err)), -1;
    }
    if (st) *st = s;
    return fd;
}

int rad_in_map_file(RadIn *in, const char *path, struct stat *st, int *fd_out, RadErr *e) {
    memset(in, 0, sizeof *in);
    set_name(in, path);
    in->fd = -1;
    struct stat s;
    int fd = rad_open_regular(path, &s, e);
    if (fd < 0) return e ? e->code : RAD_E_IO;
    in->kind = RAD_IN_MMAP;
    in->size = (uint64_t)s.st_size;
    in->data = (const uint8_t *)"";
    if (s.st_size > 0) {
        void *p = mmap(NULL, (size_t)s.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            close(fd);
            return rad_err_set(e, RAD_E_IO, "%s: cannot mmap: %s", path, strerror(err));
        }
        in->data = p;
    }
    if (st) *st = s;
    if (fd_out) *fd_out = fd;
    else close(fd);
    return RAD_OK;
}

int rad_in_open_file(RadIn *in, const char *path, RadErr *e) { return rad_in_map_file(in, path, NULL, NULL, e); }

void rad_in_init_fd(RadIn *in, int fd, const char *name) {
    memset(in, 0, sizeof *in);
    set_name(in, name);
    in->fd = fd;
    in->size = UINT64_MAX;
    in->kind = RAD_IN_STREAM;
}

void rad_in_init_fn(RadIn *in, RadInReadFn fn, void *user, const char *name) {
    rad_in_init_fd(in, -1, name);
    in->read_fn = fn;
    in->read_user = user;
}

/* One read from a stream; -1 with e set on error. */
static long stream_read(RadIn *in, void *dst, size_t n, RadErr *e) {
    if (in->read_fn) return in->read_fn(in->read_user, dst, n, e);
    for (;;) {
        ssize_t r = read(in->fd, dst, n);
        if (r >= 0) return (long)r;
        if (errno == EINTR) continue;
        rad_err_set(e, RAD_E_IO, "%s: read failed: %s", in->name, strerror(errno));
        return -1;
    }
}

int rad_in_slurp_fd(RadIn *in, int fd, const char *name, uint64_t max_bytes, RadErr *e) {
    RadIn s;
    rad_in_init_fd(&s, fd, name);
    uint64_t cap = 1 << 20, len = 0;
    uint8_t *buf = malloc(cap);
    if (!buf) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", name);
    for (;;) {
        if (len == cap) {
            if (cap >= max_bytes) {
                free(buf);
                return rad_err_set(e, RAD_E_LIMIT, "%s: input larger than %llu bytes", name,
                                   (unsigned long long)max_bytes);
            }
            uint64_t nc = cap * 2 > max_bytes ? max_bytes : cap * 2;
            uint8_t *nb = realloc(buf, nc);
            if (!nb) {
                free(buf);
                return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", name);
            }
            buf = nb;
            cap = nc;
        }
        long r = stream_read(&s, buf + len, cap - len, e);
        if (r < 0) {
            free(buf);
            return e ? e->code : RAD_E_IO;
        }
        if (r == 0) break;
        len += (uint64_t)r;
    }
    rad_in_init_owned(in, buf, len, name);
    return RAD_OK;
}

void rad_in_close(RadIn *in) {
    if (!in) return;
    if (in->kind == RAD_IN_MMAP && in->data && in->size > 0) munmap((void *)in->data, in->size);
    free(in->owned);
    memset(in, 0, sizeof *in);
    in->fd = -1;
}

bool rad_in_is_mapped(const RadIn *in) { return in->kind != RAD_IN_STREAM; }

uint64_t rad_in_remaining(const RadIn *in) {
    if (in->kind == RAD_IN_STREAM) return UINT64_MAX;
    return in->pos <= in->size ? in->size - in->pos : 0;
}

static int truncated(RadIn *in, const char *what, RadErr *e) {
    return rad_err_set(e, RAD_E_FORMAT, "%s: truncated at byte %llu (reading %s)", in->name,
                       (unsigned long long)in->pos, what ? what : "data");
}

int rad_in_read(RadIn *in, void *dst, size_t n, const char *what, RadErr *e) {
    if (in->kind != RAD_IN_STREAM) {
        if (n > rad_in_remaining(in)) return truncated(in, what, e);
        if (n) memcpy(dst, in->data + in->pos, n);
        in->pos += n;
        return RAD_OK;
    }
    size_t got = 0;
    while (got < n) {
        long r = stream_read(in, (uint8_t *)dst + got, n - got, e);
        if (r < 0) return e ? e->code : RAD_E_IO;
        if (r == 0) return truncated(in, what, e);
        got += (size_t)r;
        in->pos += (uint64_t)r;
    }
    return RAD_OK;
}

int rad_in_skip(RadIn *in, uint64_t n, const char *what, RadErr *e) {
    if (in->kind != RAD_IN_STREAM) {
        if (n > rad_in_remaining(in)) return truncated(in, what, e);
        in->pos += n;
        return RAD_OK;
    }
    uint8_t tmp[65536];
    while (n > 0) {
        size_t k = n < sizeof tmp ? (size_t)n : sizeof tmp;
        int rc = rad_in_read(in, tmp, k, what, e);
        if (rc) return rc;
        n -= k;
    }
    return RAD_OK;
}

int rad_in_u8(RadIn *in, uint8_t *v, const char *what, RadErr *e) {
    return rad_in_read(in, v, 1, what, e);
}

int rad_in_u32(RadIn *in, uint32_t *v, const char *what, RadErr *e) {
    uint8_t b[4];
    int rc = rad_in_read(in, b, 4, what, e);
    if (rc) return rc;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return RAD_OK;
}

int rad_in_u64(RadIn *in, uint64_t *v, const char *what, RadErr *e) {
    uint8_t b[8];
    int rc = rad_in_read(in, b, 8, what, e);
    if (rc) return rc;
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = x << 8 | b[i];
    *v = x;
    return RAD_OK;
}

int rad_in_read_alloc(RadIn *in, uint64_t n, char **out, const char *what, RadErr *e) {
    *out = NULL;
    if (n >= SIZE_MAX / 2) return truncated(in, what, e);
    if (in->kind != RAD_IN_STREAM) {
        if (n > rad_in_remaining(in)) return truncated(in, what, e);
        char *p = malloc((size_t)n + 1);
        if (!p) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory reading %s", in->name, what);
        memcpy(p, in->data + in->pos, (size_t)n);
        p[n] = 0;
        in->pos += n;
        *out = p;
        return RAD_OK;
    }
    /* stream: grow with what actually arrives */
    uint64_t cap = n < 65536 ? n : 65536, len = 0;
    char *p = malloc((size_t)cap + 1);
    if (!p) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory reading %s", in->name, what);
    while (len < n) {
        if (len == cap) {
            uint64_t nc = cap * 2 < n ? cap * 2 : n;
            char *np = realloc(p, (size_t)nc + 1);
            if (!np) {
                free(p);
                return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory reading %s", in->name, what);
            }
            p = np;
            cap = nc;
        }
        int rc = rad_in_read(in, p + len, (size_t)(cap - len), what, e);
        if (rc) {
            free(p);
            return rc;
        }
        len = cap;
    }
    p[n] = 0;
    *out = p;
    return RAD_OK;
}

const uint8_t *rad_in_map(const RadIn *in, uint64_t off, uint64_t n, const char *what, RadErr *e) {
    if (in->kind == RAD_IN_STREAM) {
        rad_err_set(e, RAD_E_UNSUPPORTED, "%s: %s: cannot map a stream", in->name, what);
        return NULL;
    }
    if (off > in->size || n > in->size - off) {
        rad_err_set(e, RAD_E_FORMAT, "%s: %s: bytes [%llu, +%llu) past end of file (%llu bytes)",
                    in->name, what, (unsigned long long)off, (unsigned long long)n,
                    (unsigned long long)in->size);
        return NULL;
    }
    return in->data + off;
}
