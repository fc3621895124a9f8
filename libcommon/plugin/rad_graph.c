/* The core's side of rad_arch.h's builder calls: records a plugin's declarations. */
#include "libcommon/plugin/rad_graph.h"
#include "libcommon/plugin/rad_opschema.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/base/rad_dict.h"

#define ARENA_ALIGN 256u

static RadGraph *G(RadBuilder *b) { return (RadGraph *)b; }

static char *dup_str(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* name, stored once per graph (ops share their parameters' names). NULL when out of memory. */
static const char *intern_name(RadGraph *g, const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < g->n_pnames; i++)
        if (strcmp(g->pnames[i], name) == 0) return g->pnames[i];
    char **np = realloc(g->pnames, (size_t)(g->n_pnames + 1) * sizeof *np);
    if (!np) return NULL;
    g->pnames = np;
    char *d = dup_str(name);
    if (!d) return NULL;
    return g->pnames[g->n_pnames++] = d;
}

/* The first refusal wins; later calls see g->failed and do nothing harmful. */
__attribute__((format(printf, 2, 3))) static void gfail(RadGraph *g, const char *fmt, ...) {
    if (g->failed) return;
    g->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->msg, sizeof g->msg, fmt, ap);
    va_end(ap);
}

#define GROW(arr, n) do {                                                   \
        if (((n) & ((n) - 1)) == 0) {                                         \
            void *np_ = realloc((arr), (size_t)((n) ? (n) * 2 : 8) * sizeof *(arr)); \
            if (!np_) { gfail(g, "out of memory"); break; }                   \
            (arr) = np_;                                                      \
        }                                                                     \
    } while (0)

static int valid_name(const char *s) { return s && *s && strlen(s) < 256; }

static int is_plain(RadDType t) {
    const RadEncInfo *i = rad_enc_info((RadEnc)t);
    return i && i->block_elems == 1;
}

/* An exact widening: every value of `stored` is representable in `declared`. */
static int exact_widening(RadEnc stored, RadDType declared) {
    if ((int)stored == (int)declared || declared == RAD_ANY) return 1;
    if (declared == RAD_F32) return stored == RAD_ENC_F16 || stored == RAD_ENC_BF16;
    if (declared == RAD_F64) return stored == RAD_ENC_F32 || stored == RAD_ENC_F16 || stored == RAD_ENC_BF16;
    return 0;
}

static const char *enc_name(RadEnc e) {
    const RadEncInfo *i = rad_enc_info(e);
    return i ? i->name : "absent";
}
static const char *dtype_name(RadDType t) { return t == RAD_ANY ? "any" : enc_name((RadEnc)t); }

/* ---- weights and the name map ------------------------------------------------------------ */

static rad_weight b_decl_weight(RadBuilder *b, const char *name, const RadWeightDecl *d, size_t sz) {
    RadGraph *g = G(b);
    if (g->failed) return RAD_NONE_W;
    if (!valid_name(name)) return gfail(g, "a weight has no name"), RAD_NONE_W;
    if (rad_graph_weight(g, name) >= 0) return gfail(g, "weight '%s' declared twice", name), RAD_NONE_W;
    RadWeightDecl c;
    memset(&c, 0, sizeof c);
    memcpy(&c, d, sz < sizeof c ? sz : sizeof c);
    if (c.rank < 1 || c.rank > 4) return gfail(g, "weight '%s': rank %u (1..4)", name, c.rank), RAD_NONE_W;
    for (uint32_t i = 0; i < c.rank; i++)
        if (!c.shape[i]) return gfail(g, "weight '%s': dim %u is 0", name, i), RAD_NONE_W;
    if (c.dtype != RAD_ANY && !rad_enc_info((RadEnc)c.dtype))
        return gfail(g, "weight '%s': unknown dtype %d", name, (int)c.dtype), RAD_NONE_W;
    if (c.n_row_parts && (c.shard != RAD_SHARD_ROW || !c.row_parts))
        return gfail(g, "weight '%s': row_parts need shard ROW and a parts array", name), RAD_NONE_W;
    GROW(g->w, g->n_w);
    if (g->failed) return RAD_NONE_W;
    RadGWeight *w = &g->w[g->n_w];
    memset(w, 0, sizeof *w);
    w->name = dup_str(name);
    if (c.n_row_parts) {
        uint64_t *p = malloc(c.n_row_parts * sizeof *p);
        if (p) memcpy(p, c.row_parts, c.n_row_parts * sizeof *p);
        c.row_parts = p;
    }
    if (sz < offsetof(RadWeightDecl, shard_spans) + sizeof c.shard_spans) c.n_shard_spans = 0, c.shard_spans = NULL;
    if (c.n_shard_spans) {
        uint64_t *p = malloc(2 * (size_t)c.n_shard_spans * sizeof *p);
        if (p && c.shard_spans) memcpy(p, c.shard_spans, 2 * (size_t)c.n_shard_spans * sizeof *p);
        else c.n_shard_spans = 0;
        c.shard_spans = p;
    }
    c.source = dup_str(c.source);
    c.planes = dup_str(c.planes);
    w->d = c;
    uint32_t rank = 0;
    uint64_t shape[RAD_MAX_RANK] = {0};
    w->enc = g->lookup ? g->lookup(g->lookup_user, c.source ? c.source : name, &c, g->maps, g->n_maps, &rank, shape)
                       : RAD_ENC_COUNT;
    if (rank) w->stored_rows = shape[0], w->stored_rank = rank, memcpy(w->stored_shape, shape, rank * sizeof *shape);
    g->n_w++;
    if (w->enc == RAD_ENC_COUNT) {
        if (!c.optional) gfail(g, "weight '%s': missing (not in the checkpoint/container, and not optional)", name);
    } else if (!exact_widening(w->enc, c.dtype)) {
        gfail(g, "weight '%s': stored as %s, declared %s (only an exact widening may differ)", name, enc_name(w->enc),
              dtype_name(c.dtype));
    } else if (rank && g->ctx && g->ctx->world_size <= 1 &&
               (rank != c.rank || memcmp(shape, c.shape, rank * sizeof *shape) != 0)) {
        char a[96] = "", s2[96] = "";
        size_t ka = 0, ks = 0;
        for (uint32_t i = 0; i < c.rank; i++) ka += (size_t)snprintf(a + ka, sizeof a - ka, "%s%" PRIu64, i ? "," : "", c.shape[i]);
        for (uint32_t i = 0; i < rank && ks < sizeof s2; i++) ks += (size_t)snprintf(s2 + ks, sizeof s2 - ks, "%s%" PRIu64, i ? "," : "", shape[i]);
        gfail(g, "weight '%s': shape mismatch: declared [%s], stored [%s]", name, a, s2);
    } else if (rank && g->ctx && g->ctx->world_size > 1) { /* this rank's slice must be the declared shape */
        RadGSlice sl;
        rad_graph_weight_slice(g, g->n_w - 1, &sl);
    }
    return (rad_weight){g->n_w - 1};
}

static int b_decl_name_map(RadBuilder *b, const RadNameMap *m, size_t sz) {
    RadGraph *g = G(b);
    if (g->failed) return RAD_E_ARG;
    RadNameMap c;
    memset(&c, 0, sizeof c);
    memcpy(&c, m, sz < sizeof c ? sz : sizeof c);
    if (!valid_name(c.dst) || !c.src || !c.src[0]) return gfail(g, "a name-map entry lacks its destination or sources"), RAD_E_ARG;
    if ((unsigned)c.kind > RAD_MAP_COLS) return gfail(g, "name map '%s': unknown kind %d", c.dst, (int)c.kind), RAD_E_ARG;
    int n = 0;
    while (c.src[n]) n++;
    if ((c.kind == RAD_MAP_WNORM || c.kind == RAD_MAP_EMA) && n != 2)
        return gfail(g, "name map '%s': %s takes 2 sources, got %d", c.dst, c.kind == RAD_MAP_WNORM ? "WNORM" : "EMA", n), RAD_E_ARG;
    if (c.kind == RAD_MAP_ROWS && c.perm == RAD_PERM_ROPE_UNINTERLEAVE && !c.heads)
        return gfail(g, "name map '%s': a rope permutation needs heads", c.dst), RAD_E_ARG;
    if (c.add != 0 && (c.kind != RAD_MAP_COPY || !isfinite(c.add)))
        return gfail(g, "name map '%s': add %g needs a COPY entry and a finite value", c.dst, (double)c.add), RAD_E_ARG;
    /* a field another kind reads would be carried and ignored: refused, naming it */
    static const char *const KIND[] = {"COPY", "CONCAT", "WNORM", "ROWS", "TRANSPOSE", "EMA", "TAP", "COLS"};
    const char *stray = c.kind != RAD_MAP_CONCAT && c.axis ? "axis"
                        : c.kind != RAD_MAP_ROWS && c.kind != RAD_MAP_COLS && (c.begin || c.end) ? "begin/end"
                        : c.kind != RAD_MAP_TAP && c.index ? "index"
                        : c.kind != RAD_MAP_ROWS && (c.perm || c.heads) ? "perm/heads"
                        : c.kind != RAD_MAP_EMA && c.eps != 0 ? "eps" : NULL;
    if (stray)
        return gfail(g, "name map '%s': a %s entry sets %s, which only another kind reads", c.dst, KIND[c.kind], stray), RAD_E_ARG;
    GROW(g->maps, g->n_maps);
    if (g->failed) return RAD_E_NOMEM;
    const char **src = calloc((size_t)n + 1, sizeof *src);
    for (int i = 0; src && i < n; i++) src[i] = dup_str(c.src[i]);
    c.src = src;
    c.dst = dup_str(c.dst);
    g->maps[g->n_maps].m = c;
    g->maps[g->n_maps].n_src = n;
    g->n_maps++;
    return RAD_OK;
}

static int wvalid(RadGraph *g, rad_weight w) { return w.id >= 0 && w.id < g->n_w; }

static RadEnc b_weight_encoding(RadBuilder *b, rad_weight w) {
    RadGraph *g = G(b);
    return wvalid(g, w) ? g->w[w.id].enc : RAD_ENC_COUNT;
}

/* Rank r's share of `total` rows over ws ranks: balanced, the first total % ws ranks one row
 * more, so the ranks' spans tile [0, total) with nothing dropped (an uneven split such as 9
 * heads' rows over 2 ranks). */
static void balanced_span(uint64_t total, uint32_t r, uint32_t ws, uint64_t *begin, uint64_t *len) {
    uint64_t base = total / ws, rem = total % ws;
    *begin = (uint64_t)r * base + (r < rem ? r : rem);
    *len = base + (r < rem ? 1 : 0);
}

/* Rank r's slice of a stored weight over ws ranks, against its declaration; 0, or -1 with why
 * written (naming the weight, the rank and what does not fit). */
static int weight_slice(const RadGWeight *gw, uint32_t r, uint32_t ws, RadGSlice *s, char *why, size_t nwhy) {
    const RadWeightDecl *d = &gw->d;
    const uint32_t rank = gw->stored_rank ? gw->stored_rank : d->rank;
    const uint64_t *shape = gw->stored_rank ? gw->stored_shape : d->shape;
    memset(s, 0, sizeof *s);
    s->n = 1, s->len[0] = shape[0], s->whole = 1;
    if (d->shard == RAD_SHARD_NONE || ws <= 1) return 0;
    const uint32_t axis = d->shard == RAD_SHARD_COL ? 1 : 0;
    if (axis >= rank || rank != d->rank) {
        snprintf(why, nwhy, "weight '%s': shard %s of a rank-%u tensor", gw->name, axis ? "COL" : "ROW", rank);
        return -1;
    }
    for (uint32_t i = 0; i < rank; i++)
        if (i != axis && shape[i] != d->shape[i]) {
            snprintf(why, nwhy, "weight '%s': dim %u declared %" PRIu64 ", stored %" PRIu64 " (only the split dim %u divides)",
                     gw->name, i, d->shape[i], shape[i], axis);
            return -1;
        }
    const uint32_t parts = axis == 0 && d->n_row_parts ? d->n_row_parts : 1;
    if (parts > RAD_GRAPH_MAX_SPANS) {
        snprintf(why, nwhy, "weight '%s': %u row parts (at most %d under tensor parallelism)", gw->name, parts, RAD_GRAPH_MAX_SPANS);
        return -1;
    }
    if (d->n_shard_spans && d->n_shard_spans != parts) {
        snprintf(why, nwhy, "weight '%s': %u shard spans for %u part%s", gw->name, d->n_shard_spans, parts, parts > 1 ? "s" : "");
        return -1;
    }
    s->axis = axis, s->n = parts, s->whole = 0;
    uint64_t off = 0, sum = 0;
    for (uint32_t i = 0; i < parts; i++) {
        const uint64_t width = parts > 1 ? d->row_parts[i] : shape[axis];
        if (d->n_shard_spans) s->begin[i] = off + d->shard_spans[2 * i], s->len[i] = d->shard_spans[2 * i + 1];
        else balanced_span(width, r, ws, &s->begin[i], &s->len[i]), s->begin[i] += off;
        if (!s->len[i] || s->begin[i] + s->len[i] > off + width) {
            snprintf(why, nwhy, "weight '%s': rank %u of %u: span [%" PRIu64 ", +%" PRIu64 ") of part %u lies outside its %" PRIu64
                     " %s", gw->name, r, ws, s->begin[i] - off, s->len[i], i, width, axis ? "columns" : "rows");
            return -1;
        }
        off += width, sum += s->len[i];
    }
    if (off != shape[axis] || sum != d->shape[axis]) {
        if (parts == 1)
            snprintf(why, nwhy, "weight '%s': rank %u of %u owns %s [%" PRIu64 ", %" PRIu64 ") of %" PRIu64 " but declares %" PRIu64,
                     gw->name, r, ws, axis ? "columns" : "rows", s->begin[0], s->begin[0] + s->len[0], shape[axis], d->shape[axis]);
        else
            snprintf(why, nwhy, "weight '%s': rank %u of %u owns %" PRIu64 " rows of its %u parts but declares %" PRIu64, gw->name,
                     r, ws, sum, parts, d->shape[axis]);
        return -1;
    }
    return 0;
}

int rad_graph_weight_slice(RadGraph *g, int w, RadGSlice *s) {
    const uint32_t r = g->ctx ? g->ctx->rank : 0, ws = g->ctx && g->ctx->world_size ? g->ctx->world_size : 1;
    char why[320];
    if (w < 0 || w >= g->n_w) return RAD_E_ARG;
    if (weight_slice(&g->w[w], r, ws, s, why, sizeof why) == 0) return RAD_OK;
    gfail(g, "%s", why);
    return RAD_E_SHAPE;
}

/* This rank's rows (or columns) of a sharded weight: whole (part = UINT32_MAX, refused for a
 * weight that stacks parts: its rows are a slice of each) or of one stacked part; the begin
 * is in the stored tensor's coordinates. */
static int b_weight_shard_span(RadBuilder *b, rad_weight w, uint32_t part, uint64_t *begin, uint64_t *len) {
    RadGraph *g = G(b);
    if (!wvalid(g, w)) return RAD_E_ARG;
    const RadGWeight *gw = &g->w[w.id];
    RadGSlice s;
    int rc = rad_graph_weight_slice(g, w.id, &s);
    if (rc) return rc;
    if (part == UINT32_MAX) {
        if (s.n > 1) {
            gfail(g, "weight '%s': stacks %u row parts; a rank's rows are rad_weight_shard_parts, not one span", gw->name, s.n);
            return RAD_E_ARG;
        }
        *begin = s.begin[0], *len = s.len[0];
        return RAD_OK;
    }
    if (!gw->d.n_row_parts || part >= gw->d.n_row_parts) return RAD_E_ARG;
    if (s.whole) { /* every row is this rank's: the part's own rows */
        uint64_t off = 0;
        for (uint32_t i = 0; i < part; i++) off += gw->d.row_parts[i];
        *begin = off, *len = gw->d.row_parts[part];
        return RAD_OK;
    }
    *begin = s.begin[part], *len = s.len[part];
    return RAD_OK;
}

/* ---- buffers and KV ------------------------------------------------------------------------- */

static int bvalid(RadGraph *g, rad_buf x) { return x.id >= 0 && x.id < g->n_bufs; }

static rad_buf b_decl_buffer(RadBuilder *b, const char *name, const RadBufDecl *d, size_t sz) {
    RadGraph *g = G(b);
    if (g->failed) return RAD_NONE_B;
    if (!valid_name(name)) return gfail(g, "a buffer has no name"), RAD_NONE_B;
    for (int i = 0; i < g->n_bufs; i++)
        if (strcmp(g->bufs[i].name, name) == 0) return gfail(g, "buffer '%s' declared twice", name), RAD_NONE_B;
    RadBufDecl c;
    memset(&c, 0, sizeof c);
    memcpy(&c, d, sz < sizeof c ? sz : sizeof c);
    if (c.rank < 1 || c.rank > 4 || !is_plain(c.dtype))
        return gfail(g, "buffer '%s': rank %u or dtype %s not allowed", name, c.rank, dtype_name(c.dtype)), RAD_NONE_B;
    if (c.kind == RAD_BUF_DERIVED && !c.derive) return gfail(g, "buffer '%s': DERIVED without a derivation", name), RAD_NONE_B;
    uint64_t bytes = rad_enc_info((RadEnc)c.dtype)->block_bytes;
    for (uint32_t i = 0; i < c.rank; i++) {
        if (!c.shape[i] || bytes > UINT64_MAX / c.shape[i])
            return gfail(g, "buffer '%s': dim %u is 0 or the size overflows", name, i), RAD_NONE_B;
        bytes *= c.shape[i];
    }
    GROW(g->bufs, g->n_bufs);
    if (g->failed) return RAD_NONE_B;
    RadGBuf *x = &g->bufs[g->n_bufs];
    memset(x, 0, sizeof *x);
    x->name = dup_str(name);
    c.derive = dup_str(c.derive);
    x->d = c;
    x->bytes = bytes;
    x->first = x->last = -1;
    return (rad_buf){g->n_bufs++};
}

static rad_kv b_decl_kv_group(RadBuilder *b, const char *name, const RadKvDecl *d, size_t sz) {
    RadGraph *g = G(b);
    if (g->failed) return (rad_kv){-1};
    if (!valid_name(name)) return gfail(g, "a KV group has no name"), (rad_kv){-1};
    RadKvDecl c;
    memset(&c, 0, sizeof c);
    memcpy(&c, d, sz < sizeof c ? sz : sizeof c);
    if ((unsigned)c.kind > RAD_KV_RING) return gfail(g, "KV group '%s': unknown kind %d", name, (int)c.kind), (rad_kv){-1};
    if ((c.kind == RAD_KV_FULL || c.kind == RAD_KV_WINDOW) && (!c.head_dim || !c.n_head_kv))
        return gfail(g, "KV group '%s': head_dim and n_head_kv must be set", name), (rad_kv){-1};
    if (c.kind == RAD_KV_WINDOW && !c.window) return gfail(g, "KV group '%s': WINDOW without a window", name), (rad_kv){-1};
    GROW(g->kvs, g->n_kvs);
    if (g->failed) return (rad_kv){-1};
    RadGKv *k = &g->kvs[g->n_kvs];
    memset(k, 0, sizeof *k);
    k->name = dup_str(name);
    k->d = c;
    k->block_size = rad_select_kv_block_size(&g->sel, g->ctx ? g->ctx->max_tok : 1, c.kind == RAD_KV_WINDOW ? c.window : 0);
    return (rad_kv){g->n_kvs++};
}

static int kvvalid(RadGraph *g, rad_kv k) { return k.id >= 0 && k.id < g->n_kvs; }

static uint32_t b_kv_block_size(RadBuilder *b, rad_kv k) {
    RadGraph *g = G(b);
    return kvvalid(g, k) ? g->kvs[k.id].block_size : 0;
}

static int b_bind_layer_kv(RadBuilder *b, uint32_t layer, rad_kv k) {
    RadGraph *g = G(b);
    if (!kvvalid(g, k)) return gfail(g, "layer %u bound to an undeclared KV group", layer), RAD_E_ARG;
    if (layer > 4096) return gfail(g, "layer %u out of range", layer), RAD_E_ARG;
    if ((int)layer >= g->n_layer_kv) {
        int *n = realloc(g->layer_kv, (layer + 1) * sizeof *n);
        if (!n) return gfail(g, "out of memory"), RAD_E_NOMEM;
        for (uint32_t i = (uint32_t)g->n_layer_kv; i <= layer; i++) n[i] = -1;
        g->layer_kv = n;
        g->n_layer_kv = (int)layer + 1;
    }
    g->layer_kv[layer] = k.id;
    return RAD_OK;
}

static int b_kv_refine(RadBuilder *b, rad_kv k, int what) {
    RadGraph *g = G(b);
    if (!kvvalid(g, k)) return RAD_E_ARG;
    if (what == 1) g->kvs[k.id].zero = 1;
    else if (what == 2) g->kvs[k.id].replicated = 1;
    else if (what == 3) g->kvs[k.id].dense_read = 1;
    else return RAD_E_ARG;
    return RAD_OK;
}

/* ---- ops ------------------------------------------------------------------------------------ */

/* The op's bucket table under the graph's options (rad_select.h): the engine runs these picks. */
static void resolve(RadGraph *g, RadGOp *o) {
    RadEnc enc[16], *w_enc = o->n_w <= 16 ? enc : malloc(o->n_w * sizeof *w_enc);
    if (!w_enc) {
        gfail(g, "out of memory");
        return;
    }
    for (uint32_t j = 0; j < o->n_w; j++) w_enc[j] = g->w[o->w[j].id].enc;
    const RadSelectOp sop = {.op = o->op, .params = o->params, .n_params = o->n_params, .w_enc = w_enc, .n_w = o->n_w,
                             .index1 = (int32_t)(o - g->ops) + 1}; /* its declared index: what a tuning table names */
    int rc = rad_select_table(&g->sel, &sop, &o->sel);
    if (w_enc != enc) free(w_enc);
    if (rc) {
        gfail(g, "out of memory selecting a kernel for op '%s'", o->op);
        return;
    }
    if (rad_select_served(&o->sel)) {
        o->kernel = o->sel.pick[0];
        o->kernel_lib = g->sel.libs->p[o->sel.pick_lib[0]].info->name;
    }
}

static rad_op b_decl_op(RadBuilder *b, const char *op, const RadParam *p, uint32_t np, const rad_weight *w, uint32_t nw) {
    RadGraph *g = G(b);
    if (g->failed) return (rad_op){-1};
    if (!valid_name(op)) return gfail(g, "an op has no name"), (rad_op){-1};
    int ranged = 0;
    for (uint32_t i = 0; i < np; i++) {
        if (!valid_name(p[i].name)) return gfail(g, "op '%s': parameter %u has no name", op, i), (rad_op){-1};
        if (p[i].kind == RAD_PARAM_RANGE) {
            ranged++;
            if (p[i].lo > p[i].hi || p[i].hi < 1)
                return gfail(g, "op '%s': range '%s' is [%" PRId64 ", %" PRId64 "]", op, p[i].name, p[i].lo, p[i].hi), (rad_op){-1};
        }
    }
    if (ranged != 1) return gfail(g, "op '%s': %d ranged parameters (exactly one gives the selector its buckets)", op, ranged), (rad_op){-1};
    for (uint32_t i = 0; i < nw; i++)
        if (!wvalid(g, w[i])) return gfail(g, "op '%s': weight operand %u was not declared", op, i), (rad_op){-1};
    char why[300];
    if (rad_opschema_check(op, p, np, nw, g->plugin_name, why, sizeof why) != RAD_OK) return gfail(g, "%s", why), (rad_op){-1};
    GROW(g->ops, g->n_ops);
    if (g->failed) return (rad_op){-1};
    RadGOp *o = &g->ops[g->n_ops];
    memset(o, 0, sizeof *o);
    o->op = dup_str(op);
    o->params = malloc((np ? np : 1) * sizeof *o->params);
    o->w = malloc((nw ? nw : 1) * sizeof *o->w);
    if (!o->op || !o->params || !o->w) return gfail(g, "out of memory"), (rad_op){-1};
    for (uint32_t i = 0; i < np; i++) {
        o->params[i] = p[i];
        o->params[i].name = intern_name(g, p[i].name);
        if (p[i].name && !o->params[i].name) return gfail(g, "out of memory"), (rad_op){-1};
    }
    o->n_params = np;
    if (nw) memcpy(o->w, w, nw * sizeof *w);
    o->n_w = nw;
    o->lane1 = g->lane1_open;
    resolve(g, o);
    return (rad_op){g->n_ops++};
}

static int b_op_access(RadBuilder *b, rad_op op, int writes, const rad_buf *bufs, uint32_t n) {
    RadGraph *g = G(b);
    if (op.id < 0 || op.id >= g->n_ops) return gfail(g, "reads/writes of an undeclared op"), RAD_E_ARG;
    RadGOp *o = &g->ops[op.id];
    for (uint32_t i = 0; i < n; i++)
        if (!bvalid(g, bufs[i])) return gfail(g, "op '%s': buffer operand %u was not declared", o->op, i), RAD_E_ARG;
    rad_buf **dst = writes ? &o->writes : &o->reads;
    uint32_t *cnt = writes ? &o->n_writes : &o->n_reads;
    rad_buf *nb = realloc(*dst, (*cnt + n + 1) * sizeof *nb);
    if (!nb) return gfail(g, "out of memory"), RAD_E_NOMEM;
    if (n) memcpy(nb + *cnt, bufs, n * sizeof *bufs);
    *dst = nb;
    *cnt += n;
    return RAD_OK;
}

/* Resolved exactly when the engine will have a kernel for every bucket; a false answer is the
 * plugin's cue to emit the chain, so the op is marked declined (never issued). */
static int b_op_resolved(RadBuilder *b, rad_op op) {
    RadGraph *g = G(b);
    if (op.id < 0 || op.id >= g->n_ops) return 0;
    RadGOp *o = &g->ops[op.id];
    if (rad_select_served(&o->sel)) return 1;
    o->declined = 1;
    return 0;
}

static int b_op_declared(RadBuilder *b, const char *op) { return op && rad_select_declared(&G(b)->sel, op); }

static int b_buf_concurrent(RadBuilder *b, rad_buf x) {
    RadGraph *g = G(b);
    if (!bvalid(g, x)) return gfail(g, "rad_buf_concurrent of an undeclared buffer"), RAD_E_ARG;
    g->bufs[x.id].concurrent = 1;
    return RAD_OK;
}

static int b_lane1_window(RadBuilder *b, int begin) {
    RadGraph *g = G(b);
    if (begin) {
        if (g->lane1_open || g->lane1_begin >= 0) return gfail(g, "a second lane-1 window (an architecture declares one)"), RAD_E_ARG;
        g->lane1_open = 1;
        g->lane1_begin = g->n_ops;
    } else {
        if (!g->lane1_open) return gfail(g, "lane-1 window closed without being opened"), RAD_E_ARG;
        g->lane1_open = 0;
        g->lane1_end = g->n_ops - 1;
    }
    return RAD_OK;
}

static int b_declare_output(RadBuilder *b, int what, rad_buf x) {
    RadGraph *g = G(b);
    if (what == 3) return g->scores = 1, RAD_OK;
    if (!bvalid(g, x)) return gfail(g, "declared output is not a declared buffer"), RAD_E_ARG;
    if (what == 1) g->logits = x;
    else if (what == 2) g->pooled = x;
    else return RAD_E_ARG;
    if (g->logits.id >= 0 && g->pooled.id >= 0) return gfail(g, "a program declares logits or pooled output, not both"), RAD_E_ARG;
    return RAD_OK;
}

static int b_declare_drafter(RadBuilder *b, const RadDrafterDecl *d) {
    RadGraph *g = G(b);
    if (g->has_drafter) return gfail(g, "a second drafter"), RAD_E_ARG;
    memset(&g->drafter, 0, sizeof g->drafter);
    memcpy(&g->drafter, d, d->struct_size && d->struct_size < sizeof *d ? d->struct_size : sizeof *d);
    g->has_drafter = 1;
    return RAD_OK;
}

static int b_drafter_refine(RadBuilder *b, int what) {
    RadGraph *g = G(b);
    if (!g->has_drafter) return gfail(g, "a drafter refinement before rad_declare_drafter"), RAD_E_ARG;
    if (what == 1) g->drafter_shared_kv = 1;
    else if (what == 2) g->drafter_tree = 1;
    else if (what == 3) g->drafter_short_block = 1;
    else return gfail(g, "drafter refinement %d is none the ABI names (1 shared_kv, 2 tree, 3 short_block)", what), RAD_E_ARG;
    return RAD_OK;
}

static int b_declare_encoder(RadBuilder *b, const RadEncoderDecl *d) { (void)d; G(b)->n_encoders++; return RAD_OK; }
static int b_declare_generator(RadBuilder *b, const RadGeneratorDecl *d) { (void)d; G(b)->n_generators++; return RAD_OK; }

static void b_note(RadBuilder *b, const char *line) {
    RadGraph *g = G(b);
    GROW(g->notes, g->n_notes);
    if (!g->failed) g->notes[g->n_notes++] = dup_str(line);
}

static int b_fail(RadBuilder *b, const char *what) {
    gfail(G(b), "%s", what ? what : "refused");
    return RAD_E_ARG;
}

static int b_set_model(RadBuilder *b, void *model) {
    G(b)->model = model;
    return RAD_OK;
}

static void *b_alloc(RadBuilder *b, size_t bytes) {
    RadGraph *g = G(b);
    GROW(g->allocs, g->n_allocs);
    if (g->failed) return NULL;
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) return gfail(g, "out of memory (%zu bytes for the plugin's state)", bytes), NULL;
    return g->allocs[g->n_allocs++] = p;
}

static const RadBuilderApi API = {
    sizeof(RadBuilderApi), b_decl_weight, b_decl_name_map, b_weight_encoding, b_weight_shard_span,
    b_decl_buffer, b_decl_kv_group, b_kv_block_size, b_bind_layer_kv, b_kv_refine, b_decl_op,
    b_op_access, b_op_resolved, b_op_declared, b_buf_concurrent, b_lane1_window, b_declare_output,
    b_declare_drafter, b_drafter_refine, b_declare_encoder, b_declare_generator, b_note, b_fail,
    b_set_model, b_alloc,
};

/* ---- driving a declare ---------------------------------------------------------------------- */

RadBuildCtx rad_build_ctx_for(const RadModelMeta *m, const RadStepBounds *b) {
    uint32_t ctx = b->max_ctx;
    if (!ctx) ctx = m->n_ctx_train > 0 ? (uint32_t)m->n_ctx_train : 4096;
    if (!b->max_ctx && ctx > RAD_SERVE_CTX_CAP) ctx = RAD_SERVE_CTX_CAP;
    uint32_t tok = b->max_tok ? b->max_tok : RAD_SERVE_MAX_TOK;
    return (RadBuildCtx){.struct_size = sizeof(RadBuildCtx), .world_size = 1, .max_tok = tok,
                         .max_seqs = b->max_seqs ? b->max_seqs : RAD_SERVE_MAX_SEQS, .max_ctx = ctx,
                         .max_mixed_tok = tok, .kv_dtype = b->kv_dtype ? b->kv_dtype : RAD_F32, .state_dtype = RAD_F32,
                         .scope = "", .max_out_rows = b->max_out_rows};
}

/* Every attn_paged's `window` (0 when omitted) against the KV group its layer is bound to: a
 * kernel told another window than the one the group keeps blocks for would read released
 * blocks, or silently attend to too much. */
static void check_attn_windows(RadGraph *g) {
    for (int o = 0; o < g->n_ops && !g->failed; o++) {
        const RadGOp *op = &g->ops[o];
        int64_t layer, window = 0;
        if (strcmp(op->op, "attn_paged") != 0 || !rad_graph_op_int(op, "layer", &layer)) continue;
        rad_graph_op_int(op, "window", &window);
        if (layer < 0 || layer >= g->n_layer_kv || g->layer_kv[layer] < 0) continue;
        const RadGKv *k = &g->kvs[g->layer_kv[layer]];
        const int64_t want = k->d.kind == RAD_KV_WINDOW ? (int64_t)k->d.window : 0;
        if (window != want)
            gfail(g, "op 'attn_paged' (#%d), layer %" PRId64 ": window %" PRId64 " but its KV group '%s' has window %" PRId64
                     "%s", o, layer, window, k->name, want, want ? "" : " (full attention)");
    }
}

/* The core's own op after the plugin's (docs/OPS.md, "argmax"): each logits row's greedy id, which
 * the engine issues after a step on a device deployment whose rows all decode greedily, so one id
 * a row crosses to the host instead of a row of logits. Declined where no library serves it. */
static void declare_argmax(RadGraph *g) {
    g->argmax = -1, g->argmax_ids = RAD_NONE_B;
    if (g->failed || g->logits.id < 0) return;
    const RadGBuf *L = &g->bufs[g->logits.id];
    if (L->d.rank != 2 || L->d.dtype != RAD_F32 || L->d.shape[1] > (1u << 24)) return;
    const RadBufDecl d = {.dtype = RAD_F32, .rank = 2, .shape = {L->d.shape[0], 1}, .kind = L->d.kind};
    const rad_buf ids = b_decl_buffer(&g->head, "core.argmax_ids", &d, sizeof d);
    const RadParam p[2] = {RAD_RANGE("M", 1, (int64_t)L->d.shape[0]), RAD_INT("N", (int64_t)L->d.shape[1])};
    const rad_op op = b_decl_op(&g->head, "argmax", p, 2, NULL, 0);
    if (g->failed || b_op_access(&g->head, op, 0, &g->logits, 1) || b_op_access(&g->head, op, 1, &ids, 1)) return;
    if (!rad_select_served(&g->ops[op.id].sel)) g->ops[op.id].declined = 1;
    g->argmax = op.id, g->argmax_ids = ids;
}

int rad_graph_declare(RadGraph *g, const RadPlugin *plugin, const RadModelMeta *meta, const RadBuildCtx *ctx,
                      const RadSelectOpts *sel, RadWeightLookup lookup, void *lookup_user, RadErr *e) {
    memset(g, 0, sizeof *g);
    g->head.struct_size = sizeof g->head;
    g->head.api = &API;
    g->lookup = lookup;
    g->lookup_user = lookup_user;
    if (sel) g->sel = *sel;
    g->ctx = ctx;
    g->plugin_name = plugin->info->name;
    g->logits = g->pooled = g->argmax_ids = RAD_NONE_B;
    g->argmax = -1;
    g->lane1_begin = g->lane1_end = -1;
    int rc = plugin->declare(&g->head, meta, ctx);
    if (!g->failed && g->lane1_open) gfail(g, "the lane-1 window was never closed");
    if (!g->failed && rc == 0) check_attn_windows(g);
    if (!g->failed && rc == 0) declare_argmax(g);
    if (g->failed || rc != 0) {
        return rad_err_set(e, RAD_E_ARG, "plugin '%s': %s", plugin->info->name,
                           g->failed ? g->msg : "declare refused this model without saying why");
    }
    return RAD_OK;
}

void rad_graph_free(RadGraph *g) {
    for (int i = 0; i < g->n_w; i++) {
        free(g->w[i].name);
        free((void *)g->w[i].d.row_parts);
        free((void *)g->w[i].d.shard_spans);
        free((void *)g->w[i].d.source);
        free((void *)g->w[i].d.planes);
    }
    for (int i = 0; i < g->n_maps; i++) {
        for (int j = 0; j < g->maps[i].n_src; j++) free((void *)g->maps[i].m.src[j]);
        free((void *)g->maps[i].m.src);
        free((void *)g->maps[i].m.dst);
    }
    for (int i = 0; i < g->n_bufs; i++) {
        free(g->bufs[i].name);
        free((void *)g->bufs[i].d.derive);
    }
    for (int i = 0; i < g->n_kvs; i++) free(g->kvs[i].name);
    for (int i = 0; i < g->n_ops; i++) {
        RadGOp *o = &g->ops[i];
        free(o->params);
        free(o->w);
        free(o->reads);
        free(o->writes);
        free(o->op);
        rad_select_table_free(&o->sel);
    }
    for (int i = 0; i < g->n_notes; i++) free(g->notes[i]);
    for (int i = 0; i < g->n_pnames; i++) free(g->pnames[i]);
    free(g->pnames);
    for (int i = 0; i < g->n_allocs; i++) free(g->allocs[i]);
    free(g->allocs);
    free(g->w), free(g->maps), free(g->bufs), free(g->kvs), free(g->ops), free(g->layer_kv), free(g->notes);
    memset(g, 0, sizeof *g);
}

int rad_graph_op_int(const RadGOp *op, const char *name, int64_t *v) {
    for (uint32_t i = 0; i < op->n_params; i++)
        if (strcmp(op->params[i].name, name) == 0 && op->params[i].kind != RAD_PARAM_FLOAT) return *v = op->params[i].lo, 1;
    return 0;
}

int rad_graph_op_f64(const RadGOp *op, const char *name, double *v) {
    for (uint32_t i = 0; i < op->n_params; i++)
        if (strcmp(op->params[i].name, name) == 0 && op->params[i].kind == RAD_PARAM_FLOAT) return *v = op->params[i].f, 1;
    return 0;
}

int rad_graph_weight(const RadGraph *g, const char *name) {
    for (int i = 0; i < g->n_w; i++)
        if (strcmp(g->w[i].name, name) == 0) return i;
    return -1;
}

const RadGMap *rad_graph_map_for(const RadGraph *g, const char *dst, int nth) {
    for (int i = 0; i < g->n_maps; i++)
        if (strcmp(g->maps[i].m.dst, dst) == 0 && nth-- == 0) return &g->maps[i];
    return NULL;
}

int rad_graph_check_encodings(const RadGraph *g, RadErr *e) {
    for (int i = 0; i < g->n_ops; i++) {
        const RadGOp *o = &g->ops[i];
        if (o->declined || rad_select_served(&o->sel) || !o->n_w || !rad_select_declared(&g->sel, o->op)) continue;
        /* some library defines the op but none takes these weights: name the first refused */
        for (uint32_t j = 0; j < o->n_w; j++) {
            const RadGWeight *w = &g->w[o->w[j].id];
            if (w->enc == RAD_ENC_COUNT) continue;
            char libs[256];
            if (rad_select_enc_refusers(&g->sel, o->op, w->enc, libs, sizeof libs))
                return rad_err_set(e, RAD_E_UNSUPPORTED, "weight '%s' is %s, which no kernel for op '%s' accepts (%s)",
                                   w->name, enc_name(w->enc), o->op, libs);
        }
        return rad_err_set(e, RAD_E_UNSUPPORTED, "op '%s' (#%d): %s", o->op, i, o->sel.why);
    }
    return RAD_OK;
}

/* ---- the buffer plan ------------------------------------------------------------------------ */

static uint64_t align_up(uint64_t x) { return (x + ARENA_ALIGN - 1) & ~(uint64_t)(ARENA_ALIGN - 1); }

static int cmp_size_desc(const void *a, const void *b, void *ctx) {
    const RadGBuf *x = &((const RadGBuf *)ctx)[*(const int *)a], *y = &((const RadGBuf *)ctx)[*(const int *)b];
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

/* A buffer's live segments: from a write that does not read it (a new value) to the last use
 * of that value. A buffer reused by every layer is live in short runs, so two buffers whose runs
 * never meet (attention scratch and MLP scratch) share memory. */
typedef struct Seg { int a, b; } Seg;
typedef struct Live { Seg *s; int n, cap, open; } Live;

static int live_add(Live *l, int a, int b) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        Seg *g = realloc(l->s, (size_t)cap * sizeof *g);
        if (!g) return -1;
        l->s = g, l->cap = cap;
    }
    l->s[l->n++] = (Seg){a, b};
    return 0;
}

static int uses(const rad_buf *v, uint32_t n, int id) {
    for (uint32_t j = 0; j < n; j++)
        if (v[j].id == id) return 1;
    return 0;
}

static int live_together(const Live *x, const Live *y) {
    for (int i = 0; i < x->n; i++)
        for (int j = 0; j < y->n; j++)
            if (x->s[i].a <= y->s[j].b && y->s[j].a <= x->s[i].b) return 1;
    return 0;
}

int rad_graph_plan(RadGraph *g, RadErr *e) {
    Live *lv = calloc((size_t)(g->n_bufs ? g->n_bufs : 1), sizeof *lv);
    int *order = malloc((size_t)(g->n_bufs ? g->n_bufs : 1) * sizeof *order);
    int rc = RAD_OK;
    if (!lv || !order) {
        rc = rad_err_set(e, RAD_E_NOMEM, "out of memory planning buffers");
        goto out;
    }
    for (int i = 0; i < g->n_ops; i++) {
        const RadGOp *o = &g->ops[i];
        for (int pass = 0; pass < 2; pass++) {
            const rad_buf *v = pass ? o->writes : o->reads;
            uint32_t n = pass ? o->n_writes : o->n_reads;
            for (uint32_t j = 0; j < n; j++) {
                int id = v[j].id;
                RadGBuf *x = &g->bufs[id];
                if (x->first < 0) x->first = i;
                x->last = i;
                Live *l = &lv[id];
                int def = pass == 1 && !uses(o->reads, o->n_reads, id);
                if (def || !l->open) { /* a new value (or one read before any write: live from 0) */
                    if (l->open && l->s[l->n - 1].b < i) l->open = 0;
                    if (!l->open) {
                        if (live_add(l, def ? i : 0, i)) {
                            rc = rad_err_set(e, RAD_E_NOMEM, "out of memory planning buffers");
                            goto out;
                        }
                        l->open = 1;
                        continue;
                    }
                }
                l->s[l->n - 1].b = i;
            }
        }
    }
    int n = 0;
    g->persist_bytes = g->naive_bytes = g->arena_bytes = 0;
    for (int i = 0; i < g->n_bufs; i++) {
        RadGBuf *x = &g->bufs[i];
        Live *l = &lv[i];
        if (x->d.kind != RAD_BUF_TRANSIENT) {
            x->offset = g->persist_bytes;
            g->persist_bytes += align_up(x->bytes);
            continue;
        }
        int whole = 0;
        if (x->first < 0) { /* no declared use: assumed live for the whole program */
            x->undeclared_use = 1;
            x->first = 0;
            x->last = g->n_ops ? g->n_ops - 1 : 0;
            whole = 1;
        }
        if (x->concurrent && g->lane1_begin >= 0) { /* live across the whole lane-1 window */
            if (g->lane1_begin < x->first) x->first = g->lane1_begin;
            if (g->lane1_end > x->last) x->last = g->lane1_end;
            whole = 1;
        }
        /* what the host reads after the step (logits, pooled) lives to the end */
        if ((g->logits.id == i || g->pooled.id == i) && g->n_ops) x->last = g->n_ops - 1, whole = whole || l->n == 0;
        if ((g->logits.id == i || g->pooled.id == i) && l->n) l->s[l->n - 1].b = g->n_ops - 1;
        if (whole) {
            l->n = 0;
            if (live_add(l, x->first, x->last)) {
                rc = rad_err_set(e, RAD_E_NOMEM, "out of memory planning buffers");
                goto out;
            }
        }
        g->naive_bytes += align_up(x->bytes);
        order[n++] = i;
    }
    qsort_r(order, (size_t)n, sizeof *order, cmp_size_desc, g->bufs);
    /* greedy: each buffer at the lowest offset clear of every placed buffer it is live with */
    for (int a = 0; a < n; a++) {
        RadGBuf *x = &g->bufs[order[a]];
        uint64_t off = 0;
        for (int again = 1; again;) {
            again = 0;
            for (int c = 0; c < a; c++) {
                const RadGBuf *y = &g->bufs[order[c]];
                if (live_together(&lv[order[a]], &lv[order[c]]) && off < y->offset + align_up(y->bytes) &&
                    y->offset < off + align_up(x->bytes)) {
                    off = y->offset + align_up(y->bytes);
                    again = 1;
                }
            }
        }
        x->offset = off;
        if (off + align_up(x->bytes) > g->arena_bytes) g->arena_bytes = off + align_up(x->bytes);
    }
out:
    for (int i = 0; lv && i < g->n_bufs; i++) free(lv[i].s);
    free(lv);
    free(order);
    return rc;
}

/* ---- text ---------------------------------------------------------------------------------- */

static void dump_shape(FILE *f, uint32_t rank, const uint64_t *s) {
    fputc('[', f);
    for (uint32_t i = 0; i < rank; i++) fprintf(f, "%s%" PRIu64, i ? "," : "", s[i]);
    fputc(']', f);
}

/* " -> lib:variant[a..b], ..." (neighbouring buckets with one kernel as one), or why not. */
static void dump_picks(const RadGraph *g, const RadGOp *o, FILE *f) {
    const RadSelectTable *t = &o->sel;
    if (o->declined || !rad_select_served(t)) {
        fputs(o->declined ? " -> declined" : " -> unresolved", f);
        return;
    }
    fputs(" ->", f);
    for (int i = 0, j; i < t->n_buckets; i = j) {
        for (j = i + 1; j < t->n_buckets && t->pick[j] == t->pick[i];) j++;
        fprintf(f, "%s %s:%s[%" PRId64 "..%" PRId64 "]", i ? "," : "", g->sel.libs->p[t->pick_lib[i]].info->name,
                t->pick[i]->variant, t->lo[i], j < t->n_buckets ? t->lo[j] - 1 : t->range_hi);
    }
}

void rad_graph_dump(const RadGraph *g, FILE *f) {
    static const char *access[] = {"per_token", "per_request", "conditional", "rare", "vocab"};
    static const char *shard[] = {"none", "row", "col"};
    static const char *mapk[] = {"copy", "concat", "wnorm", "rows", "transpose", "ema", "tap", "cols"};
    static const char *bufk[] = {"transient", "persist", "derived"};
    static const char *kvk[] = {"full", "window", "linear", "conv", "ring"};
    for (int i = 0; i < g->n_maps; i++) {
        const RadNameMap *m = &g->maps[i].m;
        fprintf(f, "map %s %s <-", mapk[m->kind], m->dst);
        for (int j = 0; j < g->maps[i].n_src; j++) fprintf(f, "%s %s", j ? " |" : "", m->src[j]);
        if (m->kind == RAD_MAP_ROWS && m->perm) fprintf(f, " perm=rope_uninterleave heads=%u", m->heads);
        if (m->add != 0) fprintf(f, " add=%g", (double)m->add);
        fputc('\n', f);
    }
    for (int i = 0; i < g->n_w; i++) {
        const RadGWeight *w = &g->w[i];
        fprintf(f, "weight %s %s ", w->name, dtype_name(w->d.dtype));
        dump_shape(f, w->d.rank, w->d.shape);
        fprintf(f, " access=%s shard=%s", access[w->d.access % 5], shard[w->d.shard % 3]);
        if (w->d.group.kind == RAD_GROUP_LAYER) fprintf(f, " group=layer:%u", w->d.group.layer);
        if (w->d.optional) fputs(" optional", f);
        fprintf(f, " stored=%s\n", enc_name(w->enc));
    }
    for (int i = 0; i < g->n_bufs; i++) {
        const RadGBuf *x = &g->bufs[i];
        fprintf(f, "buffer %s %s ", x->name, dtype_name(x->d.dtype));
        dump_shape(f, x->d.rank, x->d.shape);
        fprintf(f, " %s", bufk[x->d.kind % 3]);
        if (x->d.derive) fprintf(f, " derive=%s", x->d.derive);
        if (x->concurrent) fputs(" concurrent", f);
        fputc('\n', f);
    }
    for (int i = 0; i < g->n_kvs; i++) {
        const RadGKv *k = &g->kvs[i];
        fprintf(f, "kv %s %s %s heads=%u head_dim=%u block=%u\n", k->name, kvk[k->d.kind % 5], dtype_name(k->d.dtype),
                k->d.n_head_kv, k->d.head_dim, k->block_size);
    }
    int bound = 0;
    for (int i = 0; i < g->n_layer_kv; i++) bound += g->layer_kv[i] >= 0;
    fprintf(f, "layers_bound %d\n", bound);
    for (int i = 0; i < g->n_ops; i++) {
        const RadGOp *o = &g->ops[i];
        fprintf(f, "op %d %s", i, o->op);
        for (uint32_t j = 0; j < o->n_params; j++) {
            const RadParam *p = &o->params[j];
            if (p->kind == RAD_PARAM_RANGE) fprintf(f, " %s=[%" PRId64 ",%" PRId64 "]", p->name, p->lo, p->hi);
            else if (p->kind == RAD_PARAM_INT) fprintf(f, " %s=%" PRId64, p->name, p->lo);
            else fprintf(f, " %s=%g", p->name, p->f);
        }
        for (uint32_t j = 0; j < o->n_w; j++) fprintf(f, " w:%s", g->w[o->w[j].id].name);
        for (uint32_t j = 0; j < o->n_reads; j++) fprintf(f, " r:%s", g->bufs[o->reads[j].id].name);
        for (uint32_t j = 0; j < o->n_writes; j++) fprintf(f, " w>%s", g->bufs[o->writes[j].id].name);
        if (o->lane1) fputs(" lane1", f);
        if (g->sel.libs && g->sel.libs->n) dump_picks(g, o, f);
        fputc('\n', f);
    }
    if (g->logits.id >= 0) fprintf(f, "logits %s\n", g->bufs[g->logits.id].name);
    if (g->pooled.id >= 0) fprintf(f, "pooled %s\n", g->bufs[g->pooled.id].name);
    for (int i = 0; i < g->n_notes; i++) fprintf(f, "note %s\n", g->notes[i]);
}

/* ---- RadModelMeta's free-form table -------------------------------------------------------- */

/* A numeric or boolean array of at most RAD_META_ARRAY_MAX elements as "[a, b, c]", what
 * rad_meta_u32s/_f32s read (a per-layer count or window); NULL for any other array: token lists
 * and string arrays stay in the container. */
#define RAD_META_ARRAY_MAX 1024
static char *array_text(const RadValue *v) {
    size_t es = rad_val_scalar_size(v->arr_type);
    if (!es || v->n > RAD_META_ARRAY_MAX) return NULL;
    size_t cap = 3 + (size_t)v->n * 26, k = 1;
    char *s = malloc(cap);
    if (!s) return NULL;
    s[0] = '[';
    for (uint64_t i = 0; i < v->n; i++) {
        const uint8_t *p = (const uint8_t *)v->v.arr + i * es;
        union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32; float f32;
                uint64_t u64; int64_t i64; double f64; } x;
        memcpy(&x, p, es);
        const char *sep = i ? ", " : "";
        switch (v->arr_type) {
        case RAD_VAL_U8: k += (size_t)snprintf(s + k, cap - k, "%s%u", sep, (unsigned)x.u8); break;
        case RAD_VAL_BOOL: k += (size_t)snprintf(s + k, cap - k, "%s%s", sep, x.u8 ? "true" : "false"); break;
        case RAD_VAL_I8: k += (size_t)snprintf(s + k, cap - k, "%s%d", sep, (int)x.i8); break;
        case RAD_VAL_U16: k += (size_t)snprintf(s + k, cap - k, "%s%u", sep, (unsigned)x.u16); break;
        case RAD_VAL_I16: k += (size_t)snprintf(s + k, cap - k, "%s%d", sep, (int)x.i16); break;
        case RAD_VAL_U32: k += (size_t)snprintf(s + k, cap - k, "%s%" PRIu32, sep, x.u32); break;
        case RAD_VAL_I32: k += (size_t)snprintf(s + k, cap - k, "%s%" PRId32, sep, x.i32); break;
        case RAD_VAL_F32: k += (size_t)snprintf(s + k, cap - k, "%s%.9g", sep, (double)x.f32); break;
        case RAD_VAL_U64: k += (size_t)snprintf(s + k, cap - k, "%s%" PRIu64, sep, x.u64); break;
        case RAD_VAL_I64: k += (size_t)snprintf(s + k, cap - k, "%s%" PRId64, sep, x.i64); break;
        default: k += (size_t)snprintf(s + k, cap - k, "%s%.17g", sep, x.f64); break;
        }
    }
    snprintf(s + k, cap - k, "]");
    return s;
}

static char *value_text(const RadValue *v) {
    char buf[128];
    switch (v->type) {
    case RAD_VAL_STRING: return dup_str(v->v.s.p);
    case RAD_VAL_BOOL: return dup_str(v->v.u ? "true" : "false");
    case RAD_VAL_F32: case RAD_VAL_F64: snprintf(buf, sizeof buf, "%.9g", v->v.f); return dup_str(buf);
    case RAD_VAL_I8: case RAD_VAL_I16: case RAD_VAL_I32: case RAD_VAL_I64:
        snprintf(buf, sizeof buf, "%" PRId64, v->v.i);
        return dup_str(buf);
    case RAD_VAL_ARRAY: return array_text(v);
    default: snprintf(buf, sizeof buf, "%" PRIu64, v->v.u); return dup_str(buf);
    }
}

int rad_meta_table_fill(RadModelMeta *m, const RadDict *meta, const RadDict *chat, char ***keys, char ***vals, RadErr *e) {
    uint64_t cap = (meta ? meta->n : 0) + (chat ? chat->n : 0);
    char **k = calloc(cap + 1, sizeof *k), **v = calloc(cap + 1, sizeof *v);
    if (!k || !v) {
        free(k), free(v);
        return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    }
    int n = 0;
    const RadDict *tabs[2] = {meta, chat};
    for (int t = 0; t < 2; t++)
        for (uint64_t i = 0; tabs[t] && i < tabs[t]->n; i++) {
            const RadValue *val = &tabs[t]->vals[i];
            if (val->type == RAD_VAL_ARRAY && (!rad_val_scalar_size(val->arr_type) || val->n > RAD_META_ARRAY_MAX))
                continue; /* token lists, string arrays: they stay in the container */
            k[n] = dup_str(tabs[t]->keys[i].p);
            v[n] = value_text(val);
            if (!k[n] || !v[n]) { /* a key left out would read as absent: refused, not dropped */
                for (int j = 0; j <= n; j++) free(k[j]), free(v[j]);
                free(k), free(v);
                return rad_err_set(e, RAD_E_NOMEM, "out of memory copying metadata key '%s'", tabs[t]->keys[i].p);
            }
            n++;
        }
    m->n_kv = n;
    m->kv_key = (const char *const *)k;
    m->kv_val = (const char *const *)v;
    *keys = k;
    *vals = v;
    return RAD_OK;
}

void rad_meta_table_free(RadModelMeta *m, char **keys, char **vals) {
    for (int i = 0; i < m->n_kv; i++) free(keys[i]), free(vals[i]);
    free(keys), free(vals);
    m->n_kv = 0;
    m->kv_key = m->kv_val = NULL;
}
