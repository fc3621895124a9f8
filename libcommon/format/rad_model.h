/* rad_model.h — one view of what an input holds, whatever its format (.rad, GGUF, a
 * safetensors file, a Hugging Face folder, any of them inside an archive). Readers fill it;
 * rad-info prints it; rad-convert reads tensors through it.
 *
 * Shapes are row-major in PyTorch order: shape[0] outermost, shape[rank-1] contiguous.
 * (GGUF stores ne[] innermost-first; the GGUF reader reverses it.) */
#ifndef RAD_MODEL_H
#define RAD_MODEL_H

#include "abi/rad_meta.h"
#include "abi/rad_types.h"
#include "libcommon/base/rad_err.h"
#include "libcommon/base/rad_in.h"
#include "libcommon/base/rad_dict.h"

#define RAD_MAX_PLANES 4

typedef struct RadPlane {
    char name[16];          /* "data" for a one-plane tensor; "codes", "scale", ... */
    uint64_t offset;        /* bytes from the start of the source's data area */
    uint64_t nbytes;        /* logical (uncompressed) bytes */
    uint64_t stored_bytes;  /* bytes in the file (== nbytes unless compressed) */
    uint32_t compression;   /* 0 none, 1 zstd (.rad only) */
    uint64_t checksum;      /* XXH3-64 of the logical bytes (.rad only; 0 elsewhere) */
    const uint8_t *data;    /* mapped stored bytes, or NULL (stream input) */
} RadPlane;

typedef struct RadTensor {
    char *name;                   /* as stored in the source */
    RadEnc enc;
    uint32_t rank;
    uint64_t shape[RAD_MAX_RANK]; /* row-major, shape[rank-1] innermost */
    uint32_t n_planes;
    RadPlane planes[RAD_MAX_PLANES];
    int src;                      /* index into RadModelFile.ins (sharded safetensors) */
} RadTensor;

/* What a mapped file was when it was opened, with its descriptor kept, so a server can see the
 * file change under the mapping (docs/TOOLS.md, "A file that changes under the server"). */
typedef struct RadFileWatch {
    int on;              /* 1: fd is open and the fields below are the file's at open */
    int fd;
    uint64_t size, nlink;
    int64_t mtime_ns, ctime_ns;
} RadFileWatch;
struct stat;
/* Takes fd (closed by rad_model_free) and the identity rad_model_check_unchanged compares. */
void rad_file_watch_init(RadFileWatch *w, int fd, const struct stat *st);

typedef struct RadModelFile {
    char format[16];     /* "rad", "gguf", "safetensors", "hf" */
    char path[256];      /* what was opened, for messages */
    uint32_t version;    /* format version (GGUF 2/3, .rad major) */
    uint64_t data_offset;/* start of the data area in ins[0] (single-file formats) */
    uint32_t alignment;  /* data alignment (GGUF general.alignment, .rad header) */
    RadDict meta;          /* "model.*" keys (docs/FORMAT.md) + free keys */
    RadDict tok;           /* "tokenizer.*" keys; n == 0 when the input holds no tokenizer */
    RadDict chat;          /* "chat.*" keys; n == 0 when none */
    RadDict raw;           /* the source's own metadata, verbatim (GGUF kv, flattened config) */
    RadTensor *tensors;  /* [n_tensors] */
    uint64_t n_tensors;
    RadIn *ins;          /* [n_ins] the sources tensors point into */
    int n_ins;
    RadFileWatch watch;  /* the mapped file's descriptor and identity (a regular file by path) */
    uint64_t *name_ix;   /* [name_cap] open addressing by name: tensor index + 1, 0 empty */
    uint64_t name_cap;   /* a power of two, at least twice n_tensors (0: no index yet) */
    uint64_t id;         /* .rad: the header's XXH3-64 (its prefix's header_checksum), which covers the
                            metadata and every plane's checksum: the container's identity, as rad-info
                            shows it and a tuning table is keyed by (0 for other formats) */
    void **owned;        /* [n_owned] planes a reader made rather than mapped (a per-tensor fp8 scale
                            spread over its 128x128 grid), freed with m, kept by rad_model_release_data */
    int n_owned;
} RadModelFile;

/* Opens any supported input by path ("-" reads stdin) and fills m. Detects the kind from
 * magic bytes or, for a directory, from config.json / *.safetensors; archives by libarchive. */
int rad_model_open(const char *path, RadModelFile *m, RadErr *e);
void rad_model_free(RadModelFile *m);

/* From an opened source (libcommon/io/rad_src.h). */
struct RadSrc;
/* Loads the model the source holds into m (which starts zeroed; the caller frees it with
 * rad_model_free, also on failure): config.json → rad_hf_load; else exactly one .gguf →
 * rad_gguf_load; else exactly one .safetensors → rad_safetensors_load. */
int rad_model_load_src(struct RadSrc *s, RadModelFile *m, RadErr *e);

/* RAD_OK while the file m was mapped from is as it was at open: same size and mtime, and the
 * same ctime unless only the link count moved with it (a rename over the path, an unlink or a
 * hard link leave the bytes alone; the old inode stays mapped). Otherwise RAD_E_IO, one line:
 * "FILE: changed while mapped (--mmap): ...". RAD_OK when nothing is watched. */
int rad_model_check_unchanged(RadModelFile *m, RadErr *e);

/* The exit status of a process whose mapped model changed or was truncated under it (the SIGBUS
 * guard's, and the server's after it fails closed): non-zero, so systemd restarts it. */
#define RAD_EXIT_MODEL_CHANGED 3
/* Catches SIGBUS inside m's mapping (ins[0]: a read past a truncation): the handler writes one
 * line, "PROG: FILE: <why>", with write(2) and _exit()s RAD_EXIT_MODEL_CHANGED; a fault anywhere
 * else goes to the handler there was before (or kills as SIGBUS does). Returns a slot for
 * rad_model_unguard, or -1 when nothing is mapped or the table (8 slots) is full. */
int rad_model_guard(const RadModelFile *m, const char *why);
void rad_model_unguard(int slot);
/* The same over every mapped input of m (a folder's shards, too), for a one-shot tool that reads
 * them until it exits; the line names the input that faulted. Returns how many are guarded. */
int rad_model_guard_inputs(const RadModelFile *m, const char *why);
/* An async-signal-safe function the guard's handler calls before its line and exit (rad-convert
 * removes its temporary). */
void rad_model_guard_on_fault(void (*fn)(void));
/* Drops the mapping of every input and the watch: plane data pointers become NULL. For a caller
 * that has copied what it needs (the engine's default mode), so the file is read exactly once. */
void rad_model_release_data(RadModelFile *m);

/* Fills the ABI struct from m->meta ("model.*" keys). Pointers stay owned by m. */
int rad_model_meta(const RadModelFile *m, RadModelMeta *out, RadErr *e);

/* Helpers shared by the readers. */
/* n zeroed bytes that m owns until rad_model_free (a plane's data a reader computes); NULL and
 * RAD_E_NOMEM, one line naming m's path, when there is no memory. */
void *rad_model_alloc(RadModelFile *m, size_t n, RadErr *e);
int rad_model_add_tensor(RadModelFile *m, RadTensor *t, RadErr *e); /* takes t->name */
const RadTensor *rad_model_find(const RadModelFile *m, const char *name);
/* Removes the tensors whose drop[i] is set (the rest keep their order) and rebuilds the name
 * index. The dropped tensors' names are freed; their bytes stay where the inputs hold them. */
int rad_model_drop_tensors(RadModelFile *m, const uint8_t *drop, RadErr *e);
/* Gives tensor i another name (a module's tensors taken in under the container's names) and
 * rebuilds the name index; RAD_E_FORMAT, nothing changed, when a tensor already has the name. */
int rad_model_rename_tensor(RadModelFile *m, uint64_t i, const char *name, RadErr *e);
/* A tensor of several planes is one the format defines: block-scaled f8_e4m3 (abi/rad_types.h),
 * rank 2 [N, K], planes "codes" (N·K bytes) and "scale" (4·⌈N/128⌉·⌈K/128⌉ bytes), in that order.
 * names[i] and nbytes[i] describe plane i. RAD_OK for one plane (its size is rad_tensor_bytes'
 * check); RAD_E_FORMAT, one line naming the tensor and what is wrong, otherwise. */
int rad_tensor_planes_check(const char *tname, RadEnc enc, uint32_t rank, const uint64_t *shape, uint32_t n_planes,
                            const char *const *names, const uint64_t *nbytes, RadErr *e);
/* Whether t is a block-scaled f8_e4m3 weight (two planes). */
static inline int rad_tensor_is_f8_blocks(const RadTensor *t) { return t->enc == RAD_ENC_F8_E4M3 && t->n_planes == 2; }

/* Element count and byte size of an encoded tensor with overflow checks; RAD_E_FORMAT when the
 * innermost dim is not a whole number of blocks or the product overflows u64. */
int rad_tensor_bytes(RadEnc enc, uint32_t rank, const uint64_t *shape, uint64_t *n_elems,
                     uint64_t *n_bytes, const char *tname, RadErr *e);

#endif
