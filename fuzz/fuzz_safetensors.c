/* libFuzzer target: the safetensors reader on arbitrary bytes, as a mapped buffer and as a
 * stream fed a few bytes at a time. Every tensor a successful load returns is touched at both
 * ends, so a plane pointing outside the input trips ASan. Seeds: fuzz/corpus/fuzz_safetensors/
 * (scripts/make-hf-fixture.py; many_entries.safetensors: 1,500 metadata entries and 600 tensors).
 * An input that starts with "MANY" is expanded instead: every 4 bytes after it name one
 * __metadata__ entry and one tensor (the tables whose duplicate checks were quadratic); a load
 * must succeed exactly when no name repeats. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/format/rad_safetensors.h"

typedef struct Mem {
    const uint8_t *p;
    size_t n, pos;
} Mem;

static long mem_read(void *user, void *dst, size_t n, RadErr *e) {
    (void)e;
    Mem *s = user;
    size_t k = s->n - s->pos;
    if (k > n) k = n;
    if (k > 13) k = 13;
    memcpy(dst, s->p + s->pos, k);
    s->pos += k;
    return (long)k;
}

static void check(int rc, const RadModelFile *m, const RadErr *e) {
    if (rc != RAD_OK) {
        if (e->code != rc || !e->msg[0] || strchr(e->msg, '\n')) abort();
        if (m->n_tensors) abort(); /* a failed single-file load keeps no tensor */
        return;
    }
    volatile uint8_t sink = 0;
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        const RadPlane *p = &m->tensors[i].planes[0];
        if (m->tensors[i].n_planes != 1 || m->tensors[i].src != 0) abort();
        if (p->data && p->nbytes) sink ^= p->data[0] ^ p->data[p->nbytes - 1];
    }
    (void)sink;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void many(const uint8_t *data, size_t size) {
    size_t n = size / 4 > 2048 ? 2048 : size / 4, cap = 100 * n + 64, o = 8; /* quick per run */
    uint32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    uint8_t *f = malloc(cap + 4 * n);
    if (!ids || !f) abort();
    for (size_t i = 0; i < n; i++) memcpy(&ids[i], data + 4 * i, 4);
    char *h = (char *)f;
    o += (size_t)snprintf(h + o, cap - o, "{\"__metadata__\":{");
    for (size_t i = 0; i < n; i++) o += (size_t)snprintf(h + o, cap - o, "%s\"m%08x\":\"v\"", i ? "," : "", ids[i]);
    o += (size_t)snprintf(h + o, cap - o, "}");
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(h + o, cap - o, ",\"t%08x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%zu,%zu]}",
                              ids[i], 4 * i, 4 * i + 4);
    o += (size_t)snprintf(h + o, cap - o, "}");
    uint64_t hl = o - 8;
    memcpy(f, &hl, 8); /* little-endian host */
    memset(f + o, 0, 4 * n);
    RadIn in;
    rad_in_init_owned(&in, f, o + 4 * n, "many.safetensors");
    RadModelFile m = {0};
    RadErr e = {0};
    int rc = rad_safetensors_load(&in, &m, &e);
    check(rc, &m, &e);
    qsort(ids, n, sizeof *ids, cmp_u32);
    int dup = 0;
    for (size_t i = 1; i < n && !dup; i++) dup = ids[i] == ids[i - 1];
    if ((rc == RAD_OK) == dup) abort();
    if (rc == RAD_OK && (m.n_tensors != n || m.raw.n != n)) abort();
    rad_model_free(&m);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size >= 4 && memcmp(data, "MANY", 4) == 0) {
        many(data + 4, size - 4);
        return 0;
    }
    /* an exact-size copy, so a read one past the end is caught */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    RadIn in;
    rad_in_init_owned(&in, copy, size, "fuzz.safetensors");
    RadModelFile m = {0};
    RadErr e = {0};
    int rc = rad_safetensors_load(&in, &m, &e);
    check(rc, &m, &e);
    rad_model_free(&m);

    Mem s = {data, size, 0};
    rad_in_init_fn(&in, mem_read, &s, "<stream>");
    memset(&m, 0, sizeof m);
    rad_err_clear(&e);
    rc = rad_safetensors_load(&in, &m, &e);
    check(rc, &m, &e);
    rad_model_free(&m);
    return 0;
}
