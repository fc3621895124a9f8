#include "libcommon/base/rad_err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int rad_err_set(RadErr *e, int code, const char *fmt, ...) {
    if (!e || e->code != RAD_OK) return code;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    /* one line: a name with a newline in it must not split the message */
    for (char *p = e->msg; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    return code;
}

void rad_err_clear(RadErr *e) {
    if (!e) return;
    e->code = RAD_OK;
    e->msg[0] = 0;
}

const char *rad_status_name(int code) {
    switch (code) {
    case RAD_OK: return "ok";
    case RAD_E_IO: return "io";
    case RAD_E_FORMAT: return "format";
    case RAD_E_UNSUPPORTED: return "unsupported";
    case RAD_E_NOMEM: return "nomem";
    case RAD_E_SHAPE: return "shape";
    case RAD_E_CHECKSUM: return "checksum";
    case RAD_E_NOTFOUND: return "notfound";
    case RAD_E_ARG: return "arg";
    case RAD_E_LIMIT: return "limit";
    case RAD_E_BUSY: return "busy";
    case RAD_E_DRAINING: return "draining";
    }
    return "unknown";
}
