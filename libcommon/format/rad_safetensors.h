/* rad_safetensors.h — the safetensors format: u64 LE header length N, N bytes of JSON
 * ({name: {"dtype", "shape", "data_offsets": [b, e]}, "__metadata__": {str: str}}), then the
 * data area, which starts at byte 8 + N. Tensors get one plane, "data", whose offset is
 * relative to the data area of their own shard (RadTensor.src indexes RadModelFile.ins). */
#ifndef RAD_SAFETENSORS_H
#define RAD_SAFETENSORS_H

#include <stdbool.h>
#include <stdint.h>

#include "libcommon/format/rad_model.h"

/* The format's own cap on the JSON header (the reference implementation's). */
#define RAD_ST_MAX_HEADER (100ull << 20)

/* Loads one safetensors file into m (which starts zeroed): m->format "safetensors", m->path the
 * input's name, m->data_offset 8 + N. *in is MOVED into m->ins whether or not this succeeds
 * (the caller's struct is zeroed); the caller always frees m with rad_model_free. A stream
 * input is accepted: its planes have data == NULL and the offsets are not checked against the
 * file size. */
int rad_safetensors_load(RadIn *in, RadModelFile *m, RadErr *e);

/* The lower-level step for sharded checkpoints: MOVES *in into m->ins (as above) and adds its
 * tensors, with src = the new index, and its "__metadata__" strings to m->raw. Leaves
 * m->format/path alone. On failure m holds no tensor or metadata from this shard (the RadIn
 * stays in m->ins, to be closed by rad_model_free). *first, when non-NULL, receives the index
 * in m->tensors of this shard's first tensor. */
int rad_safetensors_add(RadModelFile *m, RadIn *in, uint64_t *first, RadErr *e);

/* True when the first n bytes look like a safetensors file: a header length that fits in the
 * format's cap, followed by '{'. Cheap: for detecting the format before loading. */
bool rad_safetensors_sniff(const uint8_t *p, uint64_t n);

/* The RadEnc for a safetensors dtype spelling ("F32", "BF16", ...); false when unknown or not
 * supported (U16, U32, U64, F8_E8M0, ...). */
bool rad_safetensors_dtype(const char *dtype, RadEnc *out);

#endif
