#include "rad_model.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "Radiance reads little-endian files in place");

void rad_model_free(RadModelFile *m) {
    if (!m) return;
    rad_kv_free(&m->meta);
    rad_kv_free(&m->tok);
    rad_kv_free(&m->chat);
    rad_kv_free(&m->raw);
    for (uint64_t i = 0; i < m->n_tensors; i++) free(m->tensors[i].name);
    free(m->tensors);
    for (int i = 0; i < m->n_ins; i++) rad_in_close(&m->ins[i]);
    free(m->ins);
    memset(m, 0, sizeof *m);
}

int rad_model_add_tensor(RadModelFile *m, RadTensor *t, RadErr *e) {
    if ((m->n_tensors & (m->n_tensors - 1)) == 0) { /* grow at powers of two */
        uint64_t nc = m->n_tensors ? m->n_tensors * 2 : 16;
        RadTensor *nt = realloc(m->tensors, nc * sizeof *nt);
        if (!nt) {
            free(t->name);
            t->name = NULL;
            return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory adding a tensor", m->path);
        }
        m->tensors = nt;
    }
    m->tensors[m->n_tensors++] = *t;
    t->name = NULL;
    return RAD_OK;
}

const RadTensor *rad_model_find(const RadModelFile *m, const char *name) {
    for (uint64_t i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
    return NULL;
}

int rad_tensor_bytes(RadEnc enc, uint32_t rank, const uint64_t *shape, uint64_t *n_elems,
                     uint64_t *n_bytes, const char *tname, RadErr *e) {
    const RadEncInfo *ei = rad_enc_info(enc);
    if (!ei) return rad_err_set(e, RAD_E_UNSUPPORTED, "tensor '%s': unknown encoding %d", tname, (int)enc);
    if (rank > RAD_MAX_RANK)
        return rad_err_set(e, RAD_E_FORMAT, "tensor '%s': rank %u exceeds %d", tname, rank, RAD_MAX_RANK);
    uint64_t n = 1;
    for (uint32_t i = 0; i < rank; i++) {
        if (shape[i] != 0 && n > UINT64_MAX / shape[i])
            return rad_err_set(e, RAD_E_FORMAT, "tensor '%s': element count overflows", tname);
        n *= shape[i];
    }
    if (rank > 0 && shape[rank - 1] % ei->block_elems != 0)
        return rad_err_set(e, RAD_E_FORMAT, "tensor '%s': innermost dim %" PRIu64
                           " is not a multiple of the %s block (%u)", tname, shape[rank - 1],
                           ei->name, ei->block_elems);
    if (rank == 0 && ei->block_elems != 1)
        return rad_err_set(e, RAD_E_FORMAT, "tensor '%s': a scalar cannot be %s", tname, ei->name);
    uint64_t blocks = n / ei->block_elems;
    if (blocks > UINT64_MAX / ei->block_bytes)
        return rad_err_set(e, RAD_E_FORMAT, "tensor '%s': byte count overflows", tname);
    if (n_elems) *n_elems = n;
    if (n_bytes) *n_bytes = blocks * ei->block_bytes;
    return RAD_OK;
}

/* model.* keys as the ABI struct (docs/KEYS.md). Integer fields absent read as 0. */
int rad_model_meta(const RadModelFile *m, RadModelMeta *out, RadErr *e) {
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    const RadKV *kv = &m->meta;
    int rc = rad_kv_gets(kv, "model.arch_id", &out->arch_id, e);
    if (rc == RAD_E_NOTFOUND)
        return rad_err_set(e, RAD_E_NOTFOUND, "%s: metadata 'model.arch_id' is missing", m->path);
    if (rc) return rc;
    out->name = "";
    out->quant = "";
    if ((rc = rad_kv_gets(kv, "model.name", &out->name, e)) && rc != RAD_E_NOTFOUND) return rc;
    if ((rc = rad_kv_gets(kv, "model.quant", &out->quant, e)) && rc != RAD_E_NOTFOUND) return rc;
    static const struct { const char *key; size_t off; } ints[] = {
        {"model.n_layers", offsetof(RadModelMeta, n_layers)},
        {"model.n_embd", offsetof(RadModelMeta, n_embd)},
        {"model.n_head", offsetof(RadModelMeta, n_head)},
        {"model.n_head_kv", offsetof(RadModelMeta, n_head_kv)},
        {"model.head_dim", offsetof(RadModelMeta, head_dim)},
        {"model.n_ff", offsetof(RadModelMeta, n_ff)},
        {"model.n_vocab", offsetof(RadModelMeta, n_vocab)},
        {"model.n_ctx_train", offsetof(RadModelMeta, n_ctx_train)},
        {"model.n_expert", offsetof(RadModelMeta, n_expert)},
        {"model.n_expert_used", offsetof(RadModelMeta, n_expert_used)},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int64_t x = 0;
        rc = rad_kv_geti(kv, ints[i].key, &x, e);
        if (rc && rc != RAD_E_NOTFOUND) return rc;
        if (x < 0 || x > INT32_MAX)
            return rad_err_set(e, RAD_E_FORMAT, "%s: metadata '%s': %" PRId64 " out of range",
                               m->path, ints[i].key, x);
        int32_t v = (int32_t)x;
        memcpy((char *)out + ints[i].off, &v, sizeof v);
    }
    double f = 0;
    if ((rc = rad_kv_getf(kv, "model.rms_eps", &f, e)) && rc != RAD_E_NOTFOUND) return rc;
    out->rms_eps = (float)f;
    f = 10000.0;
    if ((rc = rad_kv_getf(kv, "model.rope_theta", &f, e)) && rc != RAD_E_NOTFOUND) return rc;
    out->rope_theta = (float)f;
    return RAD_OK;
}
