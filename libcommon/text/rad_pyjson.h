/* rad_pyjson.h — JSON written byte for byte as Python writes it, for chat templates whose
 * `tojson` (Jinja's filter, json.dumps underneath) puts tool definitions and arguments into the
 * prompt: a model was trained on those exact bytes, so spacing and number spelling matter. */
#ifndef RAD_PYJSON_H
#define RAD_PYJSON_H

#include "libcommon/base/rad_buf.h"
#include "libcommon/base/rad_err.h"

struct json_t;

/* Appends v serialised exactly as Python's json.dumps(v, ensure_ascii=False) writes it (what
 * Jinja's `tojson` filter writes in Hugging Face chat templates): separators ", " and ": ",
 * object keys in the order jansson holds them (insertion order), integers in decimal, reals as
 * Python's repr(float) (the shortest round-trip digits: `1.0`, `1e-05`, `1e+16`), strings with
 * only `"`, `\` and controls below 0x20 escaped (`\n`, `\u001f`) and UTF-8 written as is.
 * RAD_E_ARG for nesting deeper than 512 levels, RAD_E_NOMEM from the buffer; on failure b is
 * left as it was. */
int rad_pyjson_dump(RadBuf *b, const struct json_t *v, RadErr *e);

#endif
