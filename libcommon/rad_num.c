#include "rad_num.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The decimal grammar, checked before strtod (which would also take "inf", "0x1p3", " 1"). */
static int is_decimal(const char *s) {
    const char *p = s;
    if (*p == '+' || *p == '-') p++;
    int digits = 0;
    while (*p >= '0' && *p <= '9') p++, digits++;
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') p++, digits++;
    }
    if (!digits) return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!(*p >= '0' && *p <= '9')) return 0;
        while (*p >= '0' && *p <= '9') p++;
    }
    return *p == 0;
}

static int range_err(const char *what, const char *shown, double lo, double hi, int whole, RadErr *e) {
    return rad_err_set(e, RAD_E_ARG, "%s %s: expected a %s in [%.17g, %.17g]", what, shown,
                       whole ? "whole number" : "number", lo, hi);
}

int rad_num_check(const char *what, double v, double lo, double hi, int whole, RadErr *e) {
    char shown[64];
    snprintf(shown, sizeof shown, "%.17g", v);
    if (!isfinite(v) || !(v >= lo && v <= hi) || (whole && v != floor(v))) return range_err(what, shown, lo, hi, whole, e);
    return RAD_OK;
}

int rad_num_f64(const char *what, const char *s, double lo, double hi, int whole, double *out, RadErr *e) {
    if (!s || !is_decimal(s)) return range_err(what, s && *s ? s : "''", lo, hi, whole, e);
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    /* underflow to 0 or a subnormal is a real value; overflow is inf and fails the check */
    if (*end || !isfinite(v) || !(v >= lo && v <= hi) || (whole && v != floor(v))) return range_err(what, s, lo, hi, whole, e);
    *out = v;
    return RAD_OK;
}

int rad_num_u64(const char *what, const char *s, uint64_t lo, uint64_t hi, uint64_t *out, RadErr *e) {
    uint64_t v = 0;
    const char *p = s ? s : "";
    if (!*p) goto bad;
    for (; *p; p++) {
        if (*p < '0' || *p > '9') goto bad;
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) goto bad; /* overflow */
        v = v * 10 + d;
    }
    if (v < lo || v > hi) goto bad;
    *out = v;
    return RAD_OK;
bad:
    return rad_err_set(e, RAD_E_ARG, "%s %s: expected a whole number in [%llu, %llu]", what, s && *s ? s : "''",
                       (unsigned long long)lo, (unsigned long long)hi);
}
