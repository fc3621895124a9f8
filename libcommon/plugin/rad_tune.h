/* rad_tune.h — the kernel tuning table (docs/TUNE.md): a small versioned text file that says,
 * per declared op and bucket of rows, which library, kernel variant and knob values serve it,
 * keyed by what it was measured on (the container, the kernel libraries and their versions, the
 * CPU, the options). rad-tune writes it; `radiance --tune FILE` reads it and the selector takes
 * its choices where they are valid (rule 1, docs/PLUGINS.md "How the selector chooses").
 *
 * Reading is strict: every failure is one line naming the file and the line. */
#ifndef RAD_TUNE_H
#define RAD_TUNE_H

#include <stdint.h>
#include <stdio.h>

#include "abi/rad_arch.h"
#include "abi/rad_kernels.h"
#include "libcommon/base/rad_err.h"

#define RAD_TUNE_VERSION 1    /* the first line: "radiance-tune 1" */
#define RAD_TUNE_MAX_LIBS 16
#define RAD_TUNE_NAME 64      /* names: ops, libraries, variants, knobs (63 bytes and a NUL) */

typedef struct RadTuneLib {
    char name[RAD_TUNE_NAME];     /* RadPluginInfo.name */
    char version[RAD_TUNE_NAME];  /* RadPluginInfo.version ("-" when the plugin gives none) */
} RadTuneLib;

/* What a table was measured on: a run uses it only when its own key is the same. */
typedef struct RadTuneKey {
    uint64_t container;           /* the container's id: XXH3-64 of its header (rad-info's "id") */
    RadTuneLib libs[RAD_TUNE_MAX_LIBS]; /* the kernel libraries, in preference (--kernels) order */
    int n_libs;
    char cpu_model[128];          /* /proc/cpuinfo's model name ("unknown" when it has none) */
    char cpu_flags[256];          /* the flags that matter (RAD_TUNE_CPU_FLAGS), space-separated, "-": none */
    uint32_t max_tok, max_seqs, ctx; /* the step bounds as resolved at open */
    double max_tolerance;         /* as resolved (0: 1e-3) */
    int deterministic;            /* 0 or 1 */
    uint32_t threads;             /* kernel threads, resolved (never 0) */
    char kv_dtype[16];            /* the KV cache's encoding name: f32, f16, bf16 */
} RadTuneKey;

/* One choice: op `op` (its declared index, name and parameter hash) over rows [lo, hi]. */
typedef struct RadTuneEntry {
    int32_t op;                   /* declared index (the order the plugin declared its ops) */
    char name[RAD_TUNE_NAME];     /* its op name: an entry whose index now names another op is stale */
    uint64_t params;              /* rad_tune_params_hash of its declared parameters */
    int64_t lo, hi;               /* the bucket: rows lo..hi */
    char lib[RAD_TUNE_NAME], variant[RAD_TUNE_NAME];
    uint64_t ns;                  /* the measured time of one call, nanoseconds (0: not measured) */
    uint32_t n_knobs;             /* knobs set (the rest take their defaults) */
    char knob[RAD_KNOB_MAX][RAD_TUNE_NAME];
    int64_t val[RAD_KNOB_MAX];
    int line;                     /* the line it was read from (0: made in memory) */
} RadTuneEntry;

typedef struct RadTuneTable {
    char path[256];               /* where it was read from, for messages */
    RadTuneKey key;
    RadTuneEntry *e;              /* [n] sorted by (op, lo) once read */
    int n, cap;
} RadTuneTable;

/* Reads and checks a table file into t (zeroed first; free with rad_tune_free, also on failure).
 * RAD_E_FORMAT with "PATH:LINE: what is wrong" (RAD_E_IO when it cannot be read). */
int rad_tune_read(const char *path, RadTuneTable *t, RadErr *e);
/* The same from bytes in memory; `name` stands for the file in messages. */
int rad_tune_parse(const char *name, const char *text, size_t len, RadTuneTable *t, RadErr *e);
/* Adds an entry (copied), refusing one whose rows overlap an entry of the same op. */
int rad_tune_add(RadTuneTable *t, const RadTuneEntry *en, RadErr *e);
/* Writes the header lines of a table with key k (its first line through `options`). */
void rad_tune_write_key(const RadTuneKey *k, FILE *f);
/* Writes t in the file format (what rad_tune_parse reads back equal). */
int rad_tune_write(const RadTuneTable *t, FILE *f, RadErr *e);
/* Writes t to path through a temporary beside it and a rename. */
int rad_tune_write_file(const RadTuneTable *t, const char *path, RadErr *e);
void rad_tune_free(RadTuneTable *t);

/* The entry of op index `op` whose rows cover [lo, hi], or NULL. */
const RadTuneEntry *rad_tune_find(const RadTuneTable *t, int32_t op, int64_t lo, int64_t hi);

/* 0 when `table` (a table's key) and `here` (this run's) are the same; else 1 with the first
 * difference in why: "container 0123456789abcdef, this model is fedcba9876543210". */
int rad_tune_key_diff(const RadTuneKey *table, const RadTuneKey *here, char *why, size_t n);

/* This machine's CPU as a key names it: the model name and the flags of RAD_TUNE_CPU_FLAGS it
 * has, from /proc/cpuinfo. */
#define RAD_TUNE_CPU_FLAGS "sse4_2 avx f16c fma avx2 avx512f avx512bw avx512vl avx512_vnni avx512_bf16 avx_vnni amx_tile " \
                           "asimd asimddp i8mm sve sve2"
void rad_tune_cpu(char *model, size_t model_n, char *flags, size_t flags_n);

/* A stable hash of an op's declared name and parameters (names, kinds, values): an entry
 * whose op at the same index has other parameters is stale. */
uint64_t rad_tune_params_hash(const char *op, const RadParam *p, uint32_t n);

#endif
