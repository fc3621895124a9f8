/* rad_gguf.h — the GGUF reader (llama.cpp's model format), versions 2 and 3.
 *
 * Layout, all little-endian: "GGUF", u32 version, u64 tensor count, u64 metadata count, the
 * metadata (rad_dict_read: u64-length key, u32 type, value), then per tensor: u64-length name,
 * u32 n_dims (at most 4), u64 ne[n_dims] (innermost first), u32 ggml type, u64 offset; then
 * padding to general.alignment (default 32); then the data area. v1 (u32 counts and lengths)
 * is refused; v2 and v3 read alike (v3 only added big-endian files, which are refused).
 *
 * rad_gguf_load fills a RadModelFile:
 *   format "gguf", path = the input's name, version 2|3, alignment, data_offset (the data
 *   area's start: the header's end rounded up to the alignment);
 *   tensors in file order, shape row-major (ne[] reversed), one plane "data" whose offset is
 *   relative to data_offset and whose data points into the mapping (NULL for a stream);
 *   raw  = every GGUF key/value verbatim;
 *   meta = docs/KEYS.md: model.* from general.* and {arch}.*, rope.scaling.*, and every other
 *          {arch}.* key with the "{arch}." prefix removed. A {arch}.* key of an unexpected
 *          kind (a per-layer array where a count is expected) is not mapped to model.* but
 *          copied under its stripped name; a scalar that cannot be what its model.* key must
 *          be (a string block_count, an inf or out-of-range rope base or epsilon), a NaN or
 *          infinite float anywhere in {arch}.*, and "blk.N." tensors that disagree with
 *          block_count are refused naming the key (docs/KEYS.md, "What the readers refuse");
 *   tok  = tokenizer.ggml.* as tokenizer.* (ids as i32, token_type as array[i32]); a
 *          tokenizer key of the wrong type is an error naming it;
 *   chat = chat.template from tokenizer.chat_template, chat.kind (chatml | llama3 | llama2 |
 *          unknown), chat.bos / chat.eos: the text of the BOS/EOS tokens.
 *
 * Streams (in->data == NULL: stdin, an archive member read by callback) are read for the
 * header only: tensors then have data == NULL and the end-of-file checks are skipped; after a
 * successful load the stream sits at data_offset (the padding is consumed) when the file has
 * tensors, so a caller can go on reading tensor data in offset order.
 *
 * Everything is checked: counts against the bytes left (no allocation is sized by a count
 * before the bytes it implies are known to exist), n_dims, dims (non-zero, within int64,
 * byte count within u64, innermost dim a whole number of blocks), the ggml type, offsets
 * (aligned; inside the file when mapped; no two tensors overlapping), duplicate tensor names
 * and keys, UTF-8 names and keys, general.alignment (a non-zero power of two). Every failure
 * is one line naming the file and the tensor or key: "m.gguf: tensor 'x': dim 1 is 0". */
#ifndef RAD_GGUF_H
#define RAD_GGUF_H

#include <stdbool.h>
#include <stdint.h>

#include "libcommon/format/rad_model.h"

#define RAD_GGUF_MAX_DIMS 4            /* GGML_MAX_DIMS */
#define RAD_GGUF_DEFAULT_ALIGNMENT 32  /* GGUF_DEFAULT_ALIGNMENT */
#define RAD_GGUF_MAX_TENSORS (1u << 24) /* a sanity cap; also bounded by the bytes left */

/* Loads a GGUF file or stream into m (which starts zeroed). *in is MOVED into m->ins[0]
 * (m->n_ins = 1; the caller's struct is zeroed) whether or not this succeeds; the caller
 * always frees m with rad_model_free. Statuses: RAD_E_FORMAT (malformed or truncated),
 * RAD_E_UNSUPPORTED (v1, an unknown version, a big-endian file, a ggml type Radiance does
 * not decode), RAD_E_NOMEM, RAD_E_IO (a stream's read failed). */
int rad_gguf_load(RadIn *in, RadModelFile *m, RadErr *e);

/* True when the first n bytes start with the GGUF magic. */
bool rad_gguf_sniff(const uint8_t *p, uint64_t n);

/* ggml_type id -> RadEnc; false for types Radiance does not decode (q2_k, iq*, ...). */
bool rad_gguf_type_to_enc(uint32_t ggml_type, RadEnc *out);
/* RadEnc -> ggml_type id, or -1 when GGUF has no such type (bool, u8, fp8). */
int rad_gguf_enc_to_type(RadEnc enc);
/* GGML's name of a ggml_type id ("q2_k", "iq4_xs"), or NULL when unknown. */
const char *rad_gguf_type_name(uint32_t ggml_type);
/* The quant descriptor of a general.file_type value (llama_ftype): "" for all-f32, f16 and
 * bf16 files, "q4_1", "q4_k_m", ...; NULL when unknown. */
const char *rad_gguf_ftype_name(uint32_t ftype);

#endif
