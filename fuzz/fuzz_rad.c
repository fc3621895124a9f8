/* libFuzzer target: the .rad container reader and checksum verification on arbitrary bytes. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "libcommon/rad_container.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    RadIn in;
    rad_in_init_mem(&in, data, size, "fuzz.rad");
    RadModelFile m;
    RadErr e = {0};
    if (rad_container_load(&in, &m, &e) == RAD_OK) {
        RadModelMeta mm;
        rad_model_meta(&m, &mm, NULL);
        rad_container_check(&m, NULL, NULL, NULL);
        /* decompress each plane, bounded so a hostile size cannot ask for gigabytes */
        for (uint64_t i = 0; i < m.n_tensors; i++)
            for (uint32_t j = 0; j < m.tensors[i].n_planes; j++) {
                uint64_t n = m.tensors[i].planes[j].nbytes;
                if (n > (1u << 20)) continue;
                void *b = malloc(n ? n : 1);
                if (b) rad_plane_read(&m, &m.tensors[i], j, b, NULL);
                free(b);
            }
    }
    rad_model_free(&m);
    return 0;
}
