/* rad_pyjson.c — json.dumps(v, ensure_ascii=False) byte for byte (rad_pyjson.h). */
#include "libcommon/text/rad_pyjson.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deep enough for any tool schema; the bound keeps hostile input from exhausting the stack. */
#define PYJSON_MAX_DEPTH 512

/* ---- strings ------------------------------------------------------------------------------ */

/* py_encode_basestring's table: the named escapes, \u00xx (lowercase hex) for the other
 * controls, every other byte (0x7f, '/', UTF-8) as is. */
static int put_str(RadBuf *b, const char *s, size_t n, RadErr *e) {
    static const char hex[] = "0123456789abcdef";
    int rc = rad_buf_put(b, "\"", 1, e);
    size_t run = 0; /* start of the bytes not yet written: copied in one put, not byte by byte */
    for (size_t i = 0; !rc && i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[6] = {'\\', 0, '0', '0', 0, 0};
        size_t k = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            if (c >= 0x20) continue;
            esc[1] = 'u';
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            k = 6;
        }
        rc = rad_buf_put(b, s + run, i - run, e);
        if (!rc) rc = rad_buf_put(b, esc, k, e);
        run = i + 1;
    }
    if (!rc) rc = rad_buf_put(b, s + run, n - run, e);
    return rc ? rc : rad_buf_put(b, "\"", 1, e);
}

/* ---- reals: Python's repr(float) ---------------------------------------------------------- */

/* Whether m * 10^scale reads back as a. Written without a decimal point, so strtod's locale
 * does not matter. */
static int reads_back(uint64_t m, int scale, double a) {
    char s[48];
    snprintf(s, sizeof s, "%" PRIu64 "e%d", m, scale);
    return strtod(s, NULL) == a;
}

/* The shortest digits m (and scale: a == m * 10^scale once read back) for a finite a > 0, the
 * ones CPython's repr finds (dtoa mode 0). printf's correctly rounded p digits are the nearest
 * p-digit decimal; where they do not read back, the p-digit decimal on the other side of a may
 * still do so, because the round-trip interval of a power of two is narrower below it than
 * above (2**-24 is 5.960464477539063e-08, whose nearest 16 digits ...0625 fall outside it). */
static void shortest(double a, uint64_t *m_out, int *scale_out) {
    for (int p = 1; p <= 17; p++) {
        char s[48];
        snprintf(s, sizeof s, "%.*e", p - 1, a);
        uint64_t m = 0;
        const char *q = s;
        for (; *q && *q != 'e'; q++)
            if (*q >= '0' && *q <= '9') m = m * 10 + (uint64_t)(*q - '0');
        int scale = (*q ? atoi(q + 1) : 0) - (p - 1);
        uint64_t low = 1; /* 10^(p-1): the smallest p-digit mantissa */
        for (int i = 1; i < p; i++) low *= 10;
        uint64_t up = m + 1, down = m - 1;
        int down_scale = scale;
        if (m == low) { /* one below 1.00..e+x is 9.99..e+(x-1), still p digits */
            down = low * 10 - 1;
            down_scale = scale - 1;
        }
        /* p = 17 always reads back (17 digits identify every double) */
        if (reads_back(m, scale, a) || p == 17) {
            *m_out = m, *scale_out = scale;
            return;
        }
        if (reads_back(up, scale, a)) {
            *m_out = up, *scale_out = scale;
            return;
        }
        if (reads_back(down, down_scale, a)) {
            *m_out = down, *scale_out = down_scale;
            return;
        }
    }
}

/* float_repr_style 'short': positional when the decimal exponent x is in [-4, 16), with at least
 * one digit after the point; else d[.ddd]e±XX. */
static int put_real(RadBuf *b, double v, RadErr *e) {
    if (isnan(v)) return rad_buf_puts(b, "NaN", e);
    if (isinf(v)) return rad_buf_puts(b, v < 0 ? "-Infinity" : "Infinity", e);
    uint64_t m = 0;
    int scale = 0;
    if (v != 0) shortest(fabs(v), &m, &scale);
    char d[24];
    int n = snprintf(d, sizeof d, "%" PRIu64, m);
    while (n > 1 && d[n - 1] == '0') d[--n] = 0, scale++;
    int x = scale + n - 1;
    char out[64];
    char *o = out;
    if (signbit(v)) *o++ = '-';
    if (x < -4 || x >= 16) {
        *o++ = d[0];
        if (n > 1) {
            *o++ = '.';
            memcpy(o, d + 1, (size_t)n - 1);
            o += n - 1;
        }
        o += snprintf(o, sizeof out - (size_t)(o - out), "e%c%02d", x < 0 ? '-' : '+', abs(x));
    } else if (x < 0) {
        memcpy(o, "0.000", (size_t)(1 - x)); /* "0." and -x-1 zeros */
        o += 1 - x;
        memcpy(o, d, (size_t)n);
        o += n;
    } else {
        for (int i = 0; i <= x; i++) *o++ = i < n ? d[i] : '0';
        *o++ = '.';
        if (n > x + 1) {
            memcpy(o, d + x + 1, (size_t)(n - x - 1));
            o += n - x - 1;
        } else {
            *o++ = '0';
        }
    }
    return rad_buf_put(b, out, (size_t)(o - out), e);
}

/* ---- values ------------------------------------------------------------------------------- */

/* depth: the containers around v. */
static int dump(RadBuf *b, const json_t *v, int depth, RadErr *e) {
    switch (json_typeof(v)) {
    case JSON_NULL: return rad_buf_puts(b, "null", e);
    case JSON_TRUE: return rad_buf_puts(b, "true", e);
    case JSON_FALSE: return rad_buf_puts(b, "false", e);
    case JSON_INTEGER: return rad_buf_printf(b, e, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    case JSON_REAL: return put_real(b, json_real_value(v), e);
    case JSON_STRING: return put_str(b, json_string_value(v), json_string_length(v), e);
    case JSON_ARRAY:
    case JSON_OBJECT: break;
    }
    if (depth >= PYJSON_MAX_DEPTH)
        return rad_err_set(e, RAD_E_ARG, "JSON nested deeper than %d arrays and objects", PYJSON_MAX_DEPTH);
    int rc;
    if (json_is_array(v)) {
        rc = rad_buf_put(b, "[", 1, e);
        for (size_t i = 0; !rc && i < json_array_size(v); i++) {
            if (i) rc = rad_buf_put(b, ", ", 2, e);
            if (!rc) rc = dump(b, json_array_get(v, i), depth + 1, e);
        }
        return rc ? rc : rad_buf_put(b, "]", 1, e);
    }
    rc = rad_buf_put(b, "{", 1, e);
    /* jansson's iterators take a mutable object; nothing here writes through it */
    int first = 1;
    for (void *it = json_object_iter((json_t *)v); !rc && it; it = json_object_iter_next((json_t *)v, it), first = 0) {
        const char *key = json_object_iter_key(it);
        if (!first) rc = rad_buf_put(b, ", ", 2, e);
        if (!rc) rc = put_str(b, key, strlen(key), e);
        if (!rc) rc = rad_buf_put(b, ": ", 2, e);
        if (!rc) rc = dump(b, json_object_iter_value(it), depth + 1, e);
    }
    return rc ? rc : rad_buf_put(b, "}", 1, e);
}

int rad_pyjson_dump(RadBuf *b, const json_t *v, RadErr *e) {
    size_t len = b->len;
    int rc = v ? dump(b, v, 0, e) : rad_err_set(e, RAD_E_ARG, "no JSON value to write");
    if (rc && b->p) { /* a half-written value is of no use to the caller: b as it was */
        b->len = len;
        b->p[len] = 0;
    }
    return rc;
}
