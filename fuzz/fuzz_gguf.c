/* libFuzzer target: the GGUF reader and the dequantisers, on arbitrary bytes. Seeds:
 * fuzz/corpus/fuzz_gguf/ (the gguf-package fixture and small variants, written by
 * scripts/gen-gguf-fixtures.py; many_*.gguf: thousands of keys or tensors, the structures whose
 * duplicate checks were quadratic).
 *
 * The same bytes are also read as a stream (header only), a few bytes per read. An input that
 * starts with "MANY" is instead expanded into a file of many keys and tensors: every 4 bytes
 * after it name one key and one tensor, so the fuzzer explores up to 4,096 entries with
 * colliding and repeated names cheaply; a load must succeed exactly when no name repeats. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/format/rad_gguf.h"
#include "libcommon/tensor/rad_enc.h"

typedef struct Mem {
    const uint8_t *p;
    size_t n, pos;
} Mem;

/* Hands out a few bytes at a time, so stream reads straddle every field boundary. */
static long mem_read(void *user, void *dst, size_t n, RadErr *e) {
    (void)e;
    Mem *s = user;
    size_t k = s->n - s->pos;
    if (k > n) k = n;
    if (k > 11) k = 11;
    memcpy(dst, s->p + s->pos, k);
    s->pos += k;
    return (long)k;
}

typedef struct Buf {
    uint8_t *p;
    size_t n, cap;
} Buf;

static void put(Buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        size_t nc = (b->n + n) * 2;
        uint8_t *np = realloc(b->p, nc);
        if (!np) abort();
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void put_u32(Buf *b, uint32_t x) { put(b, &x, 4); } /* little-endian host */
static void put_u64(Buf *b, uint64_t x) { put(b, &x, 8); }
static void put_str(Buf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void many(const uint8_t *data, size_t size) {
    size_t n = size / 4 > 4096 ? 4096 : size / 4; /* enough to find a hash's flaws, quick per run */
    uint32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return;
    for (size_t i = 0; i < n; i++) memcpy(&ids[i], data + 4 * i, 4);
    Buf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, n);     /* tensors */
    put_u64(&b, n + 1); /* keys */
    put_str(&b, "general.architecture");
    put_u32(&b, RAD_VAL_STRING);
    put_str(&b, "fuzz");
    char name[32];
    for (size_t i = 0; i < n; i++) {
        snprintf(name, sizeof name, "k.%08x", ids[i]);
        put_str(&b, name);
        put_u32(&b, RAD_VAL_U32);
        put_u32(&b, ids[i]);
    }
    for (size_t i = 0; i < n; i++) {
        snprintf(name, sizeof name, "t.%08x", ids[i]);
        put_str(&b, name);
        put_u32(&b, 1);
        put_u64(&b, 8);       /* f32 [8]: 32 bytes, one alignment unit */
        put_u32(&b, 0);
        put_u64(&b, 32 * i);
    }
    while (b.n % 32) put(&b, "", 1);
    for (size_t i = 0; i < n; i++) put(&b, "................................", 32);
    RadIn in;
    RadModelFile m;
    RadErr e = {0};
    memset(&m, 0, sizeof m);
    rad_in_init_mem(&in, b.p, b.n, "many.gguf");
    int rc = rad_gguf_load(&in, &m, &e);
    qsort(ids, n, sizeof *ids, cmp_u32);
    int dup = 0;
    for (size_t i = 1; i < n && !dup; i++) dup = ids[i] == ids[i - 1];
    if ((rc == RAD_OK) == dup) abort();
    if (rc == RAD_OK && (m.n_tensors != n || m.raw.n != n + 1)) abort();
    if (rc != RAD_OK && (!strstr(e.msg, "appears twice") || strchr(e.msg, '\n'))) abort();
    rad_model_free(&m);
    free(b.p);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size >= 4 && memcmp(data, "MANY", 4) == 0) {
        many(data + 4, size - 4);
        return 0;
    }
    RadIn in;
    RadModelFile m;
    RadErr e = {0};
    memset(&m, 0, sizeof m);
    rad_in_init_mem(&in, data, size, "fuzz.gguf");
    if (rad_gguf_load(&in, &m, &e) == RAD_OK) {
        RadModelMeta mm;
        rad_model_meta(&m, &mm, NULL);
        /* decode the first few tensors, bounded so a hostile shape cannot ask for gigabytes */
        for (uint64_t i = 0; i < m.n_tensors && i < 4; i++) {
            const RadTensor *t = &m.tensors[i];
            uint64_t n = 1;
            for (uint32_t d = 0; d < t->rank; d++) n *= t->shape[d]; /* checked by the reader */
            if (n > (1u << 16)) continue;
            float *out = malloc(n ? n * sizeof *out : 1);
            if (out) rad_dequant(t->enc, t->planes[0].data, t->planes[0].nbytes, out, n, NULL);
            free(out);
        }
    }
    rad_model_free(&m);

    /* the same bytes as a stream: header only, no data pointers */
    Mem s = {data, size, 0};
    rad_in_init_fn(&in, mem_read, &s, "fuzz-stream");
    memset(&m, 0, sizeof m);
    rad_err_clear(&e);
    rad_gguf_load(&in, &m, &e);
    rad_model_free(&m);
    return 0;
}
