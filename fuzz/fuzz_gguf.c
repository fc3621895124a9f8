/* libFuzzer target: the GGUF reader and the dequantisers, on arbitrary bytes. Seeds:
 * fuzz/corpus/fuzz_gguf/ (the gguf-package fixture and small variants, written by
 * scripts/gen-gguf-fixtures.py).
 *
 * The same bytes are also read as a stream (header only), a few bytes per read. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/gguf.h"
#include "libcommon/quant.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
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
