/* rad_in.h — a byte source that parsers read sequentially, with bounds checks.
 *
 * Three kinds: a memory buffer (borrowed or owned), a mmapped file, and a stream (a pipe or
 * stdin, or a libarchive member read through a callback). Parsers call rad_in_read/skip and
 * never index raw memory; a short source is reported as "truncated" with the source's name.
 * On mapped kinds rad_in_map gives zero-copy access to any range. */
#ifndef RAD_IN_H
#define RAD_IN_H

#include <stdbool.h>
#include <stdint.h>

#include "libcommon/base/rad_err.h"

/* Reads up to n bytes into dst; returns bytes read (0 at end), or -1 on error (e filled). */
typedef long (*RadInReadFn)(void *user, void *dst, size_t n, RadErr *e);

typedef struct RadIn {
    char name[256];        /* shown in errors: a path, "<stdin>", "a.tar:dir/x.safetensors" */
    const uint8_t *data;   /* mapped kinds: all bytes; NULL for a stream */
    uint64_t size;         /* mapped kinds: byte count; stream: UINT64_MAX (unknown) */
    uint64_t pos;          /* bytes consumed so far */
    int kind;              /* RAD_IN_MEM, RAD_IN_MMAP, RAD_IN_STREAM */
    int fd;                /* stream from an fd: the fd (not closed by rad_in_close) */
    RadInReadFn read_fn;   /* stream from a callback */
    void *read_user;
    void *owned;           /* buffer freed by rad_in_close (owned memory) */
} RadIn;

enum { RAD_IN_MEM = 0, RAD_IN_MMAP = 1, RAD_IN_STREAM = 2 };

/* A borrowed buffer (the caller keeps it alive). */
void rad_in_init_mem(RadIn *in, const void *data, uint64_t size, const char *name);
/* Takes ownership of a malloc'd buffer. */
void rad_in_init_owned(RadIn *in, void *data, uint64_t size, const char *name);
struct stat;
/* Opens a path read-only, requiring a regular file: a FIFO, device or directory is refused at
 * once (never a blocking open). Returns the fd, filling *st when non-NULL; -1 with e set. Every
 * tool opens a named input through this (only '-' reads a pipe). */
int rad_open_regular(const char *path, struct stat *st, RadErr *e);
/* mmaps a regular file read-only. Fails with RAD_E_IO naming the path. */
int rad_in_open_file(RadIn *in, const char *path, RadErr *e);
/* The same, and hands back the descriptor (the caller closes it) and the fstat that sized the
 * map, for a caller that watches the file's identity afterwards (rad_model_open.c). */
int rad_in_map_file(RadIn *in, const char *path, struct stat *st, int *fd, RadErr *e);
/* A stream from an fd (e.g. 0 for stdin). */
void rad_in_init_fd(RadIn *in, int fd, const char *name);
/* A stream from a callback. */
void rad_in_init_fn(RadIn *in, RadInReadFn fn, void *user, const char *name);
/* Reads a whole fd (a pipe) into owned memory, refusing more than max_bytes. */
int rad_in_slurp_fd(RadIn *in, int fd, const char *name, uint64_t max_bytes, RadErr *e);
void rad_in_close(RadIn *in);

bool rad_in_is_mapped(const RadIn *in);
/* Bytes left, or UINT64_MAX when the source is a stream of unknown length. */
uint64_t rad_in_remaining(const RadIn *in);

/* Exact reads: fewer bytes than asked is RAD_E_FORMAT "<name>: truncated at byte N (what)".
 * `what` names the field being read, for the message. */
int rad_in_read(RadIn *in, void *dst, size_t n, const char *what, RadErr *e);
int rad_in_skip(RadIn *in, uint64_t n, const char *what, RadErr *e);
int rad_in_u8(RadIn *in, uint8_t *v, const char *what, RadErr *e);
int rad_in_u32(RadIn *in, uint32_t *v, const char *what, RadErr *e); /* little-endian */
int rad_in_u64(RadIn *in, uint64_t *v, const char *what, RadErr *e); /* little-endian */
/* Reads n bytes into a fresh malloc'd buffer with a NUL after them. On a stream the buffer
 * grows as bytes arrive, so a hostile length cannot force a large allocation up front; on a
 * mapped source n is checked against what remains first. */
int rad_in_read_alloc(RadIn *in, uint64_t n, char **out, const char *what, RadErr *e);

/* Mapped kinds: a pointer to [off, off+n), or NULL with RAD_E_FORMAT if out of range. */
const uint8_t *rad_in_map(const RadIn *in, uint64_t off, uint64_t n, const char *what, RadErr *e);

#endif
