/* libFuzzer target: the Hugging Face JSON readers (config.json, generation_config.json,
 * tokenizer.json with and without tokenizer_config.json) on arbitrary bytes. The first byte
 * picks the reader; for the tokenizer pair the rest is split at its first NUL byte.
 * Seeds: fuzz/corpus/fuzz_json/ (scripts/make-hf-fixture.py; config_many_keys and
 * config_many_nested: a config.json of 5,000 keys and one of 1,800 nested objects, the
 * flattening whose duplicate checks were quadratic). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/format/rad_hf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int which = data[0] % 4;
    size_t n = size - 1;
    char *p = malloc(n ? n : 1); /* exact size: jansson is given the length */
    if (!p) return 0;
    if (n) memcpy(p, data + 1, n);
    RadModelFile m = {0};
    RadErr e = {0};
    int rc;
    switch (which) {
    case 0: rc = rad_hf_read_config(&m, "config.json", p, n, "fuzz", &e); break;
    case 1: rc = rad_hf_read_generation(&m, "generation_config.json", p, n, &e); break;
    case 2: rc = rad_hf_read_tokenizer(&m, "tokenizer.json", p, n, NULL, NULL, 0, &e); break;
    default: {
        const char *nul = memchr(p, 0, n);
        size_t a = nul ? (size_t)(nul - p) : n;
        const char *cfg = nul ? nul + 1 : NULL;
        size_t b = nul ? n - a - 1 : 0;
        rc = rad_hf_read_tokenizer(&m, "tokenizer.json", p, a, "tokenizer_config.json", cfg, b, &e);
    }
    }
    if (rc != RAD_OK && (e.code != rc || !e.msg[0] || strchr(e.msg, '\n'))) abort();
    /* a loaded vocabulary has as many types as tokens */
    const RadValue *t = rad_dict_get(&m.tok, "tokenizer.tokens");
    const RadValue *tt = rad_dict_get(&m.tok, "tokenizer.token_type");
    if (rc == RAD_OK && t && (!tt || tt->n != t->n)) abort();
    rad_model_free(&m);
    free(p);
    return 0;
}
