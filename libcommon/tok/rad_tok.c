/* rad_tok.c — building a tokenizer from a tok table (docs/KEYS.md), and encode: added tokens are
 * cut out of the text first, then each run between them goes to the model (rad_tok_bpe.c,
 * rad_tok_spm.c). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/tok/rad_tok_int.h"

/* ---- reading the table --------------------------------------------------------------------- */

static int want_array(const RadDict *kv, const char *key, bool strings, const RadValue **out, RadErr *e) {
    const RadValue *v = rad_dict_get(kv, key);
    *out = v;
    if (!v) return RAD_E_NOTFOUND;
    bool ok = v->type == RAD_VAL_ARRAY &&
              (strings ? v->arr_type == RAD_VAL_STRING
                       : rad_val_scalar_size(v->arr_type) != 0 && v->arr_type != RAD_VAL_F32 &&
                             v->arr_type != RAD_VAL_F64 && v->arr_type != RAD_VAL_BOOL);
    if (!ok)
        return rad_err_set(e, RAD_E_FORMAT, "%s: expected an array of %s, got %s%s", key,
                           strings ? "strings" : "integers", v->type == RAD_VAL_ARRAY ? "an array of " : "",
                           rad_val_type_name(v->type == RAD_VAL_ARRAY ? v->arr_type : v->type));
    return RAD_OK;
}

static int64_t arr_int(const RadValue *v, uint64_t i) {
    switch (v->arr_type) {
    case RAD_VAL_I8: return ((const int8_t *)v->v.arr)[i];
    case RAD_VAL_U8: return ((const uint8_t *)v->v.arr)[i];
    case RAD_VAL_I16: return ((const int16_t *)v->v.arr)[i];
    case RAD_VAL_U16: return ((const uint16_t *)v->v.arr)[i];
    case RAD_VAL_I32: return ((const int32_t *)v->v.arr)[i];
    case RAD_VAL_U32: return ((const uint32_t *)v->v.arr)[i];
    case RAD_VAL_I64: return ((const int64_t *)v->v.arr)[i];
    case RAD_VAL_U64: {
        uint64_t x = ((const uint64_t *)v->v.arr)[i];
        return x > INT64_MAX ? INT64_MAX : (int64_t)x;
    }
    default: return 0;
    }
}

static int get_id(const RadDict *kv, const char *key, uint32_t n, int32_t *out, RadErr *e) {
    int64_t v;
    *out = -1;
    int rc = rad_dict_geti(kv, key, &v, e);
    if (rc == RAD_E_NOTFOUND) return RAD_OK;
    if (rc) return rc;
    if (v < 0) return RAD_OK; /* -1: none */
    if (v >= n)
        return rad_err_set(e, RAD_E_FORMAT, "%s: id %" PRId64 " is outside the vocabulary (%u tokens)", key, v, n);
    *out = (int32_t)v;
    return RAD_OK;
}

static int get_bool(const RadDict *kv, const char *key, bool dflt, bool *out, RadErr *e) {
    const RadValue *v = rad_dict_get(kv, key);
    *out = dflt;
    if (!v) return RAD_OK;
    if (v->type != RAD_VAL_BOOL)
        return rad_err_set(e, RAD_E_FORMAT, "%s: expected a bool, got %s", key, rad_val_type_name(v->type));
    *out = v->v.u != 0;
    return RAD_OK;
}

static int get_str(const RadDict *kv, const char *key, const char **out, RadErr *e) {
    *out = NULL;
    int rc = rad_dict_gets(kv, key, out, e);
    return rc == RAD_E_NOTFOUND ? RAD_OK : rc;
}

/* ---- spellings ----------------------------------------------------------------------------- */

/* Every token's text and spelling in one buffer, addressed by 32-bit offsets. */
static int arena_put(RadBuf *a, const void *s, size_t n, uint32_t *off, RadErr *e) {
    if (a->len + n > UINT32_MAX) return rad_err_set(e, RAD_E_LIMIT, "tokenizer.tokens: more than 4 GiB of text");
    *off = (uint32_t)a->len;
    int rc = rad_buf_put(a, s, n, NULL);
    return rc ? rad_err_set(e, rc, "tokenizer.tokens: out of memory") : RAD_OK;
}

/* The code point at p (0 and *l = 1 for a byte that does not start a well-formed character). */
static uint32_t cp_at(const uint8_t *p, size_t n, size_t *l) {
    *l = tok_utf8_len(p, n);
    switch (*l) {
    case 1: return p[0];
    case 2: return (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F);
    case 3: return (uint32_t)(p[0] & 0x0F) << 12 | (uint32_t)(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
    case 4: return (uint32_t)(p[0] & 0x07) << 18 | (uint32_t)(p[1] & 0x3F) << 12 | (uint32_t)(p[2] & 0x3F) << 6 | (p[3] & 0x3F);
    default: *l = 1; return UINT32_MAX;
    }
}

/* Python's str.isspace. */
static bool py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Byte-level: a token not written in GPT-2's byte alphabet is looked up by its bytes in it (as
 * transformers' byte_level_tokenizer does). Returns the respelled length, or 0 when it is
 * written in the alphabet already. */
static size_t respell_bytelevel(const RadTok *t, const uint8_t *s, size_t n, uint8_t *out) {
    bool alpha = true;
    for (size_t i = 0; i < n && alpha;) {
        size_t l;
        uint32_t c = cp_at(s + i, n - i, &l);
        alpha = c < 324 && t->char_byte[c] >= 0;
        i += l;
    }
    if (alpha) return 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t c = t->byte_char[s[i]];
        if (c < 0x80) out[k++] = (uint8_t)c;
        else out[k++] = (uint8_t)(0xC0 | c >> 6), out[k++] = (uint8_t)(0x80 | (c & 0x3F));
    }
    return k;
}

/* SentencePiece: llama.cpp writes Gemma's runs of "▁" as real spaces; transformers' gemma_tokenizer
 * spells a token of whitespace with a space in it as that many "▁" again. */
static size_t respell_spm(const uint8_t *s, size_t n, uint8_t *out) {
    bool space = false;
    size_t chars = 0;
    for (size_t i = 0; i < n;) {
        size_t l;
        uint32_t c = cp_at(s + i, n - i, &l);
        if (!py_space(c)) return 0;
        space = space || c == ' ';
        chars++;
        i += l;
    }
    if (!space) return 0;
    for (size_t i = 0; i < chars; i++) out[3 * i] = 0xE2, out[3 * i + 1] = 0x96, out[3 * i + 2] = 0x81;
    return 3 * chars;
}

static uint32_t count_chars(const uint8_t *s, size_t n) {
    uint32_t c = 0;
    for (size_t i = 0; i < n; c++) {
        size_t l = tok_utf8_len(s + i, n - i);
        i += l ? l : 1;
    }
    return c;
}

static int read_tokens(RadTok *t, const RadDict *kv, RadErr *e) {
    const RadValue *toks, *types;
    int rc = want_array(kv, "tokenizer.tokens", true, &toks, e);
    if (rc == RAD_E_NOTFOUND) return rad_err_set(e, RAD_E_FORMAT, "tokenizer.tokens: missing");
    if (rc) return rc;
    if (toks->n == 0) return rad_err_set(e, RAD_E_FORMAT, "tokenizer.tokens: the vocabulary is empty");
    if (toks->n > TOK_MAX_VOCAB)
        return rad_err_set(e, RAD_E_LIMIT, "tokenizer.tokens: %" PRIu64 " tokens, more than %u", toks->n, TOK_MAX_VOCAB);
    rc = want_array(kv, "tokenizer.token_type", false, &types, e);
    if (rc && rc != RAD_E_NOTFOUND) return rc;
    rc = RAD_OK; /* no token types: all normal */
    if (types && types->n != toks->n)
        return rad_err_set(e, RAD_E_FORMAT, "tokenizer.token_type: %" PRIu64 " types for %" PRIu64 " tokens",
                           types->n, toks->n);
    t->n = (uint32_t)toks->n;
    if (!(t->tok = calloc(t->n, sizeof *t->tok)))
        return rad_err_set(e, RAD_E_NOMEM, "tokenizer.tokens: out of memory for %u tokens", t->n);
    const RadStr *ts = toks->v.arr;
    RadBuf a = {0};
    uint8_t *tmp = malloc(3 * (size_t)TOK_MAX_LEN);
    if (!tmp) return rad_err_set(e, RAD_E_NOMEM, "tokenizer.tokens: out of memory");
    for (uint32_t i = 0; i < t->n && !rc; i++) {
        TokEntry *k = &t->tok[i];
        if (ts[i].len > TOK_MAX_LEN) {
            rc = rad_err_set(e, RAD_E_FORMAT, "tokenizer.tokens[%u]: %" PRIu64 " bytes, more than %u", i,
                             ts[i].len, TOK_MAX_LEN);
            break;
        }
        int64_t ty = types ? arr_int(types, i) : TT_NORMAL;
        if (ty < 0 || ty > TT_BYTE) {
            rc = rad_err_set(e, RAD_E_FORMAT, "tokenizer.token_type[%u]: %" PRId64 " is not a token type (1..6)", i, ty);
            break;
        }
        k->type = (uint8_t)(ty ? ty : TT_NORMAL);
        const uint8_t *s = (const uint8_t *)ts[i].p;
        size_t n = (size_t)ts[i].len;
        if ((rc = arena_put(&a, s, n, &k->text_off, e))) break;
        k->text_len = (uint32_t)n;
        size_t rl = t->kind == TOKK_BPE ? respell_bytelevel(t, s, n, tmp) : t->kind == TOKK_SPM ? respell_spm(s, n, tmp) : 0;
        if (rl) {
            if ((rc = arena_put(&a, tmp, rl, &k->spell_off, e))) break;
            k->spell_len = (uint32_t)rl;
            if (t->kind == TOKK_SPM) t->spm_by_id = true;
        } else {
            k->spell_off = k->text_off, k->spell_len = k->text_len;
        }
        if (k->spell_len > t->max_spell) t->max_spell = k->spell_len;
        k->nchars = count_chars((const uint8_t *)a.p + k->spell_off, k->spell_len);
        /* Added tokens, as transformers' add_gguf_special_tokens makes them: control (and the
         * unknown token) special, user-defined not; in a byte-level vocabulary only those written
         * in its alphabet; a respelled user-defined token stays in the model's vocabulary. */
        bool control = k->type == TT_CONTROL || k->type == TT_UNKNOWN;
        if (n > 0 && (control || k->type == TT_USER) && (!rl || (control && t->kind == TOKK_SPM))) {
            k->flags |= TF_ADDED;
            t->has_added = true;
            if (control) k->flags |= TF_SPECIAL;
        }
    }
    free(tmp);
    if (!rc && !a.p && !(a.p = malloc(1))) /* every token empty: still a valid base pointer */
        rc = rad_err_set(e, RAD_E_NOMEM, "tokenizer.tokens: out of memory");
    t->arena = a.p;
    return rc;
}

/* "a b" -> the two tokens; a token with a space in it is found by trying each space. */
static int read_merges(RadTok *t, const RadDict *kv, RadErr *e) {
    const RadValue *m;
    int rc = want_array(kv, "tokenizer.merges", true, &m, e);
    if (rc == RAD_E_NOTFOUND) {
        if (t->kind == TOKK_BPE)
            return rad_err_set(e, RAD_E_FORMAT, "tokenizer.merges: missing (byte-level BPE needs them)");
        return RAD_OK;
    }
    if (rc) return rc;
    if (m->n > UINT32_MAX) return rad_err_set(e, RAD_E_LIMIT, "tokenizer.merges: %" PRIu64 " merges", m->n);
    if ((rc = tok_pairmap_init(&t->merges, m->n, e))) return rc;
    t->has_merges = true;
    const RadStr *ms = m->v.arr;
    char *cat = malloc(2 * (size_t)TOK_MAX_LEN + 2);
    if (!cat) return rad_err_set(e, RAD_E_NOMEM, "tokenizer.merges: out of memory");
    for (uint64_t i = 0; i < m->n && !rc; i++) {
        const char *s = ms[i].p;
        size_t n = (size_t)ms[i].len;
        int32_t a = -1, b = -1, r = -1;
        int spaces = 0, found = 0;
        for (size_t j = 0; j < n; j++) spaces += s[j] == ' ';
        for (size_t j = 0; j < n && n <= 2 * (size_t)TOK_MAX_LEN + 1; j++) {
            if (s[j] != ' ') continue;
            int32_t x = tok_vocab_find(t, s, j), y = tok_vocab_find(t, s + j + 1, n - j - 1);
            if (spaces > 1 && (x < 0 || y < 0)) continue;
            a = x, b = y, found++;
            memcpy(cat, s, j);
            memcpy(cat + j, s + j + 1, n - j - 1);
            r = tok_vocab_find(t, cat, n - 1);
            if (spaces == 1) break;
        }
        if (found != 1)
            rc = rad_err_set(e, RAD_E_FORMAT, "tokenizer.merges[%" PRIu64 "]: '%.60s' is not two tokens "
                             "separated by a space", i, s);
        else if (a < 0 || b < 0)
            rc = rad_err_set(e, RAD_E_FORMAT, "tokenizer.merges[%" PRIu64 "]: '%.60s' names a token "
                             "that is not in the vocabulary", i, s);
        else if (r < 0)
            rc = rad_err_set(e, RAD_E_FORMAT, "tokenizer.merges[%" PRIu64 "]: '%.60s' makes a token "
                             "that is not in the vocabulary", i, s);
        else
            tok_pairmap_put(&t->merges, a, b, (uint32_t)i, r);
    }
    free(cat);
    return rc;
}

/* WordPiece: what rad_hf.c's import of a tokenizer.json writes (docs/KEYS.md). A GGUF "bert" table
 * spells words with "▁" (llama.cpp's converter) and has none of these keys: refused by name. */
static int read_wordpiece(RadTok *t, const RadDict *kv, const char *pre, RadErr *e) {
    const char *prefix, *nz, *dec;
    int64_t max = 100;
    int rc = get_str(kv, "tokenizer.wordpiece.prefix", &prefix, e);
    if (rc) return rc;
    if (!prefix)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "tokenizer.wordpiece.prefix: missing (a 'bert' tokenizer is served "
                           "from a tokenizer.json's WordPiece model only)");
    if (strlen(prefix) >= sizeof t->wp_prefix)
        return rad_err_set(e, RAD_E_LIMIT, "tokenizer.wordpiece.prefix: %zu bytes, more than %zu", strlen(prefix),
                           sizeof t->wp_prefix - 1);
    memcpy(t->wp_prefix, prefix, strlen(prefix) + 1);
    t->wp_prefix_len = (uint32_t)strlen(prefix);
    if (!pre || strcmp(pre, "bert") != 0)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "tokenizer.pre: '%.40s' is not implemented for WordPiece (bert is)",
                           pre ? pre : "none");
    if ((rc = get_str(kv, "tokenizer.decoder", &dec, e))) return rc;
    if (!dec || strcmp(dec, "WordPiece") != 0)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "tokenizer.decoder: %s%.40s%s is not implemented for WordPiece "
                           "(WordPiece is)", dec ? "'" : "", dec ? dec : "none", dec ? "'" : "");
    if ((rc = get_str(kv, "tokenizer.normalizer", &nz, e))) return rc;
    if (nz && strcmp(nz, "BertNormalizer") != 0)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "tokenizer.normalizer: '%.40s' is not implemented for WordPiece "
                           "(BertNormalizer is)", nz);
    rc = rad_dict_geti(kv, "tokenizer.wordpiece.max_chars", &max, e);
    if (rc && rc != RAD_E_NOTFOUND) return rc;
    if (max < 0 || max > UINT32_MAX)
        return rad_err_set(e, RAD_E_FORMAT, "tokenizer.wordpiece.max_chars: %" PRId64 " is out of range", max);
    t->wp_max_chars = (uint32_t)max;
    /* absent: HF's BertNormalizer defaults (strip_accents follows lowercase) */
    if ((rc = get_bool(kv, "tokenizer.bert.clean_text", true, &t->wp_clean, e)) ||
        (rc = get_bool(kv, "tokenizer.bert.chinese_chars", true, &t->wp_cjk, e)) ||
        (rc = get_bool(kv, "tokenizer.bert.lowercase", true, &t->wp_lower, e)) ||
        (rc = get_bool(kv, "tokenizer.bert.strip_accents", t->wp_lower, &t->wp_strip, e)) ||
        (rc = get_bool(kv, "tokenizer.wordpiece.cleanup", true, &t->wp_cleanup, e)) ||
        (rc = get_id(kv, "tokenizer.cls_id", t->n, &t->cls, e)) ||
        (rc = get_id(kv, "tokenizer.sep_id", t->n, &t->sep, e)))
        return rc;
    if (t->unk < 0) return rad_err_set(e, RAD_E_FORMAT, "tokenizer.unk_id: missing (WordPiece needs an unknown token)");
    snprintf(t->pre, sizeof t->pre, "%s", "bert");
    return RAD_OK;
}

int rad_tok_init(RadTok **out, const RadDict *kv, RadErr *e) {
    *out = NULL;
    if (!kv) return rad_err_set(e, RAD_E_ARG, "tokenizer: no table");
    const char *model, *pre, *pattern;
    int rc = get_str(kv, "tokenizer.model", &model, e);
    if (rc) return rc;
    if (!model)
        return rad_err_set(e, RAD_E_FORMAT, "tokenizer.model: missing (the input has no tokenizer%s)",
                           kv->n ? "" : " table");
    int kind = strcmp(model, "gpt2") == 0 ? TOKK_BPE : strcmp(model, "llama") == 0 ? TOKK_SPM
               : strcmp(model, "bert") == 0 ? TOKK_WPM : 0;
    if (!kind)
        return rad_err_set(e, RAD_E_UNSUPPORTED, "tokenizer.model: '%.40s' is not supported (gpt2, llama, bert are)", model);
    if ((rc = get_str(kv, "tokenizer.pre", &pre, e)) || (rc = get_str(kv, "tokenizer.pre_pattern", &pattern, e)))
        return rc;
    RadTok *t = calloc(1, sizeof *t);
    if (!t) return rad_err_set(e, RAD_E_NOMEM, "tokenizer: out of memory");
    t->kind = kind;
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    tok_bytelevel_map(t);
    if ((rc = read_tokens(t, kv, e)) || (rc = tok_strmap_build(t, e))) goto fail;
    if ((rc = get_id(kv, "tokenizer.bos_id", t->n, &t->bos, e)) ||
        (rc = get_id(kv, "tokenizer.eos_id", t->n, &t->eos, e)) ||
        (rc = get_id(kv, "tokenizer.eot_id", t->n, &t->eot, e)) ||
        (rc = get_id(kv, "tokenizer.unk_id", t->n, &t->unk, e)))
        goto fail;
    /* pad_id, sep_id, mask_id play no part in encode or decode and are not checked. */
    if ((rc = get_bool(kv, "tokenizer.add_bos", kind == TOKK_SPM, &t->add_bos, e)) ||
        (rc = get_bool(kv, "tokenizer.add_eos", false, &t->add_eos, e)) ||
        (rc = get_bool(kv, "tokenizer.add_space_prefix", kind == TOKK_SPM, &t->add_space_prefix, e)))
        goto fail;
    if (kind != TOKK_WPM && (rc = read_merges(t, kv, e))) goto fail;
    if (kind == TOKK_WPM) {
        if ((rc = read_wordpiece(t, kv, pre, e))) goto fail;
    } else if (kind == TOKK_BPE) {
        if ((rc = tok_pre_init(t, pre, pattern, e))) goto fail;
        for (int b = 0; b < 256; b++) {
            char s[2];
            uint16_t c = t->byte_char[b];
            size_t l = 1;
            if (c < 0x80) s[0] = (char)c;
            else s[0] = (char)(0xC0 | c >> 6), s[1] = (char)(0x80 | (c & 0x3F)), l = 2;
            t->byte_id[b] = tok_vocab_find(t, s, l);
        }
    } else {
        snprintf(t->pre, sizeof t->pre, "%s", "sentencepiece");
        if ((rc = tok_spm_init(t, kv, e))) goto fail;
    }
    if (t->has_added && (rc = tok_trie_build(t, e))) goto fail;
    *out = t;
    return RAD_OK;
fail:
    rad_tok_free(t);
    return rc;
}

void rad_tok_free(RadTok *t) {
    if (!t) return;
    free(t->tok);
    free(t->arena);
    free(t->vocab.slot);
    tok_pairmap_free(&t->merges);
    tok_trie_free(&t->added);
    tok_pre_free(t);
    free(t);
}

/* ---- encode -------------------------------------------------------------------------------- */

static int encode_run(const RadTok *t, TokWork *w, const uint8_t *s, size_t n, IdVec *out, RadErr *e) {
    if (n == 0) return RAD_OK;
    if (t->kind == TOKK_SPM) return tok_encode_spm(t, w, s, n, out, e);
    if (t->kind == TOKK_WPM) return tok_encode_wpm(t, s, n, out, e);
    if (t->add_space_prefix && s[0] != ' ') { /* ByteLevel(add_prefix_space=true) */
        uint8_t *q = malloc(n + 1);
        if (!q) return rad_err_set(e, RAD_E_NOMEM, "tokenizer: out of memory");
        q[0] = ' ';
        memcpy(q + 1, s, n);
        int rc = tok_encode_bytelevel(t, w, q, n + 1, out, e);
        free(q);
        return rc;
    }
    return tok_encode_bytelevel(t, w, s, n, out, e);
}

int rad_tok_encode(const RadTok *t, const char *text, size_t n, int add_special, int32_t **ids,
                   size_t *n_ids, RadErr *e) {
    return rad_tok_encode_spans(t, text, n, add_special, NULL, 0, ids, n_ids, e);
}

int rad_tok_encode_spans(const RadTok *t, const char *text, size_t n, int add_special, const RadTokSpan *plain,
                         size_t n_plain, int32_t **ids, size_t *n_ids, RadErr *e) {
    *ids = NULL;
    *n_ids = 0;
    if (!t || (!text && n)) return rad_err_set(e, RAD_E_ARG, "tokenizer: no tokenizer or no text");
    if (n_plain && !plain) return rad_err_set(e, RAD_E_ARG, "tokenizer: %zu plain ranges and no table", n_plain);
    for (size_t k = 0, end = 0; k < n_plain; k++) {
        if (plain[k].off < end || plain[k].off > n || plain[k].len > n - plain[k].off)
            return rad_err_set(e, RAD_E_ARG, "tokenizer: plain range %zu (%zu+%zu) is out of order or past the text (%zu bytes)",
                               k, plain[k].off, plain[k].len, n);
        end = plain[k].off + plain[k].len;
    }
    const uint8_t *s = (const uint8_t *)text;
    IdVec out = {0};
    TokWork w = {0};
    int rc = RAD_OK;
    /* BERT's template is [CLS] $A [SEP]; the others' BOS/EOS as the table says */
    int32_t first = t->kind == TOKK_WPM ? t->cls : t->add_bos ? t->bos : -1;
    int32_t last = t->kind == TOKK_WPM ? t->sep : t->add_eos ? t->eos : -1;
    if (add_special && first >= 0) rc = tok_idvec_push(&out, first, e);
    size_t seg = 0, sp = 0;
    for (size_t i = 0; i < n && !rc;) {
        size_t len = 0;
        int32_t id = t->has_added ? tok_trie_match(&t->added, s + i, n - i, &len) : -1;
        if (id < 0) {
            i++;
            continue;
        }
        if (n_plain && (t->tok[id].flags & TF_SPECIAL)) {
            while (sp < n_plain && (plain[sp].len == 0 || plain[sp].off + plain[sp].len <= i)) sp++;
            if (sp < n_plain && plain[sp].off < i + len) {
                /* text, not a token: inside a range skip the match whole (HF goes on after it),
                 * from markup into a range try the next byte */
                size_t end = plain[sp].off + plain[sp].len;
                i = plain[sp].off <= i ? (i + len < end ? i + len : end) : i + 1;
                continue;
            }
        }
        if ((rc = encode_run(t, &w, s + seg, i - seg, &out, e)) || (rc = tok_idvec_push(&out, id, e))) break;
        i += len;
        seg = i;
    }
    if (!rc) rc = encode_run(t, &w, s + seg, n - seg, &out, e);
    if (!rc && add_special && last >= 0) rc = tok_idvec_push(&out, last, e);
    tok_work_free(&w);
    if (rc) {
        free(out.p);
        return rc;
    }
    if (!out.p && !(out.p = malloc(sizeof *out.p))) return rad_err_set(e, RAD_E_NOMEM, "tokenizer: out of memory");
    *ids = out.p;
    *n_ids = out.n;
    return RAD_OK;
}

int32_t rad_tok_n_vocab(const RadTok *t) { return (int32_t)t->n; }
int32_t rad_tok_bos(const RadTok *t) { return t->bos; }
int32_t rad_tok_eos(const RadTok *t) { return t->eos; }
int32_t rad_tok_eot(const RadTok *t) { return t->eot; }
int rad_tok_is_special(const RadTok *t, int32_t id) {
    return id >= 0 && (uint32_t)id < t->n && (t->tok[id].flags & TF_SPECIAL) != 0;
}
