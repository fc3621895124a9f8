/* rad_tok_wpm.c — WordPiece ("bert") as Hugging Face `tokenizers` runs BERT-family tokenizers:
 * BertNormalizer (clean_text, handle_chinese_chars, strip_accents, lowercase, in that order),
 * BertPreTokenizer (split on whitespace, each punctuation character a word of its own), then
 * WordPiece per word (greedy longest match from the left, continuations spelled with the prefix,
 * a word too long or with no match at some position is the unknown token). The character classes
 * are HF's own, read off `tokenizers` (rad_tok_unicode.c, scripts/gen-tok-unicode.py). Decode is
 * HF's WordPiece decoder. */
#include <stdlib.h>
#include <string.h>

#include "libcommon/tok/rad_tok_int.h"

/* ---- character classes ---------------------------------------------------------------------- */

static bool in_ranges(const UniRange *r, uint32_t n, uint32_t c) {
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (c < r[mid].lo) hi = mid;
        else if (c > r[mid].hi) lo = mid + 1;
        else return true;
    }
    return false;
}

/* Rust's char::is_whitespace (the White_Space property). */
static bool is_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* HF's is_chinese_char: the CJK ideograph blocks, padded with spaces so each is a word. */
static bool is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static bool is_punct(uint32_t c) {
    if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
    return in_ranges(uni_punct, uni_punct_n, c);
}

static uint8_t ccc_of(uint32_t c) {
    uint32_t lo = 0, hi = uni_ccc_n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (c < uni_ccc[mid].lo) hi = mid;
        else if (c > uni_ccc[mid].hi) lo = mid + 1;
        else return uni_ccc[mid].ccc;
    }
    return 0;
}

static const UniMap *map_find(const UniMap *m, uint32_t n, uint32_t c) {
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (c < m[mid].cp) hi = mid;
        else if (c > m[mid].cp) lo = mid + 1;
        else return &m[mid];
    }
    return NULL;
}

/* ---- code point buffers --------------------------------------------------------------------- */

typedef struct Cps {
    uint32_t *p;
    size_t n, cap;
} Cps;

static int cps_push(Cps *v, uint32_t c, RadErr *e) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        uint32_t *p = realloc(v->p, cap * sizeof *p);
        if (!p) return rad_err_set(e, RAD_E_NOMEM, "tokenizer: out of memory for %zu characters", cap);
        v->p = p, v->cap = cap;
    }
    v->p[v->n++] = c;
    return RAD_OK;
}

static uint32_t cp_decode(const uint8_t *p, size_t l) {
    switch (l) {
    case 1: return p[0];
    case 2: return (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F);
    case 3: return (uint32_t)(p[0] & 0x0F) << 12 | (uint32_t)(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
    default: return (uint32_t)(p[0] & 0x07) << 18 | (uint32_t)(p[1] & 0x3F) << 12 | (uint32_t)(p[2] & 0x3F) << 6 | (p[3] & 0x3F);
    }
}

static size_t cp_encode(uint32_t c, uint8_t *o) {
    if (c < 0x80) return o[0] = (uint8_t)c, 1;
    if (c < 0x800) return o[0] = (uint8_t)(0xC0 | c >> 6), o[1] = (uint8_t)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000)
        return o[0] = (uint8_t)(0xE0 | c >> 12), o[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F)), o[2] = (uint8_t)(0x80 | (c & 0x3F)), 3;
    o[0] = (uint8_t)(0xF0 | c >> 18), o[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
    o[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F)), o[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

/* ---- BertNormalizer --------------------------------------------------------------------------- */

/* NFD: full decomposition (Hangul by the algorithm), then marks put in canonical order. */
static int nfd(const Cps *in, Cps *out, RadErr *e) {
    int rc = RAD_OK;
    for (size_t i = 0; i < in->n && !rc; i++) {
        uint32_t c = in->p[i];
        const UniMap *m;
        if (c >= 0xAC00 && c <= 0xD7A3) {
            uint32_t s = c - 0xAC00;
            rc = cps_push(out, 0x1100 + s / 588, e);
            if (!rc) rc = cps_push(out, 0x1161 + s % 588 / 28, e);
            if (!rc && s % 28) rc = cps_push(out, 0x11A7 + s % 28, e);
        } else if (c >= 0xC0 && (m = map_find(uni_nfd, uni_nfd_n, c))) {
            for (uint32_t k = 0; k < m->len && !rc; k++) rc = cps_push(out, uni_pool[m->off + k], e);
        } else {
            rc = cps_push(out, c, e);
        }
    }
    /* canonical ordering: a stable sort of each run of non-starters by class */
    for (size_t i = 1; i < out->n && !rc; i++) {
        uint8_t k = ccc_of(out->p[i]);
        if (!k) continue;
        for (size_t j = i; j > 0; j--) {
            uint8_t kp = ccc_of(out->p[j - 1]);
            if (kp <= k) break;
            uint32_t x = out->p[j];
            out->p[j] = out->p[j - 1], out->p[j - 1] = x;
        }
    }
    return rc;
}

static int lower(uint32_t c, Cps *out, RadErr *e) {
    if (c < 0x80) return cps_push(out, c >= 'A' && c <= 'Z' ? c + 32 : c, e);
    const UniMap *m = map_find(uni_lower_multi, uni_lower_multi_n, c);
    if (m) {
        int rc = RAD_OK;
        for (uint32_t k = 0; k < m->len && !rc; k++) rc = cps_push(out, uni_pool[m->off + k], e);
        return rc;
    }
    uint32_t lo = 0, hi = uni_lower_n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        const UniLower *r = &uni_lower[mid];
        if (c < r->lo) hi = mid;
        else if (c > r->hi) lo = mid + 1;
        else return cps_push(out, (c - r->lo) % r->step ? c : (uint32_t)((int32_t)c + r->delta), e);
    }
    return cps_push(out, c, e);
}

/* The steps in HF's order, each over the whole text (NFD's reordering needs it). */
static int normalize(const RadTok *t, Cps *a, Cps *b, RadErr *e) {
    int rc = RAD_OK;
    if (t->wp_clean) {
        size_t k = 0;
        for (size_t i = 0; i < a->n; i++) {
            uint32_t c = a->p[i];
            if (in_ranges(uni_other, uni_other_n, c)) continue; /* U+0000, U+FFFD, is_other */
            a->p[k++] = is_space(c) ? ' ' : c;
        }
        a->n = k;
    }
    if (t->wp_cjk) {
        b->n = 0;
        for (size_t i = 0; i < a->n && !rc; i++) {
            uint32_t c = a->p[i];
            if (is_cjk(c)) {
                rc = cps_push(b, ' ', e);
                if (!rc) rc = cps_push(b, c, e);
                if (!rc) rc = cps_push(b, ' ', e);
            } else {
                rc = cps_push(b, c, e);
            }
        }
        Cps x = *a;
        *a = *b, *b = x;
    }
    if (!rc && t->wp_strip) {
        b->n = 0;
        rc = nfd(a, b, e);
        size_t k = 0;
        for (size_t i = 0; i < b->n; i++)
            if (!in_ranges(uni_mn, uni_mn_n, b->p[i])) b->p[k++] = b->p[i];
        b->n = k;
        Cps x = *a;
        *a = *b, *b = x;
    }
    if (!rc && t->wp_lower) {
        b->n = 0;
        for (size_t i = 0; i < a->n && !rc; i++) rc = lower(a->p[i], b, e);
        Cps x = *a;
        *a = *b, *b = x;
    }
    return rc;
}

/* ---- WordPiece ---------------------------------------------------------------------------------- */

/* One word (nc code points, its UTF-8 in w[0..n), char starts in at[]): greedy longest match. */
static int wordpiece(const RadTok *t, const uint8_t *w, size_t n, const size_t *at, size_t nc, uint8_t *cat,
                     IdVec *out, RadErr *e) {
    if (nc > t->wp_max_chars) return tok_idvec_push(out, t->unk, e);
    size_t first = out->n;
    size_t pl = t->wp_prefix_len;
    memcpy(cat, t->wp_prefix, pl);
    for (size_t sc = 0; sc < nc;) {
        int32_t id = -1;
        size_t ec = nc;
        for (; ec > sc; ec--) {
            size_t len = (ec < nc ? at[ec] : n) - at[sc];
            if (len + (sc ? pl : 0) > t->max_spell) continue;
            if (sc) {
                memcpy(cat + pl, w + at[sc], len);
                id = tok_vocab_find(t, (const char *)cat, pl + len);
            } else {
                id = tok_vocab_find(t, (const char *)w, len);
            }
            if (id >= 0) break;
        }
        if (id < 0) { /* no piece fits here: the whole word is unknown */
            out->n = first;
            return tok_idvec_push(out, t->unk, e);
        }
        int rc = tok_idvec_push(out, id, e);
        if (rc) return rc;
        sc = ec;
    }
    return RAD_OK;
}

int tok_encode_wpm(const RadTok *t, const uint8_t *s, size_t n, IdVec *out, RadErr *e) {
    char *fixed = NULL;
    size_t fn = n;
    int rc = RAD_OK;
    for (size_t i = 0; i < n;) { /* not UTF-8: read as HF's caller would, lossily */
        size_t l = tok_utf8_len(s + i, n - i);
        if (!l) {
            if ((rc = rad_utf8_lossy((const char *)s, n, &fixed, &fn, e))) return rc;
            s = (const uint8_t *)fixed;
            break;
        }
        i += l;
    }
    n = fn;
    Cps a = {0}, b = {0};
    uint8_t *word = NULL, *cat = NULL;
    size_t *at = NULL;
    for (size_t i = 0; i < n && !rc;) {
        size_t l = tok_utf8_len(s + i, n - i);
        rc = cps_push(&a, cp_decode(s + i, l), e);
        i += l;
    }
    if (!rc) rc = normalize(t, &a, &b, e);
    if (!rc && !(word = malloc(4 * a.n + 1)) | !(at = malloc((a.n + 1) * sizeof *at)) |
                   !(cat = malloc(t->wp_prefix_len + (size_t)t->max_spell + 4)))
        rc = rad_err_set(e, RAD_E_NOMEM, "tokenizer: out of memory for %zu characters", a.n);
    /* BertPreTokenizer: whitespace ends a word, punctuation is a word */
    size_t wn = 0, nc = 0;
    for (size_t i = 0; i <= a.n && !rc; i++) {
        uint32_t c = i < a.n ? a.p[i] : ' ';
        bool sp = is_space(c), pu = !sp && is_punct(c);
        if ((sp || pu) && nc) {
            rc = wordpiece(t, word, wn, at, nc, cat, out, e);
            wn = nc = 0;
        }
        if (sp || rc) continue;
        at[nc++] = wn;
        wn += cp_encode(c, word + wn);
        if (pu) {
            rc = wordpiece(t, word, wn, at, nc, cat, out, e);
            wn = nc = 0;
        }
    }
    free(a.p), free(b.p), free(word), free(at), free(cat), free(fixed);
    return rc;
}

/* ---- decode ------------------------------------------------------------------------------------- */

/* HF's cleanup, applied to each token's text (with its joining space) on its own. */
static const char *const CLEANUP[][2] = {
    {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
    {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
};

static int put_token(const RadTok *t, RadBuf *b, int32_t id, bool first, RadErr *e) {
    uint32_t n;
    const char *s = tok_text(t, id, &n);
    size_t pl = t->wp_prefix_len, at = b->len;
    int rc;
    if (!first && pl && n >= pl && memcmp(s, t->wp_prefix, pl) == 0) rc = rad_buf_put(b, s + pl, n - pl, e);
    else if ((rc = first ? RAD_OK : rad_buf_put(b, " ", 1, e)) == RAD_OK) rc = rad_buf_put(b, s, n, e);
    if (rc || !t->wp_cleanup) return rc;
    /* each rule replaces every match, left to right, in what the one before left */
    for (size_t r = 0; r < sizeof CLEANUP / sizeof *CLEANUP; r++) {
        const char *from = CLEANUP[r][0], *to = CLEANUP[r][1];
        size_t fl = strlen(from), tl = strlen(to); /* tl <= fl: rewrite in place */
        size_t w = at;
        for (size_t i = at; i < b->len;) {
            if (b->len - i >= fl && memcmp(b->p + i, from, fl) == 0) {
                memcpy(b->p + w, to, tl);
                w += tl, i += fl;
            } else {
                b->p[w++] = b->p[i++];
            }
        }
        b->len = w;
        b->p[w] = 0;
    }
    return RAD_OK;
}

int tok_decode_wpm(const RadTok *t, const int32_t *ids, size_t n, bool skip, RadBuf *b, RadErr *e) {
    int rc = RAD_OK;
    bool first = true;
    for (size_t i = 0; i < n && !rc; i++) {
        if (skip && (t->tok[ids[i]].flags & TF_SPECIAL)) continue;
        rc = put_token(t, b, ids[i], first, e);
        first = false;
    }
    return rc;
}

/* Streaming: a continuation without its prefix, any other token with the space decode puts before
 * it (the caller drops the first one); cleanup is not applied. */
int tok_piece_wpm(const RadTok *t, int32_t id, RadBuf *b) {
    uint32_t n;
    const char *s = tok_text(t, id, &n);
    size_t pl = t->wp_prefix_len;
    if (pl && n >= pl && memcmp(s, t->wp_prefix, pl) == 0) return rad_buf_put(b, s + pl, n - pl, NULL);
    int rc = rad_buf_put(b, " ", 1, NULL);
    return rc ? rc : rad_buf_put(b, s, n, NULL);
}
