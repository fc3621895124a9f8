/* rad_dict.h — a typed key/value table: GGUF metadata, the .rad META/TOKENIZER/CHAT sections,
 * and flattened Hugging Face configs all live in one. The binary encoding (rad_dict_read /
 * rad_dict_write) is GGUF v3's, so the container and the GGUF reader share one parser. */
#ifndef RAD_DICT_H
#define RAD_DICT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "libcommon/base/rad_buf.h"
#include "libcommon/base/rad_err.h"
#include "libcommon/base/rad_in.h"

/* Value types; numbering is GGUF's (gguf_type), and part of the .rad format. */
typedef enum RadValType {
    RAD_VAL_U8 = 0, RAD_VAL_I8 = 1, RAD_VAL_U16 = 2, RAD_VAL_I16 = 3,
    RAD_VAL_U32 = 4, RAD_VAL_I32 = 5, RAD_VAL_F32 = 6, RAD_VAL_BOOL = 7,
    RAD_VAL_STRING = 8, RAD_VAL_ARRAY = 9, RAD_VAL_U64 = 10, RAD_VAL_I64 = 11,
    RAD_VAL_F64 = 12,
    RAD_VAL_COUNT
} RadValType;

typedef struct RadStr {
    uint64_t len; /* bytes, not counting the NUL that always follows */
    char *p;      /* may hold NULs inside; p[len] == 0 */
} RadStr;

typedef struct RadValue {
    RadValType type;
    RadValType arr_type; /* element type when type == ARRAY */
    uint64_t n;          /* ARRAY: element count */
    union {
        uint64_t u;  /* U8..U64, BOOL */
        int64_t i;   /* I8..I64 */
        double f;    /* F32, F64 */
        RadStr s;    /* STRING */
        void *arr;   /* ARRAY: packed scalars of arr_type (uint8_t[n], float[n], ...);
                        RadStr[n] for STRING; RadValue[n] for ARRAY (nested) */
    } v;
} RadValue;

typedef struct RadDict {
    uint64_t n, cap;
    RadStr *keys;     /* [n] */
    RadValue *vals;   /* [n] */
    /* A hash index over keys (open addressing: entry index + 1, 0 empty; idx_cap a power of
     * two), kept by the setters once n passes a handful, so lookups and the duplicate checks of
     * every parser stay O(1) per key; NULL while the table is small. Owned; freed by
     * rad_dict_free. A struct copy of a RadDict may be read, never written. */
    uint64_t *idx;
    uint64_t idx_cap;
} RadDict;

void rad_dict_init(RadDict *d);
void rad_dict_free(RadDict *d);
void rad_value_free(RadValue *v);
int rad_value_copy(RadValue *dst, const RadValue *src, RadErr *e);
size_t rad_val_scalar_size(RadValType t); /* bytes of one scalar; 0 for STRING/ARRAY */
const char *rad_val_type_name(RadValType t); /* "u32", "string", "array", ... */

/* Lookup; NULL when absent. */
const RadValue *rad_dict_get(const RadDict *d, const char *key);
/* Typed getters: RAD_OK, RAD_E_NOTFOUND (absent) or RAD_E_FORMAT (wrong type, named).
 * geti accepts any integer type (and bool) that fits int64; getf any int or float. */
int rad_dict_geti(const RadDict *d, const char *key, int64_t *out, RadErr *e);
int rad_dict_getf(const RadDict *d, const char *key, double *out, RadErr *e);
int rad_dict_gets(const RadDict *d, const char *key, const char **out, RadErr *e);

/* Setters replace an existing key. The value is copied (set) or moved (take). */
int rad_dict_set(RadDict *d, const char *key, const RadValue *v, RadErr *e);
int rad_dict_take(RadDict *d, const char *key, RadValue *v, RadErr *e); /* *v is zeroed */
int rad_dict_set_u32(RadDict *d, const char *key, uint32_t x, RadErr *e);
int rad_dict_set_u64(RadDict *d, const char *key, uint64_t x, RadErr *e);
int rad_dict_set_i32(RadDict *d, const char *key, int32_t x, RadErr *e);
int rad_dict_set_f32(RadDict *d, const char *key, float x, RadErr *e);
int rad_dict_set_bool(RadDict *d, const char *key, bool x, RadErr *e);
int rad_dict_set_str(RadDict *d, const char *key, const char *s, RadErr *e);
/* Array of n scalars of type t copied from data; or of n strings. */
int rad_dict_set_arr(RadDict *d, const char *key, RadValType t, const void *data, uint64_t n, RadErr *e);
int rad_dict_set_strarr(RadDict *d, const char *key, const char *const *s, uint64_t n, RadErr *e);

/* GGUF-encoded: u64 count, then per entry: u64 key length, key bytes, u32 type, value.
 * Counts, string lengths and array lengths are checked against what remains (mapped) or
 * grown as read (stream); nesting deeper than 8 arrays and keys that are not valid UTF-8
 * are refused. Errors name the key being read. */
int rad_dict_read(RadIn *in, RadDict *d, uint64_t count, RadErr *e);
/* Reads one value of type t (used by rad_dict_read; the key is for messages). */
int rad_value_read(RadIn *in, RadValType t, RadValue *v, const char *key, int depth, RadErr *e);
/* Appends the encoding of all entries (without the leading count) to a growing buffer. */
int rad_dict_write(const RadDict *d, RadBuf *out, RadErr *e);

/* A printable one-line rendering of a value ("[49152 × string]" for large arrays). */
void rad_value_print(FILE *f, const RadValue *v, int max_elems);

bool rad_utf8_valid(const char *p, uint64_t n);

#endif
