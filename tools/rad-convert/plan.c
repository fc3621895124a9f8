#include "plan.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/tensor/rad_encode.h"
#include "libcommon/tensor/rad_xform.h"

static RadXTensor xt(const RadTensor *t) { return rad_xtensor_of(t, t->planes[0].data, t->planes[0].nbytes); }

/* The checkpoint's tensor called name, or NULL (rad_model_find: through the model's name index). */
static const RadTensor *find(Plan *p, const char *name) { return rad_model_find(p->src, name); }

/* The sources of one map entry that are present: COPY takes the first present alternative,
 * every other kind needs all of them. */
static int resolve_sources(Plan *p, const RadNameMap *m, const RadTensor **out) {
    int n = 0;
    for (int i = 0; m->src[i]; i++) {
        const RadTensor *t = find(p, m->src[i]);
        if (m->kind == RAD_MAP_COPY) {
            if (t) return out[0] = t, 1;
            continue;
        }
        if (!t) return 0;
        out[n++] = t; /* out holds as many as the entry names (plan_lookup sizes it) */
    }
    return n;
}

static RadEnc choice_enc(QuantChoice q, RadEnc src) {
    switch (q) {
    case Q_F32: return RAD_ENC_F32;
    case Q_BF16: return RAD_ENC_BF16;
    case Q_F16: return RAD_ENC_F16;
    case Q_Q8_0: return RAD_ENC_Q8_0;
    default: return src;
    }
}

static int widens_to(RadEnc stored, RadDType declared) {
    if (declared == RAD_ANY || (int)stored == (int)declared) return 1;
    return declared == RAD_F32 && (stored == RAD_ENC_F16 || stored == RAD_ENC_BF16);
}

/* The target encoding: the --quant choice where the plugin takes any encoding and the shape
 * allows it; a weight the plugin declares in one dtype gets that dtype (or the choice when it
 * is an exact widening of it, as bf16 for an f32 norm). */
static RadEnc target_enc(QuantChoice q, RadEnc src, const RadWeightDecl *d, uint32_t rank, const uint64_t *shape) {
    RadEnc want = choice_enc(q, src);
    uint64_t bytes;
    int encodable = want == src || rad_encode_plan(want, rank, shape, NULL, &bytes, NULL) == RAD_OK;
    int block = rad_enc_info(want)->block_elems > 1;
    if (d->dtype == RAD_ANY) {
        if (encodable && (!block || rank == 2 || want == src)) return want;
        return rad_enc_info(src)->block_elems > 1 ? RAD_ENC_F32 : src;
    }
    if (encodable && widens_to(want, d->dtype)) return want;
    if (widens_to(src, d->dtype)) return src;
    return (RadEnc)d->dtype;
}

RadEnc plan_lookup(void *user, const char *name, const RadWeightDecl *d, const RadGMap *maps, int n_maps,
                   uint32_t *rank, uint64_t *shape) {
    Plan *p = user;
    const RadNameMap *m = NULL;
    const RadTensor **src = NULL; /* as many as the longest entry names: a CONCAT has no cap */
    int n_src = 0, n_entries = 0, src_cap = 0;
    char tried[400] = "";
    size_t k = 0;
    /* a .rad already holds weights under their declared names, transformed: maps apply only to
     * checkpoints (a second pass of GGUF's q/k un-interleave would scramble them) */
    int is_rad = strcmp(p->src->format, "rad") == 0;
    /* a view (RadWeightDecl.source) of a weight already planned is that stored tensor: written
     * once (a second item would be a tensor added twice) */
    for (int i = 0; d->source && i < p->n; i++)
        if (strcmp(p->items[i].dst, name) == 0) {
            *rank = p->items[i].rank;
            memcpy(shape, p->items[i].shape, p->items[i].rank * sizeof *shape);
            return p->items[i].enc;
        }
    for (int i = 0; i < n_maps && !m && !is_rad; i++) {
        if (strcmp(maps[i].m.dst, name) != 0) continue;
        n_entries++;
        int need = 1;
        while (maps[i].m.src[need - 1]) need++;
        if (need > src_cap) {
            const RadTensor **ns = realloc(src, (size_t)need * sizeof *ns);
            if (!ns) return free(src), RAD_ENC_COUNT;
            src = ns, src_cap = need;
        }
        n_src = resolve_sources(p, &maps[i].m, src);
        if (n_src) m = &maps[i].m;
        for (int j = 0; maps[i].m.src[j] && k < sizeof tried; j++)
            k += (size_t)snprintf(tried + k, sizeof tried - k, "%s'%s'", k ? ", " : "", maps[i].m.src[j]);
    }
    if (!m && (!n_entries || is_rad)) { /* the tensor of the same name */
        const RadTensor *t = find(p, name);
        if (t && !src_cap) {
            if (!(src = malloc(sizeof *src))) return RAD_ENC_COUNT;
            src_cap = 1;
        }
        if (t) src[0] = t, n_src = 1;
        snprintf(tried, sizeof tried, "'%s'", name);
    }
    if (!n_src) {
        free(src);
        if (!d->optional && !p->missing[0])
            snprintf(p->missing, sizeof p->missing, "missing tensor: the plugin's '%s' needs one of %s", name, tried);
        return RAD_ENC_COUNT;
    }
    /* a block-scaled f8 weight (codes, scale) crosses as it is: copied, never transformed */
    for (int i = 0; i < n_src; i++)
        if (src[i]->n_planes > 1 && (n_src > 1 || (m && (m->kind != RAD_MAP_COPY || m->add)))) {
            if (!p->missing[0])
                snprintf(p->missing, sizeof p->missing, "tensor '%s' is block-scaled f8_e4m3 (codes, scale): the plugin's "
                         "map entry for '%s' transforms it, which rad-convert does not do for a two-plane tensor", src[i]->name, name);
            return free(src), RAD_ENC_COUNT;
        }
    RadXTensor *in = malloc((size_t)(n_src > 0 ? n_src : 1) * sizeof *in); /* n_src >= 1 here; gcc's range analysis cannot tell */
    if (!in) return free(src), RAD_ENC_COUNT;
    for (int i = 0; i < n_src; i++) in[i] = xt(src[i]);
    RadXShape xs;
    RadErr e = {0};
    static const RadNameMap identity = {.kind = RAD_MAP_COPY};
    int shaped = rad_xform_map_shape(m ? m : &identity, in, (uint32_t)n_src, &xs, &e);
    free(in);
    if (shaped != RAD_OK) {
        free(src);
        if (!p->missing[0]) snprintf(p->missing, sizeof p->missing, "%s", e.msg);
        return RAD_ENC_COUNT;
    }
    if (p->n == p->cap) {
        int nc = p->cap ? p->cap * 2 : 64;
        PlanItem *ni = realloc(p->items, (size_t)nc * sizeof *ni);
        if (!ni) return free(src), RAD_ENC_COUNT;
        p->items = ni;
        p->cap = nc;
    }
    PlanItem *it = &p->items[p->n];
    memset(it, 0, sizeof *it);
    if (!(it->dst = strdup(name))) return free(src), RAD_ENC_COUNT;
    it->n_src = n_src;
    it->src = src; /* owned by the item from here (plan_free) */
    if (m) it->map = *m, it->has_map = 1;
    it->src_enc = xs.enc;
    it->rank = xs.rank;
    memcpy(it->shape, xs.shape, sizeof it->shape);
    it->enc = target_enc(p->quant, xs.enc, d, xs.rank, xs.shape);
    it->n_planes = src[0]->n_planes;
    if (it->n_planes > 1) { /* kept as it is, or refused: re-encoding needs its scales */
        it->bytes = 0;
        for (uint32_t j = 0; j < it->n_planes; j++) it->bytes += src[0]->planes[j].nbytes;
        if (it->enc != xs.enc) {
            if (!p->missing[0])
                snprintf(p->missing, sizeof p->missing, "--quant: weight '%s' is block-scaled f8_e4m3 (from '%s'), which "
                         "rad-convert keeps as it is (give --quant keep)", name, src[0]->name);
            free(it->dst), free(it->src);
            return RAD_ENC_COUNT;
        }
    } else if (it->enc == xs.enc) it->bytes = xs.nbytes;
    else if (rad_encode_plan(it->enc, xs.rank, xs.shape, name, &it->bytes, &e) != RAD_OK) {
        if (!p->missing[0]) snprintf(p->missing, sizeof p->missing, "%s", e.msg);
        free(it->dst), free(it->src); /* the item is not kept */
        return RAD_ENC_COUNT;
    }
    p->n++;
    *rank = it->rank;
    memcpy(shape, it->shape, it->rank * sizeof *shape);
    return it->enc;
}

static int plan_produce_from(const PlanItem *it, RadXTensor *in, const uint8_t **out, int *owned, RadErr *e);

int plan_produce(const Plan *p, const PlanItem *it, const uint8_t **out, int *owned, RadErr *e) {
    (void)p;
    *owned = 0;
    RadXTensor in_small[4], *in = it->n_src <= 4 ? in_small : malloc((size_t)it->n_src * sizeof *in);
    if (!in) return rad_err_set(e, RAD_E_NOMEM, "tensor '%s': out of memory", it->dst);
    int rc = plan_produce_from(it, in, out, owned, e);
    if (in != in_small) free(in);
    return rc;
}

/* plan_produce with its sources' views in in[0..n_src). */
static int plan_produce_from(const PlanItem *it, RadXTensor *in, const uint8_t **out, int *owned, RadErr *e) {
    for (int i = 0; i < it->n_src; i++) {
        in[i] = xt(it->src[i]);
        if (!in[i].data)
            return rad_err_set(e, RAD_E_UNSUPPORTED, "tensor '%s': source data is not mapped", it->src[i]->name);
    }
    int copy = !it->has_map || (it->map.kind == RAD_MAP_COPY && it->map.add == 0); /* an add decodes */
    uint64_t n_elems = 1;
    for (uint32_t i = 0; i < it->rank; i++) n_elems *= it->shape[i];
    if (copy && it->enc == it->src_enc) { /* zero-copy: the source's bytes as they are */
        *out = in[0].data;
        return RAD_OK;
    }
    const void *mid = in[0].data;
    uint64_t mid_bytes = in[0].nbytes;
    uint8_t *tmp = NULL;
    if (!copy) {
        RadXShape xs;
        int rc = rad_xform_map_shape(&it->map, in, (uint32_t)it->n_src, &xs, e);
        if (rc) return rc;
        if (!(tmp = malloc(xs.nbytes ? xs.nbytes : 1))) return rad_err_set(e, RAD_E_NOMEM, "tensor '%s': out of memory", it->dst);
        rc = rad_xform_map(&it->map, in, (uint32_t)it->n_src, tmp, xs.nbytes, e);
        if (rc) return free(tmp), rc;
        mid = tmp;
        mid_bytes = xs.nbytes;
        if (it->enc == it->src_enc) {
            *out = tmp;
            *owned = 1;
            return RAD_OK;
        }
    }
    uint8_t *dst = malloc(it->bytes ? it->bytes : 1);
    if (!dst) return free(tmp), rad_err_set(e, RAD_E_NOMEM, "tensor '%s': out of memory", it->dst);
    int rc = rad_convert_tensor(it->enc, it->src_enc, mid, mid_bytes, n_elems, dst, it->bytes, e);
    free(tmp);
    if (rc) return free(dst), rc;
    *out = dst;
    *owned = 1;
    return RAD_OK;
}

/* transformers' position_ids / token_type_ids: integer buffers older versions saved beside the
 * weights (BERT's embeddings.position_ids = 0..n_ctx-1). Not weights: left out without a word. */
static int is_saved_buffer(const RadTensor *t) {
    size_t n = strlen(t->name);
    static const char *const tails[] = {"position_ids", "token_type_ids"};
    if (t->enc != RAD_ENC_I64 && t->enc != RAD_ENC_I32) return 0;
    for (size_t i = 0; i < 2; i++) {
        size_t k = strlen(tails[i]);
        if (n >= k && strcmp(t->name + n - k, tails[i]) == 0 && (n == k || t->name[n - k - 1] == '.')) return 1;
    }
    return 0;
}

int plan_check(const Plan *p, RadErr *e) {
    const RadModelFile *m = p->src;
    if (!m->tok.n && !p->no_tokenizer)
        return rad_err_set(e, RAD_E_FORMAT, "%s: holds no tokenizer (no tokenizer.json, or no tokenizer.ggml.* keys), "
                           "so the container could not read or write text; --no-tokenizer converts the weights alone",
                           m->path);
    if (p->drop_unclaimed || !m->n_tensors) return RAD_OK;
    uint8_t *used = calloc(m->n_tensors, 1);
    if (!used) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", m->path);
    for (int i = 0; i < p->n; i++)
        for (int j = 0; j < p->items[i].n_src; j++) used[p->items[i].src[j] - m->tensors] = 1;
    uint64_t n = 0;
    char names[320] = "";
    size_t k = 0;
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        if (used[i] || is_saved_buffer(&m->tensors[i])) continue;
        if (n++ < 3 && k < sizeof names)
            k += (size_t)snprintf(names + k, sizeof names - k, "%s'%.80s'", k ? ", " : "", m->tensors[i].name);
    }
    free(used);
    if (!n) return RAD_OK;
    return rad_err_set(e, RAD_E_FORMAT, "%s: %" PRIu64 " tensor%s that no entry of the plugin's name map reads: %s%s "
                       "(does the metadata, e.g. the layer count, match the tensors? --drop-unclaimed converts without them)",
                       m->path, n, n == 1 ? "" : "s", names, n > 3 ? ", ..." : "");
}

void plan_free(Plan *p) {
    for (int i = 0; i < p->n; i++) free(p->items[i].dst), free(p->items[i].src);
    free(p->items);
    p->items = NULL;
    p->n = p->cap = 0;
}
