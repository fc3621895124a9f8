/* bert.c — the BERT family as a sentence encoder (all-MiniLM-L6-v2 and other sentence-transformers
 * BERTs): f32/f16/bf16 weights as stored. An embedding program: it declares a pooled output (one
 * row a sequence), no KV cache and no logits (spec, "Step output").
 *
 * The graph (transformers' BertModel, post-norm, then sentence-transformers' Pooling/Normalize):
 *
 *   x = layernorm(word[ids] + pos[positions] + type[0], emb_norm)    token type 0: one text a row
 *   per layer l:
 *     q, k, v = x·Wq^T + bq, x·Wk^T + bk, x·Wv^T + bv
 *     o = attn_seq(q, k, v)                  bidirectional, within each sequence, 1/sqrt(head_dim)
 *     x = layernorm(x + o·Wo^T + bo, attn_output_norm)
 *     x = layernorm(x + gelu(x·Wup^T + bup)·Wdown^T + bdown, layer_output_norm)   erf GELU
 *   e = pool(x)                              pooling.mode: mean, cls, last, max, mean_sqrt_len
 *   e = l2_normalize(e)                      when pooling.normalize
 *
 * Every step holds whole sequences from position 0 (no KV: nothing carries over). Declared names
 * are llama.cpp's GGUF bert names; the name map reads Hugging Face's, with or without the
 * "bert." prefix BertFor* checkpoints carry. BertModel's pooler (dense + tanh on [CLS]) is not
 * part of sentence-transformers' pipeline: its weights are declared optional and never read. */
#include <arch/rad_arch.h>

#include <stdlib.h>

#include "../common/rad_attn_parts.h"

#define BERT_PN RAD_PLUGIN_NAME_OF("bert")
#define BERT_MAX_LAYERS 128
#define BERT_NAME 160

/* The pool op's mode numbers (docs/OPS.md, `pool`), by pooling.mode's names. */
static const char *const bert_pool_modes[] = {"mean", "cls", "last", "max", "mean_sqrt_len"};

typedef struct BertHparams {
    RadBlockGeom g;           /* n_head = n_head_kv, head_dim, max_tok; rms_eps is the LayerNorm eps */
    uint32_t n_layers, n_vocab;
    uint32_t n_pos;           /* position embeddings (max_position_embeddings) */
    uint32_t n_types;         /* token-type embeddings (type_vocab_size) */
    uint32_t max_seqs;        /* pooled rows: sequences a step may carry */
    uint32_t pool_mode;       /* index into bert_pool_modes */
    int normalize;            /* pooling.normalize */
} BertHparams;

typedef struct BertLayer {
    RadQkv qkv;               /* q, k, v with their biases, from x */
    rad_op attn;              /* attn_seq */
    rad_weight w_o, b_o;      /* [n_embd, n_embd], [n_embd] */
    rad_op o, add_bo, add_o;  /* y = o·Wo^T; y += bo; x += y */
    rad_weight w_ln1, b_ln1;  /* attn_output_norm [n_embd] each */
    rad_op ln1;
    rad_weight w_up, b_up;    /* [n_ff, n_embd], [n_ff] */
    rad_op up, add_bup, gelu;
    rad_weight w_down, b_down;/* [n_embd, n_ff], [n_embd] */
    rad_op down, add_bdown, add_d;
    rad_weight w_ln2, b_ln2;  /* layer_output_norm [n_embd] each */
    rad_op ln2;
} BertLayer;

typedef struct BertModel {
    int ready;                /* a declare completed: step may run */
    BertHparams hp;
    rad_weight w_tok, w_pos, w_type; /* [n_vocab | n_pos | n_types, n_embd] */
    rad_weight w_eln, b_eln;  /* the embedding LayerNorm [n_embd] each */
    rad_buf x, y;             /* [max_tok, n_embd] the residual, a block's output */
    RadAttnScratch as;        /* q, k, v, o [max_tok, n_embd] */
    rad_buf ff;               /* [max_tok, n_ff] */
    rad_buf pooled;           /* [max_seqs, n_embd] the output */
    int32_t *zeros;           /* [max_tok] token type 0 for every row */
    rad_op emb_tok, emb_pos, emb_type, add_pos, add_type, eln;
    BertLayer layers[BERT_MAX_LAYERS];
    rad_op pool, norm;        /* norm: l2_normalize (id < 0 without pooling.normalize) */
} BertModel;

/* ---- 0. hyperparameters ------------------------------------------------------------------- */

static int bert_hparams(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *ctx, BertHparams *hp) {
#define BERT_POS(field)                                                                       \
    if (m->field <= 0) return rad_block_fail(b, BERT_PN ": model." #field " is %d (must be positive)", (int)m->field)
    BERT_POS(n_layers);
    BERT_POS(n_embd);
    BERT_POS(n_head);
    BERT_POS(head_dim);
    BERT_POS(n_ff);
    BERT_POS(n_vocab);
    BERT_POS(n_ctx_train);
#undef BERT_POS
    if (m->n_layers > BERT_MAX_LAYERS)
        return rad_block_fail(b, BERT_PN ": model.n_layers %d exceeds the plugin's %d", (int)m->n_layers, BERT_MAX_LAYERS);
    if (m->n_head_kv != m->n_head)
        return rad_block_fail(b, BERT_PN ": model.n_head_kv %d differs from model.n_head %d (BERT has no GQA)", (int)m->n_head_kv,
                         (int)m->n_head);
    if ((int64_t)m->n_head * m->head_dim != m->n_embd)
        return rad_block_fail(b, BERT_PN ": model.n_head %d x model.head_dim %d is not model.n_embd %d", (int)m->n_head,
                         (int)m->head_dim, (int)m->n_embd);
    if (!(m->rms_eps > 0)) return rad_block_fail(b, BERT_PN ": model.rms_eps (the LayerNorm eps) is %g", (double)m->rms_eps);
    if (ctx->max_tok == 0) return rad_block_fail(b, BERT_PN ": RadBuildCtx.max_tok is 0");
    if (ctx->world_size > 1) return rad_block_fail(b, BERT_PN ": tensor parallelism (%u ranks) is not served", ctx->world_size);
    if (ctx->cvec) return rad_block_fail(b, BERT_PN ": a control vector is not served (an encoder)");
    if (ctx->kv_quant != RAD_KVQ_NONE) return rad_block_fail(b, BERT_PN ": RadBuildCtx.kv_quant is not served (an encoder has no KV)");
    if (ctx->tp_attn_rows) return rad_block_fail(b, BERT_PN ": RadBuildCtx.tp_attn_rows is not served");
    if (ctx->max_spec) return rad_block_fail(b, BERT_PN ": speculative decoding (max_spec %u) is not served: an encoder does not generate",
                                        ctx->max_spec);
    const char *s;
    if (rad_meta_str(m, "model.hidden_act", "gelu", &s) < 0 || strcmp(s, "gelu"))
        return rad_block_fail(b, BERT_PN ": model.hidden_act \"%s\" is not served (gelu: the erf form)", s);
    if (rad_meta_str(m, "model.position_embedding_type", "absolute", &s) < 0 || strcmp(s, "absolute"))
        return rad_block_fail(b, BERT_PN ": model.position_embedding_type \"%s\" is not served (absolute)", s);
    if (rad_meta_u32(m, "model.n_token_types", 2, &hp->n_types) < 0 || hp->n_types == 0)
        return rad_block_fail(b, BERT_PN ": model.n_token_types must be a positive count");
    if (rad_meta_str(m, "pooling.mode", "", &s) <= 0)
        return rad_block_fail(b, BERT_PN ": pooling.mode is missing: convert a sentence-transformers folder (modules.json) or "
                                    "--set pooling.mode=mean|cls|last|max|mean_sqrt_len");
    hp->pool_mode = 99;
    for (uint32_t i = 0; i < sizeof bert_pool_modes / sizeof bert_pool_modes[0]; i++)
        if (!strcmp(s, bert_pool_modes[i])) hp->pool_mode = i;
    if (hp->pool_mode == 99)
        return rad_block_fail(b, BERT_PN ": pooling.mode \"%s\" is not served (mean, cls, last, max, mean_sqrt_len)", s);
    bool norm;
    if (rad_meta_bool(m, "pooling.normalize", false, &norm) < 0) return rad_block_fail(b, BERT_PN ": pooling.normalize is not a boolean");
    hp->normalize = norm;
    RadBlockGeom *g = &hp->g;
    memset(g, 0, sizeof *g);
    g->n_embd = (uint32_t)m->n_embd;
    g->n_head = g->n_head_kv = (uint32_t)m->n_head;
    g->head_dim = (uint32_t)m->head_dim;
    g->n_ff = (uint32_t)m->n_ff;
    g->rms_eps = m->rms_eps;
    g->attn_scale = rad_block_rsqrt((double)g->head_dim);
    g->max_tok = ctx->max_tok;
    g->world_size = 1;
    g->linear_dtype = RAD_ANY; /* as stored: f32, f16 or bf16 */
    g->norm_dtype = RAD_F32;
    hp->n_layers = (uint32_t)m->n_layers;
    hp->n_vocab = (uint32_t)m->n_vocab;
    hp->n_pos = (uint32_t)m->n_ctx_train;
    hp->max_seqs = ctx->max_seqs ? ctx->max_seqs : 1;
    return 0;
}

/* ---- 1. the name map ------------------------------------------------------------------------ */

/* Per-layer tensors: the declared (GGUF) suffix and the Hugging Face one under encoder.layer.N. */
static const struct {
    const char *decl, *hf;
} bert_layer_tensors[] = {
    {"attn_q.weight", "attention.self.query.weight"},     {"attn_q.bias", "attention.self.query.bias"},
    {"attn_k.weight", "attention.self.key.weight"},       {"attn_k.bias", "attention.self.key.bias"},
    {"attn_v.weight", "attention.self.value.weight"},     {"attn_v.bias", "attention.self.value.bias"},
    {"attn_output.weight", "attention.output.dense.weight"}, {"attn_output.bias", "attention.output.dense.bias"},
    {"attn_output_norm.weight", "attention.output.LayerNorm.weight"},
    {"attn_output_norm.bias", "attention.output.LayerNorm.bias"},
    {"ffn_up.weight", "intermediate.dense.weight"},       {"ffn_up.bias", "intermediate.dense.bias"},
    {"ffn_down.weight", "output.dense.weight"},           {"ffn_down.bias", "output.dense.bias"},
    {"layer_output_norm.weight", "output.LayerNorm.weight"}, {"layer_output_norm.bias", "output.LayerNorm.bias"},
};
enum { B_Q, B_QB, B_K, B_KB, B_V, B_VB, B_O, B_OB, B_LN1, B_LN1B, B_UP, B_UPB, B_DOWN, B_DOWNB, B_LN2, B_LN2B, B_COUNT };

/* Top-level tensors: declared name, Hugging Face name (under "" or "bert."). */
static const struct {
    const char *decl, *hf;
} bert_top_tensors[] = {
    {"token_embd.weight", "embeddings.word_embeddings.weight"},
    {"position_embd.weight", "embeddings.position_embeddings.weight"},
    {"token_types.weight", "embeddings.token_type_embeddings.weight"},
    {"token_embd_norm.weight", "embeddings.LayerNorm.weight"},
    {"token_embd_norm.bias", "embeddings.LayerNorm.bias"},
    {"pooler.weight", "pooler.dense.weight"},
    {"pooler.bias", "pooler.dense.bias"},
};
enum { T_TOK, T_POS, T_TYPE, T_ELN, T_ELNB, T_POOLER, T_POOLERB, T_COUNT };

/* One declared name from three alternatives: the Hugging Face name, with "bert.", the GGUF one. */
static int bert_map(RadBuilder *b, const char *dst, const char *hf, const char *gguf) {
    char pre[BERT_NAME];
    int k = snprintf(pre, sizeof pre, "bert.%s", hf);
    if (k < 0 || (size_t)k >= sizeof pre) return -1;
    const char *const s[] = {hf, pre, gguf, NULL};
    RadNameMap e;
    memset(&e, 0, sizeof e);
    e.kind = RAD_MAP_COPY;
    e.dst = dst;
    e.src = s;
    return rad_decl_name_map(b, &e);
}

static int bert_declare_map(RadBuilder *b, const BertHparams *hp) {
    char dst[BERT_NAME], hf[BERT_NAME];
    static const char *const gguf_top[] = {"token_embd.weight", "position_embd.weight", "token_types.weight",
                                           "token_embd_norm.weight", "token_embd_norm.bias", "pooler.weight", "pooler.bias"};
    int rc = 0;
    for (int t = 0; t < T_COUNT; t++) rc |= bert_map(b, bert_top_tensors[t].decl, bert_top_tensors[t].hf, gguf_top[t]);
    for (uint32_t l = 0; l < hp->n_layers; l++)
        for (int t = 0; t < B_COUNT; t++) {
            int k1 = snprintf(dst, sizeof dst, "blk.%u.%s", l, bert_layer_tensors[t].decl);
            int k2 = snprintf(hf, sizeof hf, "encoder.layer.%u.%s", l, bert_layer_tensors[t].hf);
            if (k1 < 0 || (size_t)k1 >= sizeof dst || k2 < 0 || (size_t)k2 >= sizeof hf) return rad_block_fail(b, BERT_PN ": a name is too long");
            rc |= bert_map(b, dst, hf, dst);
        }
    return rc ? rad_block_fail(b, BERT_PN ": a name-map entry was refused") : 0;
}

/* ---- 2. weights ----------------------------------------------------------------------------- */

static rad_weight bert_table(RadBuilder *b, const char *name, uint64_t rows, uint64_t cols, RadAccess access) {
    RadWeightDecl d;
    memset(&d, 0, sizeof d);
    d.dtype = RAD_ANY;
    d.rank = 2;
    d.shape[0] = rows;
    d.shape[1] = cols;
    d.access = access;
    d.shard = RAD_SHARD_NONE;
    return rad_decl_weight(b, name, &d);
}

/* Weights kernels take as stored must be floats: a quantised BERT has no plugin here. */
static int bert_check_enc(RadBuilder *b, rad_weight w, const char *name) {
    RadEnc e = rad_weight_encoding(b, w);
    if ((unsigned)e >= RAD_ENC_COUNT || e == RAD_ENC_F32 || e == RAD_ENC_F16 || e == RAD_ENC_BF16) return 0;
    const RadEncInfo *info = rad_enc_info(e);
    return rad_block_fail(b, BERT_PN ": weight %s is stored as %s (served: f32, f16, bf16)", name, info ? info->name : "?");
}

static int bert_weights_layer(RadBuilder *b, const BertHparams *hp, uint32_t l, BertLayer *L) {
    char nm[B_COUNT][BERT_NAME];
    const RadBlockGeom *g = &hp->g;
    const RadGroup grp = rad_group_layer(l);
    for (int t = 0; t < B_COUNT; t++) snprintf(nm[t], sizeof nm[t], "blk.%u.%s", l, bert_layer_tensors[t].decl);
    memset(&L->qkv, 0, sizeof L->qkv);
    int bad = rad_qkv_declare_weights(b, g, l, nm[B_Q], nm[B_K], nm[B_V], &L->qkv) != 0;
    bad |= rad_qkv_declare_bias(b, g, l, nm[B_QB], nm[B_KB], nm[B_VB], &L->qkv) != 0;
    L->w_o = rad_block_linear(b, g, nm[B_O], l, g->n_embd, g->n_embd, RAD_SHARD_NONE, 0);
    L->b_o = rad_block_bias(b, g, nm[B_OB], l, g->n_embd, 0);
    L->w_ln1 = rad_block_norm_weight(b, g, nm[B_LN1], grp, g->n_embd);
    L->b_ln1 = rad_block_norm_weight(b, g, nm[B_LN1B], grp, g->n_embd);
    L->w_up = rad_block_linear(b, g, nm[B_UP], l, g->n_ff, g->n_embd, RAD_SHARD_NONE, 0);
    L->b_up = rad_block_bias(b, g, nm[B_UPB], l, g->n_ff, 0);
    L->w_down = rad_block_linear(b, g, nm[B_DOWN], l, g->n_embd, g->n_ff, RAD_SHARD_NONE, 0);
    L->b_down = rad_block_bias(b, g, nm[B_DOWNB], l, g->n_embd, 0);
    L->w_ln2 = rad_block_norm_weight(b, g, nm[B_LN2], grp, g->n_embd);
    L->b_ln2 = rad_block_norm_weight(b, g, nm[B_LN2B], grp, g->n_embd);
    const rad_weight all[] = {L->w_o, L->b_o, L->w_ln1, L->b_ln1, L->w_up, L->b_up, L->w_down, L->b_down, L->w_ln2, L->b_ln2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) bad |= all[i].id < 0;
    if (bad) return rad_block_fail(b, BERT_PN ": layer %u: a weight was refused", l);
    const rad_weight lin[] = {L->qkv.w_q, L->qkv.w_k, L->qkv.w_v, L->w_o, L->w_up, L->w_down};
    const int lt[] = {B_Q, B_K, B_V, B_O, B_UP, B_DOWN};
    for (int i = 0; i < 6; i++) {
        int rc = bert_check_enc(b, lin[i], nm[lt[i]]);
        if (rc) return rc;
    }
    return 0;
}

static int bert_declare_weights(RadBuilder *b, const BertHparams *hp, BertModel *m) {
    const RadBlockGeom *g = &hp->g;
    const RadGroup none = {RAD_GROUP_NONE, 0, 0};
    m->w_tok = bert_table(b, "token_embd.weight", hp->n_vocab, g->n_embd, RAD_ACCESS_VOCAB);
    m->w_pos = bert_table(b, "position_embd.weight", hp->n_pos, g->n_embd, RAD_ACCESS_PER_TOKEN);
    m->w_type = bert_table(b, "token_types.weight", hp->n_types, g->n_embd, RAD_ACCESS_PER_TOKEN);
    m->w_eln = rad_block_norm_weight(b, g, "token_embd_norm.weight", none, g->n_embd);
    m->b_eln = rad_block_norm_weight(b, g, "token_embd_norm.bias", none, g->n_embd);
    if (m->w_tok.id < 0 || m->w_pos.id < 0 || m->w_type.id < 0 || m->w_eln.id < 0 || m->b_eln.id < 0)
        return rad_block_fail(b, BERT_PN ": an embedding weight was refused");
    const rad_weight tables[] = {m->w_tok, m->w_pos, m->w_type};
    for (int i = 0; i < 3; i++) {
        int rc = bert_check_enc(b, tables[i], bert_top_tensors[i].decl);
        if (rc) return rc;
    }
    /* the pooler: carried when present, never read (see the top) */
    RadWeightDecl d;
    memset(&d, 0, sizeof d);
    d.dtype = RAD_ANY;
    d.rank = 2;
    d.shape[0] = d.shape[1] = g->n_embd;
    d.access = RAD_ACCESS_RARE;
    d.optional = 1;
    if (rad_decl_weight(b, "pooler.weight", &d).id < 0) return rad_block_fail(b, BERT_PN ": pooler.weight was refused");
    d.rank = 1;
    if (rad_decl_weight(b, "pooler.bias", &d).id < 0) return rad_block_fail(b, BERT_PN ": pooler.bias was refused");
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        int rc = bert_weights_layer(b, hp, l, &m->layers[l]);
        if (rc) return rc;
    }
    return 0;
}

/* ---- 3. buffers ----------------------------------------------------------------------------- */

static int bert_declare_buffers(RadBuilder *b, const BertHparams *hp, BertModel *m) {
    const RadBlockGeom *g = &hp->g;
    m->x = rad_block_buf(b, "", "x", g->max_tok, g->n_embd);
    m->y = rad_block_buf(b, "", "y", g->max_tok, g->n_embd);
    m->ff = rad_block_buf(b, "", "ffn", g->max_tok, g->n_ff);
    m->pooled = rad_block_buf(b, "", "pooled", hp->max_seqs, g->n_embd);
    if (m->x.id < 0 || m->y.id < 0 || m->ff.id < 0 || m->pooled.id < 0 || rad_attn_scratch_declare(b, g, "", &m->as) != 0)
        return rad_block_fail(b, BERT_PN ": a buffer was refused");
    m->zeros = rad_builder_alloc(b, (size_t)g->max_tok * sizeof *m->zeros);
    if (!m->zeros) return rad_block_fail(b, BERT_PN ": out of memory for %u token types", g->max_tok);
    memset(m->zeros, 0, (size_t)g->max_tok * sizeof *m->zeros);
    return 0;
}

/* ---- 4. ops --------------------------------------------------------------------------------- */

static rad_op bert_op_rw(RadBuilder *b, rad_op op, const rad_buf *r, uint32_t nr, const rad_buf *w, uint32_t nw) {
    if (op.id >= 0) {
        rad_op_reads(b, op, r, nr);
        rad_op_writes(b, op, w, nw);
    }
    return op;
}

static rad_op bert_gather(RadBuilder *b, const BertHparams *hp, rad_weight table, uint32_t rows, rad_buf out) {
    rad_op op = RAD_OP(b, "embed_gather",
                       RAD_PARAMS(RAD_RANGE("M", 1, hp->g.max_tok), RAD_INT("N", hp->g.n_embd), RAD_INT("V", rows)),
                       RAD_WEIGHTS(table));
    return bert_op_rw(b, op, NULL, 0, RAD_BUFS(out), 1);
}

/* x += y */
static rad_op bert_add(RadBuilder *b, const BertHparams *hp, rad_buf x, rad_buf y) {
    rad_op op = RAD_OP(b, "add", RAD_PARAMS(RAD_RANGE("M", 1, hp->g.max_tok), RAD_INT("N", hp->g.n_embd)), RAD_NO_WEIGHTS);
    return bert_op_rw(b, op, RAD_BUFS(x, y), 2, RAD_BUFS(x), 1);
}

/* x = layernorm(x) in place */
static rad_op bert_layernorm(RadBuilder *b, const BertHparams *hp, rad_weight gamma, rad_weight beta, rad_buf x) {
    rad_op op = RAD_OP(b, "layernorm",
                       RAD_PARAMS(RAD_RANGE("M", 1, hp->g.max_tok), RAD_INT("N", hp->g.n_embd), RAD_FLOAT("eps", hp->g.rms_eps)),
                       RAD_WEIGHTS(gamma, beta));
    return bert_op_rw(b, op, RAD_BUFS(x), 1, RAD_BUFS(x), 1);
}

static int bert_declare_layer(RadBuilder *b, const BertHparams *hp, BertModel *m, BertLayer *L) {
    const RadBlockGeom *g = &hp->g;
    const RadAttnScratch *s = &m->as;
    if (rad_qkv_declare_ops(b, g, m->x, s, &L->qkv) != 0) return -1;
    L->attn = RAD_OP(b, "attn_seq",
                     RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("n_head", g->n_head), RAD_INT("n_head_kv", g->n_head_kv),
                                RAD_INT("head_dim", g->head_dim), RAD_FLOAT("scale", g->attn_scale), RAD_INT("window", 0)),
                     RAD_NO_WEIGHTS);
    bert_op_rw(b, L->attn, RAD_BUFS(s->q, s->k, s->v), 3, RAD_BUFS(s->o), 1);
    L->o = rad_block_gemm(b, g, L->w_o, g->n_embd, g->n_embd, s->o, m->y);
    L->add_bo = rad_block_add_bias(b, g, L->b_o, g->n_embd, m->y);
    L->add_o = bert_add(b, hp, m->x, m->y);
    L->ln1 = bert_layernorm(b, hp, L->w_ln1, L->b_ln1, m->x);
    L->up = rad_block_gemm(b, g, L->w_up, g->n_ff, g->n_embd, m->x, m->ff);
    L->add_bup = rad_block_add_bias(b, g, L->b_up, g->n_ff, m->ff);
    L->gelu = RAD_OP(b, "gelu", RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N", g->n_ff)), RAD_NO_WEIGHTS);
    bert_op_rw(b, L->gelu, RAD_BUFS(m->ff), 1, RAD_BUFS(m->ff), 1);
    L->down = rad_block_gemm(b, g, L->w_down, g->n_embd, g->n_ff, m->ff, m->y);
    L->add_bdown = rad_block_add_bias(b, g, L->b_down, g->n_embd, m->y);
    L->add_d = bert_add(b, hp, m->x, m->y);
    L->ln2 = bert_layernorm(b, hp, L->w_ln2, L->b_ln2, m->x);
    const rad_op all[] = {L->attn, L->o, L->add_bo, L->add_o, L->ln1, L->up, L->add_bup, L->gelu, L->down, L->add_bdown, L->add_d, L->ln2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i].id < 0) return -1;
    return 0;
}

static int bert_declare_ops(RadBuilder *b, const BertHparams *hp, BertModel *m) {
    const RadBlockGeom *g = &hp->g;
    m->emb_tok = bert_gather(b, hp, m->w_tok, hp->n_vocab, m->x);
    m->emb_pos = bert_gather(b, hp, m->w_pos, hp->n_pos, m->y);
    m->add_pos = bert_add(b, hp, m->x, m->y);
    m->emb_type = bert_gather(b, hp, m->w_type, hp->n_types, m->y);
    m->add_type = bert_add(b, hp, m->x, m->y);
    m->eln = bert_layernorm(b, hp, m->w_eln, m->b_eln, m->x);
    if (m->emb_tok.id < 0 || m->emb_pos.id < 0 || m->add_pos.id < 0 || m->emb_type.id < 0 || m->add_type.id < 0 || m->eln.id < 0)
        return rad_block_fail(b, BERT_PN ": the embedding was refused");
    for (uint32_t l = 0; l < hp->n_layers; l++)
        if (bert_declare_layer(b, hp, m, &m->layers[l]) != 0) return rad_block_fail(b, BERT_PN ": layer %u: an op was refused", l);
    m->pool = RAD_OP(b, "pool",
                     RAD_PARAMS(RAD_RANGE("M", 1, g->max_tok), RAD_INT("N", g->n_embd), RAD_INT("mode", hp->pool_mode)),
                     RAD_NO_WEIGHTS);
    bert_op_rw(b, m->pool, RAD_BUFS(m->x), 1, RAD_BUFS(m->pooled), 1);
    if (m->pool.id < 0) return rad_block_fail(b, BERT_PN ": the pooling was refused");
    m->norm.id = -1;
    if (hp->normalize) {
        m->norm = RAD_OP(b, "l2_normalize", RAD_PARAMS(RAD_RANGE("M", 1, hp->max_seqs), RAD_INT("N", g->n_embd)), RAD_NO_WEIGHTS);
        bert_op_rw(b, m->norm, RAD_BUFS(m->pooled), 1, RAD_BUFS(m->pooled), 1);
        if (m->norm.id < 0) return rad_block_fail(b, BERT_PN ": the normalisation was refused");
    }
    if (rad_declare_pooled(b, m->pooled) != 0) return rad_block_fail(b, BERT_PN ": the pooled output was refused");
    return 0;
}

static int bert_declare(RadBuilder *b, const RadModelMeta *meta, const RadBuildCtx *ctx_in) {
    RadBuildCtx ctx;
    memset(&ctx, 0, sizeof ctx);
    memcpy(&ctx, ctx_in, ctx_in->struct_size < sizeof ctx ? ctx_in->struct_size : sizeof ctx);
    if (meta->struct_size < offsetof(RadModelMeta, rope_theta) + sizeof meta->rope_theta)
        return rad_block_fail(b, BERT_PN ": RadModelMeta too old (struct_size %u)", (unsigned)meta->struct_size);
    BertModel *m = rad_builder_alloc(b, sizeof *m);
    if (!m) return 1;
    rad_builder_set_model(b, m);
    BertHparams *hp = &m->hp;
    int rc;
    if ((rc = bert_hparams(b, meta, &ctx, hp)) != 0) return rc;
    if ((rc = bert_declare_map(b, hp)) != 0) return rc;
    if ((rc = bert_declare_weights(b, hp, m)) != 0) return rc;
    if ((rc = bert_declare_buffers(b, hp, m)) != 0) return rc;
    if ((rc = bert_declare_ops(b, hp, m)) != 0) return rc;
    rad_note(b, "%s: %u layers, n_embd %u, %u heads x %u, n_ff %u, vocab %u, %u positions, %u token types", BERT_PN, hp->n_layers,
             hp->g.n_embd, hp->g.n_head, hp->g.head_dim, hp->g.n_ff, hp->n_vocab, hp->n_pos, hp->n_types);
    rad_note(b, "encoder: post-norm LayerNorm (eps %g), erf GELU, bidirectional attn_seq; pooled output: %s pooling%s, %u rows",
             (double)hp->g.rms_eps, bert_pool_modes[hp->pool_mode], hp->normalize ? " + l2_normalize" : "", hp->max_seqs);
    m->ready = 1;
    return 0;
}

/* ---- step ----------------------------------------------------------------------------------- */

static int bert_layer_step(RadCtx *c, const BertModel *m, const BertLayer *L, uint64_t n) {
    const RadAttnScratch *s = &m->as;
    int rc;
    if ((rc = rad_qkv_step(c, &L->qkv, n)) != 0) return rc;
    if ((rc = RAD_ISSUE_N(c, L->attn, n, brows(s->q, n), brows(s->k, n), brows(s->v, n), brows(s->o, n))) != 0) return rc;
    if ((rc = RAD_ISSUE_N(c, L->o, n, RAD_W(L->w_o), brows(s->o, n), brows(m->y, n))) != 0) return rc;
    if ((rc = RAD_ISSUE_N(c, L->add_bo, n, RAD_W(L->b_o), brows(m->y, n))) != 0) return rc;
    if ((rc = RAD_ISSUE_N(c, L->add_o, n, brows(m->x, n), brows(m->y, n), brows(m->x, n))) != 0) return rc;
    if ((rc = RAD_ISSUE_N(c, L->ln1, n, RAD_W(L->w_ln1), RAD_W(L->b_ln1), brows(m->x, n), brows(m->x, n))) != 0) return rc;
    if ((rc = RAD_ISSUE_N(c, L->up, n, RAD_W(L->w_up), brows(m->x, n), brows(m->ff, n))) != 0) return rc;
    if ((rc = RAD_ISSUE_N(c, L->add_bup, n, RAD_W(L->b_up), brows(m->ff, n))) != 0) return rc;
    if ((rc = RAD_ISSUE_N(c, L->gelu, n, brows(m->ff, n), brows(m->ff, n))) != 0) return rc;
    if ((rc = RAD_ISSUE_N(c, L->down, n, RAD_W(L->w_down), brows(m->ff, n), brows(m->y, n))) != 0) return rc;
    if ((rc = RAD_ISSUE_N(c, L->add_bdown, n, RAD_W(L->b_down), brows(m->y, n))) != 0) return rc;
    if ((rc = RAD_ISSUE_N(c, L->add_d, n, brows(m->x, n), brows(m->y, n), brows(m->x, n))) != 0) return rc;
    return RAD_ISSUE_N(c, L->ln2, n, RAD_W(L->w_ln2), RAD_W(L->b_ln2), brows(m->x, n), brows(m->x, n));
}

static void bert_step(RadCtx *c, const RadBatch *bt) {
    const BertModel *m = rad_ctx_model(c);
    if (!m || !m->ready) {
        rad_step_fail(c, BERT_PN ": step before a successful declare");
        return;
    }
    const uint64_t n = bt->n_tok, S = bt->n_seq;
    if (bt->struct_size >= offsetof(RadBatch, draft_pass) + sizeof bt->draft_pass && bt->draft_pass != 0) {
        rad_step_fail(c, BERT_PN ": a draft pass, but an encoder drafts nothing");
        return;
    }
    if (n > m->hp.g.max_tok || S > m->hp.max_seqs || (n && !S)) {
        rad_step_fail(c, BERT_PN ": the step exceeds the declared bounds (n_tok, n_seq)");
        return;
    }
    if (n == 0) return;
    /* whole sequences from position 0: a sequence's first row is at position 0 */
    for (uint64_t i = 0; i < S; i++)
        if (!bt->cu_seqlens || bt->cu_seqlens[i] >= (int32_t)n || bt->positions[bt->cu_seqlens[i]] != 0) {
            rad_step_fail(c, BERT_PN ": every sequence of an encoder step must be whole, from position 0");
            return;
        }
    if (RAD_ISSUE_N(c, m->emb_tok, n, RAD_W(m->w_tok), praw(bt->token_ids, RAD_I32, n), brows(m->x, n)) != 0) return;
    if (RAD_ISSUE_N(c, m->emb_pos, n, RAD_W(m->w_pos), praw(bt->positions, RAD_I32, n), brows(m->y, n)) != 0) return;
    if (RAD_ISSUE_N(c, m->add_pos, n, brows(m->x, n), brows(m->y, n), brows(m->x, n)) != 0) return;
    if (RAD_ISSUE_N(c, m->emb_type, n, RAD_W(m->w_type), praw(m->zeros, RAD_I32, n), brows(m->y, n)) != 0) return;
    if (RAD_ISSUE_N(c, m->add_type, n, brows(m->x, n), brows(m->y, n), brows(m->x, n)) != 0) return;
    if (RAD_ISSUE_N(c, m->eln, n, RAD_W(m->w_eln), RAD_W(m->b_eln), brows(m->x, n), brows(m->x, n)) != 0) return;
    for (uint32_t l = 0; l < m->hp.n_layers; l++)
        if (bert_layer_step(c, m, &m->layers[l], n) != 0) return;
    if (RAD_ISSUE_N(c, m->pool, n, brows(m->x, n), brows(m->pooled, S)) != 0) return;
    if (m->norm.id >= 0) (void)RAD_ISSUE_N(c, m->norm, S, brows(m->pooled, S));
}

static int bert_probe(const RadModelMeta *meta, RadArchProbe *out) {
    uint32_t s = out->struct_size;
    (void)meta;
    memset(out, 0, s < sizeof *out ? s : sizeof *out);
    out->struct_size = s;
    if (s >= offsetof(RadArchProbe, shape_probe_ok) + sizeof out->shape_probe_ok) out->shape_probe_ok = 1;
    return 0;
}

static const RadArchOps bert_ops = {
    .declare = bert_declare,
    .step = bert_step,
    .probe = bert_probe,
    .chat_format = NULL,
    .audio_format = NULL,
    .serves_imports = 0,
};

RAD_ARCH_PLUGIN(bert_ops, "bert", "", "1.0.0", "BERT sentence encoders: f32/f16/bf16 weights, pooled output")
