/* libFuzzer target: the safetensors reader on arbitrary bytes, as a mapped buffer and as a
 * stream fed a few bytes at a time. Every tensor a successful load returns is touched at both
 * ends, so a plane pointing outside the input trips ASan. Seeds: fuzz/corpus/fuzz_safetensors/
 * (scripts/make-hf-fixture.py). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/safetensors.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
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
