/* rad_src.h — a "source": a folder of files, or an archive (.tar, .tar.gz/.tgz, .tar.zst, .zip,
 * detected by content) read through libarchive without unpacking it to disk.
 *
 * Members are named by '/'-separated paths relative to the source. An archive whose members
 * all sit under one top-level folder ("SmolLM2/config.json") is seen from inside that folder
 * ("config.json"). Names with ".." components or absolute paths make an archive unreadable. */
#ifndef RAD_SRC_H
#define RAD_SRC_H

#include <stdbool.h>
#include <stdint.h>

#include "libcommon/base/rad_err.h"
#include "libcommon/base/rad_in.h"

/* No size limit for rad_src_read. */
#define RAD_SRC_NO_LIMIT UINT64_MAX
/* Folders are listed this deep, with at most this many files. */
#define RAD_SRC_MAX_DEPTH 8
#define RAD_SRC_MAX_FILES 100000
/* Archives: .json/.jinja members up to this size are kept in memory from the listing pass, up
 * to RAD_SRC_CACHE_TOTAL bytes in all. */
#define RAD_SRC_CACHE_MEMBER (64ull << 20)
#define RAD_SRC_CACHE_TOTAL (256ull << 20)
/* Archive bombs: past the first RAD_SRC_RATIO_FREE bytes, a member may not inflate to more
 * than RAD_SRC_MAX_RATIO times the archive bytes read for it (nor may a compressed archive's
 * whole stream); a member whose declared size could never pass is refused before any is read.
 * Real checkpoints compress 1-4:1. */
#define RAD_SRC_MAX_RATIO 200u
#define RAD_SRC_RATIO_FREE (1ull << 20)

typedef struct RadSrcEntry {
    char *name;      /* relative path: "config.json", "onnx/model.onnx" */
    char *member;    /* archive: the member's name as stored ("SmolLM2/config.json"); else NULL */
    uint64_t size;   /* bytes (UINT64_MAX when the archive does not say) */
    uint64_t ordinal;/* archive: header index of the member, for re-reading; else 0 */
    uint8_t *cache;  /* archive: a small .json/.jinja member's bytes, read while listing so the
                        metadata costs no extra pass over a compressed archive; else NULL */
} RadSrcEntry;

typedef struct RadSrc {
    char *path;            /* what was opened */
    char *stem;            /* the model folder's name: the folder, the archive's top-level folder,
                              or the archive's file name without its extensions */
    bool is_archive;       /* false: a folder */
    RadSrcEntry *entries;  /* [n] regular files: sorted by name (folder) or in archive order */
    uint64_t n;
    void *ar;              /* archive: a struct archive * positioned after member ar_pos, or NULL */
    uint64_t ar_pos;       /* ordinal of the last header read through ar */
    void *ar_fd;           /* archive: the reader's file state (its raw byte count) */
    uint64_t ar_size;      /* archive: its size on disk */
    const RadSrcEntry **by_name; /* [n] entries sorted by name, for lookups */
} RadSrc;

/* Opens a folder, or a regular file that libarchive recognises as a supported archive (anything
 * else: RAD_E_UNSUPPORTED). Lists the members up front. On failure s holds nothing (it may still
 * be passed to rad_src_free). */
int rad_src_open(RadSrc *s, const char *path, RadErr *e);
void rad_src_free(RadSrc *s);

/* The member called rel, or NULL. */
const RadSrcEntry *rad_src_find(const RadSrc *s, const char *rel);
bool rad_src_has(const RadSrc *s, const char *rel);
/* How many members' names end with suffix (".gguf"); *first gets the first one's index. */
uint64_t rad_src_count_suffix(const RadSrc *s, const char *suffix, uint64_t *first);
/* Writes "a, b, c (and N more)" listing up to max members into buf, for messages. */
void rad_src_describe(const RadSrc *s, char *buf, size_t size, int max);

/* Opens member rel as a RadIn: a folder's file is mmapped (name: its path; anything but a
 * regular file, a FIFO say, is refused at once, never waited on); an archive's member is read
 * into owned memory when max_bytes is bounded (JSON files), else inflated into an unlinked
 * temporary file (in $TMPDIR, else /tmp) and mmapped, so weights cost disk, not memory (name:
 * "archive.tar:member"). Members larger than max_bytes are refused with RAD_E_LIMIT, bombs
 * (RAD_SRC_MAX_RATIO) with RAD_E_LIMIT naming the member; a missing one is RAD_E_NOTFOUND. */
int rad_src_read(RadSrc *s, const char *rel, RadIn *out, uint64_t max_bytes, RadErr *e);


/* True when path is a regular file libarchive reads as a supported archive. */
bool rad_src_looks_like_archive(const char *path);

#endif
