/* rad_tok_bpe.c — BPE merging (shared with SentencePiece) and byte-level BPE: GPT-2's byte map,
 * the pre-tokenizer splits, and the encode of one run of text between added tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/tok/rad_tok_int.h"

/* ---- the pre-tokenizers -------------------------------------------------------------------- */

/* GPT-2's split (Hugging Face ByteLevel(use_regex=true)). */
static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* Llama 3's Split regex (tokenizer.json), llama.cpp's "llama-bpe". */
static const char RE_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* Qwen2's: Llama 3's with single digits. */
static const char RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* Digits(individual_digits=true): every numeric character on its own. */
static const char RE_DIGITS[] = "\\p{N}";

static int compile(RadTok *t, const char *re, const char *key, RadErr *e) {
    int err;
    PCRE2_SIZE off;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED,
                                  PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, NULL);
    if (!c) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return rad_err_set(e, RAD_E_FORMAT, "%s: the regex does not compile at offset %zu: %s", key,
                           (size_t)off, (const char *)msg);
    }
    (void)pcre2_jit_compile(c, PCRE2_JIT_COMPLETE); /* without JIT, pcre2_match interprets */
    t->re[t->n_re++] = c;
    return RAD_OK;
}

int tok_pre_init(RadTok *t, const char *pre, const char *pattern, RadErr *e) {
    snprintf(t->pre, sizeof t->pre, "%s", pre ? pre : "default");
    if (!pre || strcmp(pre, "default") == 0) {
        /* transformers builds GPT2Tokenizer's own split for a GGUF whose pre has no regex it
         * knows; a tokenizer.json's Split regex is kept as tokenizer.pre_pattern. */
        return pattern ? compile(t, pattern, "tokenizer.pre_pattern", e)
                       : compile(t, RE_GPT2, "tokenizer.pre", e);
    }
    if (strcmp(pre, "gpt-2") == 0) return compile(t, RE_GPT2, "tokenizer.pre", e);
    if (strcmp(pre, "smollm") == 0) {
        int rc = compile(t, RE_DIGITS, "tokenizer.pre", e);
        return rc ? rc : compile(t, RE_GPT2, "tokenizer.pre", e);
    }
    if (strcmp(pre, "llama-bpe") == 0 || strcmp(pre, "llama3") == 0 || strcmp(pre, "llama-v3") == 0) {
        t->ignore_merges = true; /* as Llama 3's tokenizer.json and llama.cpp; not transformers' GGUF import */
        return compile(t, RE_LLAMA3, "tokenizer.pre", e);
    }
    if (strcmp(pre, "qwen2") == 0) return compile(t, RE_QWEN2, "tokenizer.pre", e);
    return rad_err_set(e, RAD_E_UNSUPPORTED, "tokenizer.pre: '%.40s' is not supported (gpt-2, smollm, "
                       "llama-bpe, qwen2, default)", pre);
}

void tok_pre_free(RadTok *t) {
    for (int i = 0; i < t->n_re; i++) pcre2_code_free(t->re[i]);
    t->n_re = 0;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 for
 * U+0100.. in byte order. */
void tok_bytelevel_map(RadTok *t) {
    int k = 0;
    for (int i = 0; i < 324; i++) t->char_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        t->byte_char[b] = (uint16_t)(keep ? b : 256 + k++);
        t->char_byte[t->byte_char[b]] = (int16_t)b;
    }
}

/* ---- scratch ------------------------------------------------------------------------------- */

typedef struct TokSym {
    int32_t id;
    int32_t prev, next;
    int32_t alive;
} TokSym;

typedef struct TokHeapEnt {
    uint64_t k1, k2; /* the merge's rank: merges' index, or (priority, lengths; token id) */
    uint32_t pos;
    int32_t new_id;
} TokHeapEnt;

void tok_work_free(TokWork *w) {
    free(w->sym);
    free(w->heap);
    free(w->buf);
    free(w->cat);
    free(w->piece);
    free(w->piece2);
    if (w->md) pcre2_match_data_free(w->md);
    if (w->mctx) pcre2_match_context_free(w->mctx);
    if (w->jit) pcre2_jit_stack_free(w->jit);
    memset(w, 0, sizeof *w);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem, RadErr *e) {
    if (need <= *cap) return RAD_OK;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return rad_err_set(e, RAD_E_NOMEM, "tokenizer: out of memory (%zu bytes)", c * elem);
    *p = q, *cap = c;
    return RAD_OK;
}

int tok_work_buf(TokWork *w, size_t n, RadErr *e) { return grow((void **)&w->buf, &w->buf_cap, n, 1, e); }

int tok_sym_reserve(TokWork *w, size_t n, RadErr *e) {
    return grow((void **)&w->sym, &w->sym_cap, n, sizeof *w->sym, e);
}

void tok_sym_set(TokWork *w, size_t i, int32_t id) { w->sym[i].id = id; }

/* ---- merging ------------------------------------------------------------------------------- */

/* The merge of (a, b), if any: its rank and result. SentencePiece tables without merges get the
 * merges transformers derives from the vocabulary (tokenization_utils_base.generate_merges):
 * every split of a token into two tokens, ordered by the token's priority (score, or id), then
 * the longer left part, then the longer right part, then the token id. */
static bool pair_rank(const RadTok *t, TokWork *w, int32_t a, int32_t b, uint64_t *k1, uint64_t *k2,
                      int32_t *nid) {
    if (t->has_merges) {
        uint32_t r;
        if (!tok_pairmap_get(&t->merges, a, b, &r, nid)) return false;
        *k1 = r, *k2 = 0;
        return true;
    }
    uint32_t la, lb;
    const char *sa = tok_spell(t, a, &la), *sb = tok_spell(t, b, &lb);
    memcpy(w->cat, sa, la); /* room for two tokens: reserved by tok_bpe_merge */
    memcpy(w->cat + la, sb, lb);
    int32_t id = tok_vocab_find(t, w->cat, (size_t)la + lb);
    if (id < 0) return false;
    *k1 = (uint64_t)t->tok[id].grank << 32 | (uint64_t)(0xFFFFu - t->tok[a].nchars) << 16 |
          (0xFFFFu - t->tok[b].nchars);
    *k2 = (uint64_t)id;
    *nid = id;
    return true;
}

static bool heap_less(const TokHeapEnt *x, const TokHeapEnt *y) {
    if (x->k1 != y->k1) return x->k1 < y->k1;
    if (x->k2 != y->k2) return x->k2 < y->k2;
    return x->pos < y->pos;
}

static int heap_push(TokWork *w, TokHeapEnt v, RadErr *e) {
    int rc = grow((void **)&w->heap, &w->heap_cap, w->heap_n + 1, sizeof *w->heap, e);
    if (rc) return rc;
    size_t i = w->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&v, &w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = v;
    return RAD_OK;
}

static TokHeapEnt heap_pop(TokWork *w) {
    TokHeapEnt top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!heap_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

static int push_pair(const RadTok *t, TokWork *w, int32_t pos, RadErr *e) {
    TokHeapEnt h;
    int32_t nx = w->sym[pos].next;
    if (!pair_rank(t, w, w->sym[pos].id, w->sym[nx].id, &h.k1, &h.k2, &h.new_id)) return RAD_OK;
    h.pos = (uint32_t)pos;
    return heap_push(w, h, e);
}

/* Hugging Face's Word::merge_all: a min-heap of (rank, position); an entry whose pair has changed
 * since it was queued is dropped when popped. */
int tok_bpe_merge(const RadTok *t, TokWork *w, size_t n, IdVec *out, RadErr *e) {
    if (n == 0) return RAD_OK;
    int rc;
    if (n > INT32_MAX) return rad_err_set(e, RAD_E_LIMIT, "tokenizer: a word of %zu symbols is too long", n);
    if (!t->has_merges && (rc = grow((void **)&w->cat, &w->cat_cap, 2 * (size_t)t->max_spell + 1, 1, e)))
        return rc;
    for (size_t i = 0; i < n; i++) {
        w->sym[i].prev = (int32_t)i - 1;
        w->sym[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
        w->sym[i].alive = 1;
    }
    w->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if ((rc = push_pair(t, w, (int32_t)i, e))) return rc;
    while (w->heap_n) {
        TokHeapEnt top = heap_pop(w);
        TokSym *s = &w->sym[top.pos];
        if (!s->alive || s->next < 0) continue;
        int32_t nx = s->next;
        uint64_t k1, k2;
        int32_t nid;
        if (!pair_rank(t, w, s->id, w->sym[nx].id, &k1, &k2, &nid) || nid != top.new_id) continue;
        s->id = top.new_id;
        s->next = w->sym[nx].next;
        w->sym[nx].alive = 0;
        if (s->next >= 0) w->sym[s->next].prev = (int32_t)top.pos;
        if (s->prev >= 0 && (rc = push_pair(t, w, s->prev, e))) return rc;
        if (s->next >= 0 && (rc = push_pair(t, w, (int32_t)top.pos, e))) return rc;
    }
    for (int32_t i = 0; i >= 0; i = w->sym[i].next)
        if ((rc = tok_idvec_push(out, w->sym[i].id, e))) return rc;
    return RAD_OK;
}

/* ---- byte-level encode --------------------------------------------------------------------- */

static int add_piece(size_t **p, size_t *n, size_t *cap, size_t off, size_t len, RadErr *e) {
    int rc = grow((void **)p, cap, 2 * (*n + 1), sizeof **p, e);
    if (rc) return rc;
    (*p)[2 * *n] = off, (*p)[2 * *n + 1] = len;
    (*n)++;
    return RAD_OK;
}

/* Splits [off, off+len) of s by re, keeping matches and the text between them as pieces
 * (Hugging Face's SplitDelimiterBehavior::Isolated). */
static int split_isolated(const pcre2_code *re, TokWork *w, const uint8_t *s, size_t off, size_t len,
                          size_t **out, size_t *out_n, size_t *out_cap, RadErr *e) {
    const uint8_t *sub = s + off;
    size_t cur = 0, start = 0;
    int rc;
    while (start < len) {
        int m = pcre2_match(re, sub, len, start, 0, w->md, w->mctx);
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(m, msg, sizeof msg);
            return rad_err_set(e, RAD_E_LIMIT, "tokenizer: the pre-tokenizer failed at byte %zu: %s",
                               off + start, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* an empty match (only a tokenizer.pre_pattern can make one) */
            size_t l = tok_utf8_len(sub + ms, len - ms);
            start = ms + (l ? l : 1);
            continue;
        }
        if (ms > cur && (rc = add_piece(out, out_n, out_cap, off + cur, ms - cur, e))) return rc;
        if ((rc = add_piece(out, out_n, out_cap, off + ms, me - ms, e))) return rc;
        cur = start = me;
    }
    if (cur < len && (rc = add_piece(out, out_n, out_cap, off + cur, len - cur, e))) return rc;
    return RAD_OK;
}

static int pretokenize(const RadTok *t, TokWork *w, const uint8_t *s, size_t n, RadErr *e) {
    int rc;
    if (!w->md) {
        size_t pairs = 1;
        for (int i = 0; i < t->n_re; i++) {
            uint32_t c = 0;
            pcre2_pattern_info(t->re[i], PCRE2_INFO_CAPTURECOUNT, &c);
            if (c + 1 > pairs) pairs = c + 1;
        }
        w->md = pcre2_match_data_create((uint32_t)pairs, NULL);
        w->mctx = pcre2_match_context_create(NULL);
        w->jit = pcre2_jit_stack_create(32 << 10, 8 << 20, NULL);
        if (!w->md || !w->mctx) return rad_err_set(e, RAD_E_NOMEM, "tokenizer: out of memory");
        if (w->jit) pcre2_jit_stack_assign(w->mctx, NULL, w->jit);
    }
    w->piece_n = 0;
    if ((rc = add_piece(&w->piece, &w->piece_n, &w->piece_cap, 0, n, e))) return rc;
    for (int r = 0; r < t->n_re; r++) {
        size_t n2 = 0;
        for (size_t i = 0; i < w->piece_n; i++) {
            size_t off = w->piece[2 * i], len = w->piece[2 * i + 1];
            if ((rc = split_isolated(t->re[r], w, s, off, len, &w->piece2, &n2, &w->piece2_cap, e)))
                return rc;
        }
        size_t *tp = w->piece, tc = w->piece_cap;
        w->piece = w->piece2, w->piece_cap = w->piece2_cap, w->piece_n = n2;
        w->piece2 = tp, w->piece2_cap = tc;
    }
    return RAD_OK;
}

int tok_encode_bytelevel(const RadTok *t, TokWork *w, const uint8_t *s, size_t n, IdVec *out,
                         RadErr *e) {
    int rc;
    if (n == 0) return RAD_OK;
    if ((rc = pretokenize(t, w, s, n, e))) return rc;
    for (size_t p = 0; p < w->piece_n; p++) {
        const uint8_t *q = s + w->piece[2 * p];
        size_t len = w->piece[2 * p + 1];
        if (t->ignore_merges) { /* the whole word, when the vocabulary has it */
            if ((rc = tok_work_buf(w, 2 * len, e))) return rc;
            size_t k = 0;
            for (size_t i = 0; i < len; i++) {
                uint16_t c = t->byte_char[q[i]];
                if (c < 0x80) w->buf[k++] = (char)c;
                else w->buf[k++] = (char)(0xC0 | c >> 6), w->buf[k++] = (char)(0x80 | (c & 0x3F));
            }
            int32_t id = tok_vocab_find(t, w->buf, k);
            if (id >= 0) {
                if ((rc = tok_idvec_push(out, id, e))) return rc;
                continue;
            }
        }
        if ((rc = tok_sym_reserve(w, len, e))) return rc;
        size_t m = 0;
        for (size_t i = 0; i < len; i++) /* a byte the vocabulary lacks is dropped, as HF does */
            if (t->byte_id[q[i]] >= 0) w->sym[m++].id = t->byte_id[q[i]];
        if ((rc = tok_bpe_merge(t, w, m, out, e))) return rc;
    }
    return RAD_OK;
}
