/* rad_container.h — the .rad container (docs/FORMAT.md): a writer that streams to a file
 * (through a temporary renamed into place, so a failed write leaves nothing) or to stdout, and
 * a reader that maps a file or reads the header from a pipe. */
#ifndef RAD_CONTAINER_H
#define RAD_CONTAINER_H

#include "libcommon/format/rad_model.h"

#define RAD_MAGIC "RADIANCE"
#define RAD_VERSION_MAJOR 1u
#define RAD_VERSION_MINOR 0u
#define RAD_PREFIX_BYTES 64u
#define RAD_HEADER_MAX ((uint64_t)1 << 30)  /* a larger header is refused, not allocated */
#define RAD_DEFAULT_ALIGN 64u

enum { RAD_COMP_NONE = 0, RAD_COMP_ZSTD = 1 };

typedef struct RadWriteOpts {
    uint32_t alignment;      /* power of two in [8, 1 MiB]; 0 = RAD_DEFAULT_ALIGN */
    int zstd_level;          /* 0 = no compression; 1..19 compresses each plane with zstd */
    uint64_t compress_min;   /* planes smaller than this stay raw (0 = 4096) */
} RadWriteOpts;

typedef struct RadPlaneSrc {
    const char *name;        /* "data", "codes", "scale" */
    const void *data;        /* logical bytes, borrowed until rad_writer_finish */
    uint64_t nbytes;
} RadPlaneSrc;

typedef struct RadWriter RadWriter;

/* path "-" writes to stdout. A file is written as "<path>.tmp.XXXXXX" beside it and renamed
 * on success; an existing path is replaced only when overwrite is set. */
int rad_writer_init(RadWriter **w, const char *path, const RadWriteOpts *o, int overwrite, RadErr *e);
/* Which table: 0 meta, 1 tokenizer, 2 chat. The table is copied. */
int rad_writer_set_kv(RadWriter *w, int which, const RadDict *kv, RadErr *e);
int rad_writer_add_tensor(RadWriter *w, const char *name, RadEnc enc, uint32_t rank,
                          const uint64_t *shape, uint32_t n_planes, const RadPlaneSrc *planes,
                          RadErr *e);
/* Checksums (and compresses), writes header and data, renames into place. */
int rad_writer_finish(RadWriter *w, RadErr *e);
/* Frees; removes the temporary if finish did not succeed. */
void rad_writer_free(RadWriter *w);
/* The temporary being written ("" for stdout), for a caller's signal handler to remove. */
const char *rad_writer_tmp_path(const RadWriter *w);

/* Writes a whole RadModelFile (every table and tensor, planes as the source holds them). */
int rad_model_write(const RadModelFile *m, const char *path, const RadWriteOpts *o, int overwrite,
                    RadErr *e);

/* Reads the prefix and header from in (MOVED into m, success or not). On a mapped source every
 * plane is bounds-checked against the file and plane->data points at its stored bytes. */
int rad_container_load(RadIn *in, RadModelFile *m, RadErr *e);

/* The logical bytes of one plane into dst (plane->nbytes), decompressing if needed. */
int rad_plane_read(const RadModelFile *m, const RadTensor *t, uint32_t plane, void *dst, RadErr *e);

/* Verifies one mapped plane's checksum in place (the code --check runs); RAD_E_CHECKSUM naming
 * the file, tensor and plane on a mismatch. */
int rad_plane_verify(const RadModelFile *m, const RadTensor *t, uint32_t plane, RadErr *e);
/* rad_plane_read, and with verify the checksum of the bytes written, in the same pass (chunks
 * hashed while in cache): RAD_E_CHECKSUM naming the file, tensor and plane on a mismatch. */
int rad_plane_load(const RadModelFile *m, const RadTensor *t, uint32_t plane, void *dst, int verify, RadErr *e);

/* Verifies every plane's checksum; on a stream, reads the data area in order. Calls report for
 * each plane (ok != 0 when it matched); returns RAD_OK when all matched, RAD_E_CHECKSUM when any
 * did not (e names the first), or another status when the data could not be read. */
typedef void (*RadCheckFn)(void *user, const RadTensor *t, const RadPlane *p, int ok);
int rad_container_check(RadModelFile *m, RadCheckFn report, void *user, RadErr *e);

#endif
