/* Writes small .rad files as seeds for fuzz/fuzz_rad.c:
 *   cc -I. scripts/gen-rad-seeds.c build/libcommon.a $(pkg-config --libs libarchive libzstd jansson libxxhash) -lm -o /tmp/g && /tmp/g fuzz/corpus/fuzz_rad */
#include <stdio.h>

#include "libcommon/format/rad_container.h"

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    RadErr e = {0};
    float a[64];
    uint8_t q[2 * 34];
    for (int i = 0; i < 64; i++) a[i] = (float)i;
    for (int i = 0; i < 68; i++) q[i] = (uint8_t)i;
    for (int z = 0; z < 2; z++) {
        char p[512];
        snprintf(p, sizeof p, "%s/seed%d.rad", argv[1], z);
        RadDict meta, tok;
        rad_dict_init(&meta), rad_dict_init(&tok);
        rad_dict_set_str(&meta, "model.arch_id", "llama", &e);
        rad_dict_set_u32(&meta, "model.n_layers", 1, &e);
        const char *t[] = {"a", "b"};
        rad_dict_set_strarr(&tok, "tokenizer.tokens", t, 2, &e);
        RadWriter *w;
        RadWriteOpts o = {.alignment = 8, .zstd_level = z ? 3 : 0, .compress_min = 16};
        uint64_t s1[2] = {2, 32}, s2[2] = {2, 32};
        RadPlaneSrc p1 = {"data", a, sizeof a}, p2 = {"data", q, sizeof q};
        if (rad_writer_init(&w, p, &o, 1, &e) || rad_writer_set_kv(w, 0, &meta, &e) ||
            rad_writer_set_kv(w, 1, &tok, &e) ||
            rad_writer_add_tensor(w, "w", RAD_ENC_F32, 2, s1, 1, &p1, &e) ||
            rad_writer_add_tensor(w, "q", RAD_ENC_Q8_0, 2, s2, 1, &p2, &e) || rad_writer_finish(w, &e)) {
            fprintf(stderr, "%s\n", e.msg);
            return 1;
        }
        rad_writer_free(w);
        rad_dict_free(&meta), rad_dict_free(&tok);
    }
    return 0;
}
