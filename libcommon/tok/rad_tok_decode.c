/* rad_tok_decode.c — ids back to text, as Hugging Face's decoders do: ByteLevel (each token's
 * characters through GPT-2's byte map), or SentencePiece's Replace("▁", " ") + ByteFallback + Fuse
 * (+ Strip of one leading space when add_space_prefix), or WordPiece's (rad_tok_wpm.c); and one
 * token at a time for streaming. */
#include <stdlib.h>
#include <string.h>

#include "libcommon/tok/rad_tok_int.h"

static const char FFFD[] = "\xEF\xBF\xBD";

/* The length of the maximal ill-formed subpart at p: the longest prefix of a well-formed
 * sequence (at least 1). */
static size_t bad_len(const uint8_t *p, size_t n) {
    uint8_t c = p[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) need = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) need = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return 1;
    size_t k = 1;
    if (k < n && k < need && p[k] >= lo && p[k] <= hi) k++;
    else return 1;
    while (k < n && k < need && (p[k] & 0xC0) == 0x80) k++;
    return k;
}

static int put_lossy(RadBuf *b, const uint8_t *s, size_t n, RadErr *e) {
    int rc = RAD_OK;
    for (size_t i = 0; i < n && !rc;) {
        size_t l = tok_utf8_len(s + i, n - i), j = i;
        while (l) { /* copy the valid run in one go */
            j += l;
            l = j < n ? tok_utf8_len(s + j, n - j) : 0;
        }
        if (j > i) rc = rad_buf_put(b, s + i, j - i, e);
        if (!rc && j < n) rc = rad_buf_put(b, FFFD, 3, e), j += bad_len(s + j, n - j);
        i = j;
    }
    return rc;
}

size_t rad_utf8_tail(const char *s, size_t n) {
    const uint8_t *p = (const uint8_t *)s;
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        size_t at = n - k;
        if ((p[at] & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
        /* p[at] starts a character: incomplete when it needs more than k bytes and what is
         * there is a valid prefix of one */
        uint8_t c = p[at];
        size_t need = c < 0xC2 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 1;
        return k < need && bad_len(p + at, k) == k ? k : 0;
    }
    return 0;
}

int rad_utf8_lossy(const char *s, size_t n, char **out, size_t *out_len, RadErr *e) {
    RadBuf b = {0};
    int rc = rad_buf_put(&b, "", 0, e);
    if (!rc) rc = put_lossy(&b, (const uint8_t *)s, n, e);
    if (rc) {
        free(b.p);
        *out = NULL, *out_len = 0;
        return rc;
    }
    *out = b.p, *out_len = b.len;
    return RAD_OK;
}

static bool valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t l = tok_utf8_len(s + i, n - i);
        if (!l) return false;
        i += l;
    }
    return true;
}

/* Byte-level: HF's ByteLevel decoder maps every character of a token through the byte map, or
 * when one is outside the alphabet keeps the token's own bytes. */
static uint32_t bl_char(const uint8_t *s, size_t n, size_t *l) {
    *l = tok_utf8_len(s, n);
    if (*l == 1) return s[0];
    if (*l == 2) return (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
    if (*l == 0) *l = 1;
    return UINT32_MAX;
}

static int put_bytelevel(const RadTok *t, RadBuf *b, int32_t id, RadErr *e) {
    uint32_t n;
    const uint8_t *s = (const uint8_t *)tok_spell(t, id, &n);
    size_t l;
    for (size_t i = 0; i < n; i += l) {
        uint32_t c = bl_char(s + i, n - i, &l);
        if (c >= 324 || t->char_byte[c] < 0) return rad_buf_put(b, s, n, e);
    }
    size_t at = b->len;
    int rc = rad_buf_put(b, s, n, e); /* room for n bytes; the mapped ones are fewer */
    if (rc) return rc;
    b->len = at;
    for (size_t i = 0; i < n; i += l) b->p[b->len++] = (char)t->char_byte[bl_char(s + i, n - i, &l)];
    b->p[b->len] = 0;
    return RAD_OK;
}

/* SentencePiece: a token's text with "▁" as " ". */
static int put_spm_text(RadBuf *b, const uint8_t *s, size_t n, bool lossy, RadErr *e) {
    int rc = RAD_OK;
    size_t i = 0, run = 0;
    for (; i + 2 < n; i++) {
        if (s[i] == 0xE2 && s[i + 1] == 0x96 && s[i + 2] == 0x81) {
            if (i > run && (rc = lossy ? put_lossy(b, s + run, i - run, e) : rad_buf_put(b, s + run, i - run, e))) return rc;
            if ((rc = rad_buf_put(b, " ", 1, e))) return rc;
            run = i + 3;
            i += 2;
        }
    }
    if (n > run) rc = lossy ? put_lossy(b, s + run, n - run, e) : rad_buf_put(b, s + run, n - run, e);
    return rc;
}

int rad_tok_decode(const RadTok *t, const int32_t *ids, size_t n, int flags, char **text, size_t *len,
                   RadErr *e) {
    *text = NULL;
    *len = 0;
    if (!t || (!ids && n)) return rad_err_set(e, RAD_E_ARG, "tokenizer: no tokenizer or no ids");
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= t->n)
            return rad_err_set(e, RAD_E_ARG, "tokenizer: id %d at index %zu is outside the vocabulary "
                               "(%u tokens)", ids[i], i, t->n);
    bool skip = flags & RAD_TOK_SKIP_SPECIAL, lossy = flags & RAD_TOK_LOSSY;
    RadBuf b = {0};
    int rc = rad_buf_put(&b, "", 0, e);
    if (t->kind == TOKK_WPM) {
        if (!rc) rc = tok_decode_wpm(t, ids, n, skip, &b, e); /* token texts are UTF-8 already */
    } else if (t->kind == TOKK_BPE) {
        for (size_t i = 0; i < n && !rc; i++)
            if (!(skip && (t->tok[ids[i]].flags & TF_SPECIAL))) rc = put_bytelevel(t, &b, ids[i], e);
        if (!rc && lossy && !valid_utf8((const uint8_t *)b.p, b.len)) {
            RadBuf l = {0};
            if (!(rc = rad_buf_put(&l, "", 0, e)) && !(rc = put_lossy(&l, (const uint8_t *)b.p, b.len, e))) {
                free(b.p);
                b = l;
            } else {
                free(l.p);
            }
        }
    } else {
        /* ByteFallback: a run of byte tokens is its bytes when they are UTF-8, else one U+FFFD
         * per byte. */
        size_t run = 0; /* bytes of the current run, at the end of b */
        for (size_t i = 0; i <= n && !rc; i++) {
            int32_t id = i < n ? ids[i] : -1;
            if (id >= 0 && skip && (t->tok[id].flags & TF_SPECIAL)) continue;
            if (id >= 0 && (t->tok[id].flags & TF_BYTE)) {
                rc = rad_buf_put(&b, &t->tok[id].byte, 1, e);
                run++;
                continue;
            }
            if (run && lossy && !valid_utf8((const uint8_t *)b.p + b.len - run, run)) {
                b.len -= run;
                for (size_t k = 0; k < run && !rc; k++) rc = rad_buf_put(&b, FFFD, 3, e);
            }
            run = 0;
            if (id >= 0 && !rc) {
                uint32_t l;
                const uint8_t *s = (const uint8_t *)tok_spell(t, id, &l);
                rc = put_spm_text(&b, s, l, lossy, e);
            }
        }
        if (!rc && t->add_space_prefix && b.len && b.p[0] == ' ') { /* Strip(" ", 1, 0) */
            memmove(b.p, b.p + 1, b.len);
            b.len--;
        }
    }
    if (rc) {
        free(b.p);
        return rc;
    }
    *text = b.p;
    *len = b.len;
    return RAD_OK;
}

int rad_tok_piece(const RadTok *t, int32_t id, char *buf, size_t cap) {
    if (!t || id < 0 || (uint32_t)id >= t->n) return -1;
    RadBuf b = {0};
    int rc;
    if (t->kind == TOKK_WPM) {
        rc = rad_buf_put(&b, "", 0, NULL);
        if (!rc) rc = tok_piece_wpm(t, id, &b);
    } else if (t->kind == TOKK_BPE) {
        rc = put_bytelevel(t, &b, id, NULL);
    } else if (t->tok[id].flags & TF_BYTE) {
        rc = rad_buf_put(&b, &t->tok[id].byte, 1, NULL);
    } else {
        uint32_t l;
        const uint8_t *s = (const uint8_t *)tok_spell(t, id, &l);
        rc = rad_buf_put(&b, "", 0, NULL);
        if (!rc) rc = put_spm_text(&b, s, l, false, NULL);
    }
    if (rc) {
        free(b.p);
        return -1;
    }
    if (buf && cap) memcpy(buf, b.p, b.len < cap ? b.len : cap);
    int n = b.len > INT32_MAX ? INT32_MAX : (int)b.len;
    free(b.p);
    return n;
}
