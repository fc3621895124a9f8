/* Op schemas: the vocabulary's, then the first declarer's. See rad_opschema.h. */
#include "libcommon/plugin/rad_opschema.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_P 16

typedef struct Schema {
    const char *op;
    const char *who;                 /* "docs/OPS.md" or the plugin that fixed it */
    uint32_t np;
    const char *pname[MAX_P];
    RadParamKind pkind[MAX_P];
    uint32_t nw_max;                 /* weight operands: optional ones may be absent at the end */
    RadParamRole prole[MAX_P];
    uint32_t np_opt;                 /* of the np, the last np_opt may be omitted (read as 0) */
} Schema;

#define R RAD_PARAM_RANGE
#define I RAD_PARAM_INT
#define F RAD_PARAM_FLOAT
/* docs/OPS.md, "Summary": names and order are the contract kernels rely on */
static const Schema VOCAB[] = {
    {"embed_gather", "docs/OPS.md", 3, {"M", "N", "V"}, {R, I, I}, 1, {RAD_PROLE_NONE}, 0},
    /* tensor parallelism's vocabulary-parallel embedding and head */
    {"embed_gather_part", "docs/OPS.md", 5, {"M", "N", "V", "row0", "n_vocab"}, {R, I, I, I, I}, 1, {RAD_PROLE_NONE}, 0},
    {"all_gather", "docs/OPS.md", 4, {"M", "N", "col0", "W"}, {R, I, I, I}, 0, {RAD_PROLE_NONE}, 0},
    {"rmsnorm", "docs/OPS.md", 3, {"M", "N", "eps"}, {R, I, F}, 1, {RAD_PROLE_NONE}, 0},
    {"add_rmsnorm", "docs/OPS.md", 3, {"M", "N", "eps"}, {R, I, F}, 1, {RAD_PROLE_NONE}, 0},
    {"gemm_nt", "docs/OPS.md", 3, {"M", "N", "K"}, {R, I, I}, 1, {RAD_PROLE_NONE}, 0},
    {"gemm_nt2", "docs/OPS.md", 4, {"M", "N0", "N1", "K"}, {R, I, I, I}, 2, {RAD_PROLE_NONE}, 0},
    {"gemm_nt3", "docs/OPS.md", 5, {"M", "N0", "N1", "N2", "K"}, {R, I, I, I, I}, 3, {RAD_PROLE_NONE}, 0},
    {"rope", "docs/OPS.md", 10,
     {"M", "n_head", "head_dim", "n_rot", "theta", "scaling", "factor", "low_freq_factor", "high_freq_factor", "orig_ctx"},
     {R, I, I, I, F, I, F, F, F, I}, 1, {RAD_PROLE_NONE}, 0},
    /* `window` came after the first plugins: one that omits it asks full attention */
    {"attn_paged", "docs/OPS.md", 9, {"M", "n_head", "n_head_kv", "head_dim", "kv", "layer", "scale", "prefill_fp8", "window"},
     {R, I, I, I, I, I, F, I, I}, 0, {RAD_PROLE_SEQ_CHUNK}, 1},
    {"silu_mul", "docs/OPS.md", 2, {"M", "N"}, {R, I}, 0, {RAD_PROLE_NONE}, 0},
    {"add", "docs/OPS.md", 2, {"M", "N"}, {R, I}, 0, {RAD_PROLE_NONE}, 0},
    {"add_bias", "docs/OPS.md", 2, {"M", "N"}, {R, I}, 1, {RAD_PROLE_NONE}, 0},
    {"gelu_tanh_mul", "docs/OPS.md", 2, {"M", "N"}, {R, I}, 0, {RAD_PROLE_NONE}, 0},
    {"head_rmsnorm", "docs/OPS.md", 4, {"M", "n_head", "head_dim", "eps"}, {R, I, I, F}, 1, {RAD_PROLE_NONE}, 0},
    {"scale", "docs/OPS.md", 3, {"M", "N", "factor"}, {R, I, F}, 0, {RAD_PROLE_NONE}, 0},
    {"all_reduce", "docs/OPS.md", 3, {"M", "N", "exact"}, {R, I, I}, 0, {RAD_PROLE_NONE}, 0},
    {"logits_gather", "docs/OPS.md", 2, {"M", "N"}, {R, I}, 0, {RAD_PROLE_NONE}, 0},
    {"argmax", "docs/OPS.md", 2, {"M", "N"}, {R, I}, 0, {RAD_PROLE_NONE}, 0},
    {"logits_gemm", "docs/OPS.md", 3, {"M", "N", "K"}, {R, I, I}, 1, {RAD_PROLE_NONE}, 0},
    /* the encoder ops (BERT, EmbeddingGemma) */
    {"layernorm", "docs/OPS.md", 3, {"M", "N", "eps"}, {R, I, F}, 2, {RAD_PROLE_NONE}, 0},
    {"gelu", "docs/OPS.md", 2, {"M", "N"}, {R, I}, 0, {RAD_PROLE_NONE}, 0},
    /* M is never cut (a sequence's rows all attend each other); `window` optional, as attn_paged's */
    {"attn_seq", "docs/OPS.md", 6, {"M", "n_head", "n_head_kv", "head_dim", "scale", "window"}, {R, I, I, I, F, I}, 0,
     {RAD_PROLE_NONE}, 1},
    {"pool", "docs/OPS.md", 3, {"M", "N", "mode"}, {R, I, I}, 0, {RAD_PROLE_NONE}, 0},
    {"l2_normalize", "docs/OPS.md", 2, {"M", "N"}, {R, I}, 0, {RAD_PROLE_NONE}, 0},
};
#undef R
#undef I
#undef F

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static Schema *seen;                 /* ops fixed by plugins, this process */
static size_t n_seen;

static const char *kind_name(RadParamKind k) {
    return k == RAD_PARAM_RANGE ? "RAD_RANGE" : k == RAD_PARAM_FLOAT ? "RAD_FLOAT" : "RAD_INT";
}

static const Schema *find(const char *op) {
    for (size_t i = 0; i < sizeof VOCAB / sizeof *VOCAB; i++)
        if (strcmp(VOCAB[i].op, op) == 0) return &VOCAB[i];
    for (size_t i = 0; i < n_seen; i++)
        if (strcmp(seen[i].op, op) == 0) return &seen[i];
    return NULL;
}

int rad_opschema_in_vocabulary(const char *op) {
    for (size_t i = 0; i < sizeof VOCAB / sizeof *VOCAB; i++)
        if (strcmp(VOCAB[i].op, op) == 0) return 1;
    return 0;
}

static int compare(const Schema *s, const char *op, const RadParam *p, uint32_t np, uint32_t nw, char *msg, size_t cap) {
    for (uint32_t i = 0; i < np || i < s->np; i++) {
        if (i >= s->np) {
            snprintf(msg, cap, "op '%s': parameter %u '%s' is not in its schema (fixed by %s: %u parameters)", op, i, p[i].name,
                     s->who, s->np);
            return RAD_E_ARG;
        }
        if (i >= np) {
            if (i >= s->np - s->np_opt) break; /* an optional trailing parameter left out */
            snprintf(msg, cap, "op '%s': parameter %u '%s' is missing (schema fixed by %s)", op, i, s->pname[i], s->who);
            return RAD_E_ARG;
        }
        if (p[i].role != s->prole[i]) {
            snprintf(msg, cap, "op '%s': parameter %u '%s' has role %d but its schema (fixed by %s) gives role %d", op, i,
                     p[i].name, (int)p[i].role, s->who, (int)s->prole[i]);
            return RAD_E_ARG;
        }
        if (strcmp(p[i].name, s->pname[i]) != 0 || p[i].kind != s->pkind[i]) {
            snprintf(msg, cap, "op '%s': parameter %u is %s '%s' but its schema (fixed by %s) has %s '%s'", op, i,
                     kind_name(p[i].kind), p[i].name, s->who, kind_name(s->pkind[i]), s->pname[i]);
            return RAD_E_ARG;
        }
    }
    if (nw > s->nw_max) {
        snprintf(msg, cap, "op '%s': %u weight operands; its schema (fixed by %s) takes at most %u", op, nw, s->who, s->nw_max);
        return RAD_E_ARG;
    }
    return RAD_OK;
}

int rad_opschema_check(const char *op, const RadParam *p, uint32_t np, uint32_t nw, const char *who, char *msg,
                       size_t cap) {
    pthread_mutex_lock(&mu);
    const Schema *s = find(op);
    int rc = RAD_OK;
    if (s) {
        rc = compare(s, op, p, np, nw, msg, cap);
    } else if (np > MAX_P) {
        snprintf(msg, cap, "op '%s': %u parameters (at most %d)", op, np, MAX_P);
        rc = RAD_E_ARG;
    } else {
        Schema *grown = realloc(seen, (n_seen + 1) * sizeof *seen);
        char *name = strdup(op), *by = strdup(who ? who : "a plugin");
        if (!grown || !name || !by) {
            if (grown) seen = grown;
            free(name), free(by);
            snprintf(msg, cap, "out of memory");
            rc = RAD_E_NOMEM;
        } else {
            seen = grown;
            Schema *n = &seen[n_seen];
            memset(n, 0, sizeof *n);
            n->op = name;
            n->who = by;
            n->np = np;
            n->nw_max = nw;
            for (uint32_t i = 0; i < np && rc == RAD_OK; i++) {
                n->pkind[i] = p[i].kind;
                n->prole[i] = p[i].role;
                if (!(n->pname[i] = strdup(p[i].name))) snprintf(msg, cap, "out of memory"), rc = RAD_E_NOMEM;
            }
            if (rc == RAD_OK) n_seen++;
            else {
                for (uint32_t i = 0; i < np; i++) free((char *)n->pname[i]);
                free(name), free(by);
            }
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

void rad_opschema_reset(void) {
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < n_seen; i++) {
        for (uint32_t j = 0; j < seen[i].np; j++) free((char *)seen[i].pname[j]);
        free((char *)seen[i].op);
        free((char *)seen[i].who);
    }
    free(seen);
    seen = NULL;
    n_seen = 0;
    pthread_mutex_unlock(&mu);
}
