/* rad_cvec.h — a control vector (RadBuildCtx::cvec, radiance --control-vector) added to the
 * residual stream, header-only: llama.cpp's `cvec.apply_to(cur, il)`,
 *
 *     after layer l's last residual add:  x = x + scale · dirs[l]
 *
 * for every layer l whose row is not all zeros. Layer 0 is never steered (llama.cpp numbers the
 * file's "direction.L" tensors from 1 and adds direction.L after layer L, counting from 0; the
 * core's RadControlVector keeps that numbering, row 0 zero), and neither is a layer the file
 * leaves out: its row is zero, nothing is declared for it, and it runs as without a vector.
 *
 * The rows reach a kernel as weights, because add_bias takes its bias as one (docs/OPS.md) and
 * a RadOperand of raw host data is no weight: the core serves row L of the loaded vector as the
 * weight RAD_CVEC_WEIGHT_PREFIX "L" (f32 [n_embd], the values to add, beside the container's
 * tensors; docs/PLUGINS.md, "Control vectors"), and a steered layer declares it here.
 *
 * Order. The add comes after the layer's residual add, as in llama.cpp and transformers, not into
 * the block's pending output y (x + (y + d) rounds differently from (x + y) + d): a steered layer
 * settles y into x (add, rad_block.h), then add_bias(x, direction). The next pre-norm finds
 * nothing pending and is a plain rmsnorm (no add_rmsnorm fusion at that one norm).
 *
 * Declare: rad_cvec_check once, then rad_cvec_declare after each layer's last block (its
 * output pending in r->y). Step: rad_cvec_step at the same place. */
#ifndef RAD_CVEC_H
#define RAD_CVEC_H

#include "rad_block.h"

/* The core's name for row L of the loaded vector (the spec's, not a checkpoint's). */
#define RAD_CVEC_WEIGHT_PREFIX "cvec.direction."

typedef struct RadCvecLayer {
    int on;                   /* this layer is steered: its row is not all zeros */
    rad_weight w;             /* f32 [n_embd] RAD_CVEC_WEIGHT_PREFIX "<layer>" */
    rad_op settle;            /* add(x, y -> x): the layer's pending output, first */
    rad_op add;               /* add_bias(x, w) */
} RadCvecLayer;

/* The vector against the model: n_layers and n_embd equal (the core's loader already checked
 * the file against the model, naming it; this refuses any other producer's), scale finite.
 * 0, or -1 with the refusal declared, naming the plugin and the field. */
static inline int rad_cvec_check(RadBuilder *b, const char *plugin, const RadControlVector *cv, uint32_t n_layers,
                                 uint32_t n_embd) {
    char line[300];
    line[0] = 0;
    if (!cv->dirs)
        snprintf(line, sizeof line, "%s: RadBuildCtx.cvec has no dirs", plugin);
    else if (cv->n_embd != n_embd)
        snprintf(line, sizeof line, "%s: RadBuildCtx.cvec.n_embd %u is not model.n_embd %u (a control vector for another model)",
                 plugin, cv->n_embd, n_embd);
    else if (cv->n_layers != n_layers)
        snprintf(line, sizeof line, "%s: RadBuildCtx.cvec.n_layers %u is not model.n_layers %u (a control vector for another model)",
                 plugin, cv->n_layers, n_layers);
    else if (!(cv->scale - cv->scale == 0.0f)) /* NaN or an infinity */
        snprintf(line, sizeof line, "%s: RadBuildCtx.cvec.scale is not finite", plugin);
    if (!line[0]) return 0;
    rad_declare_fail(b, line);
    return -1;
}

/* Layer l is steered: 0 < l and its row (times scale) is not all zeros. */
static inline int rad_cvec_steers(const RadControlVector *cv, uint32_t l) {
    if (!cv || l == 0 || l >= cv->n_layers || cv->scale == 0.0f) return 0;
    const float *row = cv->dirs + (size_t)l * cv->n_embd;
    for (uint32_t j = 0; j < cv->n_embd; j++)
        if (row[j] != 0.0f) return 1;
    return 0;
}

/* After layer l's last block (its output pending in r->y): nothing for an unsteered layer (or no
 * vector); else the row's weight, the settling add and add_bias over r->x. 0, or -1 when the core
 * refused one (it has named it). */
static inline int rad_cvec_declare(RadBuilder *b, const RadBlockGeom *g, const RadControlVector *cv, uint32_t l, RadResid *r,
                                   RadCvecLayer *c) {
    memset(c, 0, sizeof c[0]);
    c->w.id = c->settle.id = c->add.id = -1;
    if (!rad_cvec_steers(cv, l)) return 0;
    char name[64];
    snprintf(name, sizeof name, RAD_CVEC_WEIGHT_PREFIX "%u", l);
    RadWeightDecl d;
    memset(&d, 0, sizeof d);
    d.dtype = RAD_F32;
    d.rank = 1;
    d.shape[0] = g->n_embd;
    d.access = RAD_ACCESS_PER_TOKEN;
    d.shard = RAD_SHARD_NONE; /* the residual is whole on every rank */
    d.group = rad_group_layer(l);
    c->w = rad_decl_weight(b, name, &d);
    if (c->w.id < 0) return -1;
    c->settle = rad_resid_settle_declare(b, g, r); /* id < 0 when nothing was pending */
    c->add = RAD_OP(b, "add_bias", RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N", g->n_embd)), RAD_WEIGHTS(c->w));
    if (c->add.id < 0) return -1;
    rad_op_reads(b, c->add, RAD_BUFS(r->x), 1);
    rad_op_writes(b, c->add, RAD_BUFS(r->x), 1);
    c->on = 1;
    return 0;
}

static inline int rad_cvec_step(RadCtx *ctx, const RadCvecLayer *c, const RadResid *r, uint64_t n) {
    int rc;
    if (!c->on || n == 0) return 0;
    if ((rc = rad_resid_settle_step(ctx, c->settle, r, n)) != 0) return rc;
    return RAD_ISSUE_N(ctx, c->add, n, RAD_W(c->w), brows(r->x, n));
}

#endif
