#include "libcommon/base/rad_num.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The shortest %g that reads back as v, so a bound shows as "1e-09", not "1.0000000000000001e-09". */
static void fmt_num(char *buf, size_t n, double v) {
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

/* The user's text as shown in the message: one line (control bytes as '?'), at most 40 bytes. */
static void fmt_shown(char *buf, size_t n, const char *s) {
    if (!s || !*s) {
        snprintf(buf, n, "''");
        return;
    }
    size_t k = 0, len = strlen(s);
    for (; s[k] && k < 40 && k + 4 < n; k++) buf[k] = (unsigned char)s[k] < 0x20 || s[k] == 0x7f ? '?' : s[k];
    buf[k] = 0;
    if (k < len) snprintf(buf + k, n - k, "...");
}

static int range_err(const char *what, const char *shown, double lo, double hi, int whole, RadErr *e) {
    char a[32], b[32], t[48];
    fmt_num(a, sizeof a, lo);
    fmt_num(b, sizeof b, hi);
    fmt_shown(t, sizeof t, shown);
    return rad_err_set(e, RAD_E_ARG, "%s %s: expected a %s in [%s, %s]", what, t, whole ? "whole number" : "number", a, b);
}

int rad_num_check(const char *what, double v, double lo, double hi, int whole, RadErr *e) {
    char shown[32];
    fmt_num(shown, sizeof shown, v);
    if (!isfinite(v) || !(v >= lo && v <= hi) || (whole && v != floor(v))) return range_err(what, shown, lo, hi, whole, e);
    return RAD_OK;
}

int rad_num_f64(const char *what, const char *s, double lo, double hi, int whole, double *out, RadErr *e) {
    if (!s || !is_decimal(s)) return range_err(what, s, lo, hi, whole, e);
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
bad:;
    char t[48];
    fmt_shown(t, sizeof t, s);
    return rad_err_set(e, RAD_E_ARG, "%s %s: expected a whole number in [%llu, %llu]", what, t, (unsigned long long)lo,
                       (unsigned long long)hi);
}
