/* rad_tok_vocab.c — the tokenizer's tables: spelling -> id, (left, right) -> merge, and the trie
 * of added tokens. All open addressing at load factor <= 1/2, sized from the table's counts. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "libcommon/tok/rad_tok_int.h"

uint64_t tok_hash(const void *p, size_t n) { return XXH3_64bits(p, n); }

static uint64_t pow2_for(uint64_t n) {
    uint64_t c = 16;
    while (c < 2 * n) c <<= 1;
    return c;
}

int tok_idvec_push(IdVec *v, int32_t id, RadErr *e) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->p, cap * sizeof *p);
        if (!p) return rad_err_set(e, RAD_E_NOMEM, "tokenizer: out of memory for %zu ids", cap);
        v->p = p, v->cap = cap;
    }
    v->p[v->n++] = id;
    return RAD_OK;
}

size_t tok_utf8_len(const uint8_t *p, size_t n) {
    if (n == 0) return 0;
    uint8_t c = p[0];
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) return n >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c < 0xF0) {
        if (n < 3 || (p[2] & 0xC0) != 0x80) return 0;
        uint8_t lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        return p[1] >= lo && p[1] <= hi ? 3 : 0;
    }
    if (c < 0xF5) {
        if (n < 4 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        uint8_t lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        return p[1] >= lo && p[1] <= hi ? 4 : 0;
    }
    return 0;
}

size_t rad_utf8_len(const char *s, size_t n) { return tok_utf8_len((const uint8_t *)s, n); }

/* ---- spelling -> id ------------------------------------------------------------------------ */

int tok_strmap_build(RadTok *t, RadErr *e) {
    uint64_t cap = pow2_for(t->n);
    t->vocab.slot = calloc(cap, sizeof *t->vocab.slot);
    if (!t->vocab.slot) return rad_err_set(e, RAD_E_NOMEM, "tokenizer: out of memory for the vocabulary");
    t->vocab.mask = cap - 1;
    for (uint32_t id = 0; id < t->n; id++) {
        uint32_t len;
        const char *s = tok_spell(t, (int32_t)id, &len);
        uint64_t h = tok_hash(s, len) & t->vocab.mask;
        for (;; h = (h + 1) & t->vocab.mask) {
            uint32_t v = t->vocab.slot[h];
            if (v == 0) {
                t->vocab.slot[h] = id + 1;
                break;
            }
            uint32_t ol;
            const char *os = tok_spell(t, (int32_t)(v - 1), &ol);
            if (ol == len && memcmp(os, s, len) == 0) { /* spelled alike: the last id wins */
                t->vocab.slot[h] = id + 1;
                break;
            }
        }
    }
    return RAD_OK;
}

int32_t tok_vocab_find(const RadTok *t, const char *s, size_t n) {
    uint64_t h = tok_hash(s, n) & t->vocab.mask;
    for (;; h = (h + 1) & t->vocab.mask) {
        uint32_t v = t->vocab.slot[h];
        if (v == 0) return -1;
        uint32_t ol;
        const char *os = tok_spell(t, (int32_t)(v - 1), &ol);
        if (ol == n && memcmp(os, s, n) == 0) return (int32_t)(v - 1);
    }
}

/* ---- (left, right) -> merge ---------------------------------------------------------------- */

int tok_pairmap_init(PairMap *m, uint64_t n, RadErr *e) {
    uint64_t cap = pow2_for(n);
    m->key = malloc(cap * sizeof *m->key);
    m->rank = malloc(cap * sizeof *m->rank);
    m->id = malloc(cap * sizeof *m->id);
    if (!m->key || !m->rank || !m->id)
        return rad_err_set(e, RAD_E_NOMEM, "tokenizer: out of memory for %" PRIu64 " merges", n);
    memset(m->key, 0xFF, cap * sizeof *m->key);
    m->mask = cap - 1;
    return RAD_OK;
}

static uint64_t pair_slot(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

void tok_pairmap_put(PairMap *m, int32_t a, int32_t b, uint32_t rank, int32_t id) {
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t h = pair_slot(k) & m->mask;; h = (h + 1) & m->mask) {
        if (m->key[h] == UINT64_MAX || m->key[h] == k) { /* a repeated merge: the later rank wins */
            m->key[h] = k, m->rank[h] = rank, m->id[h] = id;
            return;
        }
    }
}

bool tok_pairmap_get(const PairMap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *id) {
    if (!m->key) return false;
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint64_t h = pair_slot(k) & m->mask;; h = (h + 1) & m->mask) {
        if (m->key[h] == k) {
            *rank = m->rank[h], *id = m->id[h];
            return true;
        }
        if (m->key[h] == UINT64_MAX) return false;
    }
}

void tok_pairmap_free(PairMap *m) {
    free(m->key);
    free(m->rank);
    free(m->id);
    memset(m, 0, sizeof *m);
}

/* ---- added tokens -------------------------------------------------------------------------- */

static uint32_t *trie_slot(Trie *tr, uint32_t node, uint8_t c, bool *found) {
    uint64_t k = ((uint64_t)node << 8 | c) + 1;
    for (uint64_t h = pair_slot(k) & tr->mask;; h = (h + 1) & tr->mask) {
        if (tr->key[h] == k) {
            *found = true;
            return &tr->child[h];
        }
        if (tr->key[h] == 0) {
            *found = false;
            tr->key[h] = k; /* claimed by the caller, which fills child */
            return &tr->child[h];
        }
    }
}

int tok_trie_build(RadTok *t, RadErr *e) {
    Trie *tr = &t->added;
    uint64_t bytes = 0;
    for (uint32_t id = 0; id < t->n; id++)
        if (t->tok[id].flags & TF_ADDED) bytes += t->tok[id].text_len;
    uint64_t cap = pow2_for(bytes + 1);
    tr->key = calloc(cap, sizeof *tr->key);
    tr->child = calloc(cap, sizeof *tr->child);
    tr->term = malloc((bytes + 1) * sizeof *tr->term);
    if (!tr->key || !tr->child || !tr->term)
        return rad_err_set(e, RAD_E_NOMEM, "tokenizer: out of memory for the added tokens");
    tr->mask = cap - 1;
    tr->n_nodes = 1;
    tr->term[0] = -1;
    for (uint32_t id = 0; id < t->n; id++) {
        if (!(t->tok[id].flags & TF_ADDED)) continue;
        uint32_t len;
        const uint8_t *s = (const uint8_t *)tok_text(t, (int32_t)id, &len);
        uint32_t node = 0;
        tr->first[s[0] >> 3] |= (uint8_t)(1u << (s[0] & 7));
        for (uint32_t i = 0; i < len; i++) {
            bool found;
            uint32_t *c = trie_slot(tr, node, s[i], &found);
            if (!found) {
                *c = tr->n_nodes;
                tr->term[tr->n_nodes++] = -1;
            }
            node = *c;
        }
        tr->term[node] = (int32_t)id; /* two added tokens spelled alike: the last id wins */
    }
    return RAD_OK;
}

int32_t tok_trie_match(const Trie *tr, const uint8_t *s, size_t n, size_t *len) {
    if (!(tr->first[s[0] >> 3] & (1u << (s[0] & 7)))) return -1;
    uint32_t node = 0;
    int32_t best = -1;
    for (size_t i = 0; i < n; i++) {
        uint64_t k = ((uint64_t)node << 8 | s[i]) + 1;
        uint64_t h = pair_slot(k) & tr->mask;
        while (tr->key[h] != k && tr->key[h] != 0) h = (h + 1) & tr->mask;
        if (tr->key[h] == 0) break;
        node = tr->child[h];
        if (tr->term[node] >= 0) best = tr->term[node], *len = i + 1;
    }
    return best;
}

void tok_trie_free(Trie *tr) {
    free(tr->key);
    free(tr->child);
    free(tr->term);
    memset(tr, 0, sizeof *tr);
}
