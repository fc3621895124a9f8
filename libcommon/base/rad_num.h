/* rad_num.h — one strict parser for every number a user gives: a flag's value, a --set value,
 * a JSON field. The whole string must be a decimal number ([+-]digits[.digits][e[+-]digits]; no
 * spaces, no hex, no "inf"/"nan"), finite, within [lo, hi], and whole where asked. The error
 * names the flag or field: "--max-conns nan: expected a whole number in [1, 1048576]". */
#ifndef RAD_NUM_H
#define RAD_NUM_H

#include <stdint.h>

#include "libcommon/base/rad_err.h"

enum { RAD_NUM_REAL = 0, RAD_NUM_WHOLE = 1 };

/* `what` names the flag or field in the message ("--temp", "'top_p'"). Whole numbers are
 * exact up to 2^53; wider ranges use rad_num_u64. RAD_E_ARG on any failure. */
int rad_num_f64(const char *what, const char *s, double lo, double hi, int whole, double *out, RadErr *e);
/* Digits only (no sign, no exponent), no overflow, within [lo, hi]: seeds, byte counts. */
int rad_num_u64(const char *what, const char *s, uint64_t lo, uint64_t hi, uint64_t *out, RadErr *e);
/* A number already parsed (a JSON real or integer): finite, in range, whole where asked. */
int rad_num_check(const char *what, double v, double lo, double hi, int whole, RadErr *e);

#endif
