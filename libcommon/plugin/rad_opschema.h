/* rad_opschema.h — op schemas: parameter names, kinds and order, and the weight operand count.
 * The vocabulary's ops (docs/OPS.md) are fixed here; an op the vocabulary lacks is fixed by the
 * first plugin that declares it in this process (spec: "the first plugin to declare it fixes
 * its schema"), and every later declaration must match. */
#ifndef RAD_OPSCHEMA_H
#define RAD_OPSCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "abi/rad_arch.h"

/* RAD_OK when the declaration matches the op's schema (recording it when the op is new);
 * otherwise RAD_E_ARG with a one-line reason in msg naming the op, the parameter and who fixed
 * the schema. `who` names the declaring plugin. Thread-safe. */
int rad_opschema_check(const char *op, const RadParam *p, uint32_t np, uint32_t nw, const char *who, char *msg,
                       size_t cap);

/* 1 when docs/OPS.md's vocabulary defines the op. */
int rad_opschema_in_vocabulary(const char *op);

/* Forgets the ops recorded from plugins (tests). */
void rad_opschema_reset(void);

#endif
