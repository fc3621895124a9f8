/* rad_tok_spm.c — SentencePiece BPE with byte fallback (tokenizer.model "llama": Llama 2, Gemma),
 * as Hugging Face runs it: the normalizer (" " -> "▁", a "▁" before the text with
 * add_space_prefix), the whole run as one word, each character its token or its <0xNN> bytes,
 * then BPE merges (the table's, else the ones its vocabulary implies). */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/tok/rad_tok_int.h"

static const RadValue *scores_of(const RadDict *kv) { return rad_dict_get(kv, "tokenizer.scores"); }

static double arr_real(const RadValue *v, uint64_t i) {
    switch (v->arr_type) {
    case RAD_VAL_F32: return ((const float *)v->v.arr)[i];
    case RAD_VAL_F64: return ((const double *)v->v.arr)[i];
    case RAD_VAL_I32: return ((const int32_t *)v->v.arr)[i];
    case RAD_VAL_U32: return ((const uint32_t *)v->v.arr)[i];
    case RAD_VAL_I64: return (double)((const int64_t *)v->v.arr)[i];
    case RAD_VAL_U64: return (double)((const uint64_t *)v->v.arr)[i];
    case RAD_VAL_I16: return ((const int16_t *)v->v.arr)[i];
    case RAD_VAL_U16: return ((const uint16_t *)v->v.arr)[i];
    case RAD_VAL_I8: return ((const int8_t *)v->v.arr)[i];
    case RAD_VAL_U8: return ((const uint8_t *)v->v.arr)[i];
    default: return 0;
    }
}

typedef struct ScoreIdx {
    double s;
    uint32_t id;
} ScoreIdx;

static int by_score(const void *a, const void *b) {
    const ScoreIdx *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int tok_spm_init(RadTok *t, const RadDict *kv, RadErr *e) {
    /* Byte fallback: the tokens Hugging Face looks up as format!("<{:#04X}>", b). */
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        t->byte_id[b] = tok_vocab_find(t, s, 6);
    }
    for (uint32_t id = 0; id < t->n; id++) {
        uint32_t len;
        const char *s = tok_spell(t, (int32_t)id, &len);
        /* Hugging Face's ByteFallback decoder: six characters, "<0x", two hex digits, ">". */
        if (len == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && isxdigit((unsigned char)s[3]) &&
            isxdigit((unsigned char)s[4])) {
            unsigned hi = (unsigned)(isdigit((unsigned char)s[3]) ? s[3] - '0' : (tolower((unsigned char)s[3]) - 'a' + 10));
            unsigned lo = (unsigned)(isdigit((unsigned char)s[4]) ? s[4] - '0' : (tolower((unsigned char)s[4]) - 'a' + 10));
            t->tok[id].flags |= TF_BYTE;
            t->tok[id].byte = (uint8_t)(hi << 4 | lo);
        }
    }
    if (t->has_merges) return RAD_OK;
    /* Without merges, transformers derives them from the vocabulary, best first by score (by
     * token id for the Gemma files whose scores are not a merge order: t->spm_by_id). */
    if (t->spm_by_id) {
        for (uint32_t id = 0; id < t->n; id++) t->tok[id].grank = id;
        return RAD_OK;
    }
    const RadValue *sc = scores_of(kv);
    if (!sc) return RAD_OK; /* all equal: lengths and ids decide */
    if (sc->type != RAD_VAL_ARRAY || rad_val_scalar_size(sc->arr_type) == 0 || sc->arr_type == RAD_VAL_BOOL)
        return rad_err_set(e, RAD_E_FORMAT, "tokenizer.scores: expected an array of numbers, got %s",
                           rad_val_type_name(sc->type == RAD_VAL_ARRAY ? sc->arr_type : sc->type));
    if (sc->n != t->n)
        return rad_err_set(e, RAD_E_FORMAT, "tokenizer.scores: %" PRIu64 " scores for %u tokens", sc->n, t->n);
    ScoreIdx *si = malloc((size_t)t->n * sizeof *si);
    if (!si) return rad_err_set(e, RAD_E_NOMEM, "tokenizer.scores: out of memory");
    for (uint32_t id = 0; id < t->n; id++) {
        si[id].s = arr_real(sc, id);
        si[id].id = id;
        if (isnan(si[id].s)) {
            free(si);
            return rad_err_set(e, RAD_E_FORMAT, "tokenizer.scores[%u]: not a number", id);
        }
    }
    qsort(si, t->n, sizeof *si, by_score);
    uint32_t g = 0;
    for (uint32_t i = 0; i < t->n; i++) {
        if (i > 0 && si[i].s != si[i - 1].s) g++;
        t->tok[si[i].id].grank = g;
    }
    free(si);
    return RAD_OK;
}

int tok_encode_spm(const RadTok *t, TokWork *w, const uint8_t *s, size_t n, IdVec *out, RadErr *e) {
    int rc;
    if (n == 0) return RAD_OK;
    /* The normalizer: Prepend("▁") when add_space_prefix, Replace(" ", "▁"). */
    size_t spaces = 0;
    for (size_t i = 0; i < n; i++) spaces += s[i] == ' ';
    size_t m = n + 2 * spaces + (t->add_space_prefix ? 3 : 0);
    if ((rc = tok_work_buf(w, m, e)) || (rc = tok_sym_reserve(w, m, e))) return rc;
    uint8_t *q = (uint8_t *)w->buf;
    size_t k = 0;
    if (t->add_space_prefix) q[k++] = 0xE2, q[k++] = 0x96, q[k++] = 0x81;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') q[k++] = 0xE2, q[k++] = 0x96, q[k++] = 0x81;
        else q[k++] = s[i];
    }
    /* Hugging Face's BPE::merge_word: each character its token, else its byte tokens (all of
     * them, or none), else the unknown token, consecutive unknowns fused into one. A byte that
     * is not UTF-8 counts as a character of its own. */
    size_t ns = 0;
    bool pending_unk = false;
    for (size_t i = 0; i < k;) {
        size_t l = tok_utf8_len(q + i, k - i);
        if (l == 0) l = 1;
        int32_t id = tok_vocab_find(t, (const char *)q + i, l);
        if (id >= 0) {
            if (pending_unk) tok_sym_set(w, ns++, t->unk), pending_unk = false;
            tok_sym_set(w, ns++, id);
        } else {
            bool all = true;
            for (size_t j = 0; j < l; j++) all = all && t->byte_id[q[i + j]] >= 0;
            if (all) {
                for (size_t j = 0; j < l; j++) tok_sym_set(w, ns++, t->byte_id[q[i + j]]);
            } else if (t->unk >= 0) {
                pending_unk = true;
            }
        }
        i += l;
    }
    if (pending_unk) tok_sym_set(w, ns++, t->unk);
    return tok_bpe_merge(t, w, ns, out, e);
}
