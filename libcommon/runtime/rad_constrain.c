/* rad_constrain.c — token masks from a byte-level grammar (rad_constrain.h). */
#include "libcommon/runtime/rad_constrain.h"

#include <stdlib.h>
#include <string.h>

/* ---- the vocabulary as a byte trie --------------------------------------------------------- */

/* Node k's children are edges [edge0[k], edge0[k] + n_edge[k]) (bytes ascending); the tokens
 * whose bytes end at k are ids [tok0[k], tok0[k] + n_tok[k]) of `ids`. */
struct RadTokTrie {
    uint32_t n_vocab;
    uint32_t n_nodes;
    uint32_t *edge0, *n_edge, *tok0, *n_tok; /* [n_nodes] */
    uint8_t *ebyte;                          /* [n_nodes - 1] an edge's byte */
    uint32_t *echild;                        /* [n_nodes - 1] an edge's child node */
    int32_t *ids;                            /* tokens, by the node they end at */
    uint64_t *ws_only;                       /* [(n_vocab + 63) / 64] tokens that are only white space */
};

typedef struct Piece {
    int32_t id;
    uint32_t len;
    char *b;
} Piece;

static int piece_cmp(const void *x, const void *y) {
    const Piece *a = x, *b = y;
    const uint32_t n = a->len < b->len ? a->len : b->len;
    const int c = memcmp(a->b, b->b, n);
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int is_ws(unsigned char ch) { return ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t'; }

void rad_tok_trie_free(RadTokTrie *t) {
    if (!t) return;
    free(t->edge0), free(t->n_edge), free(t->tok0), free(t->n_tok), free(t->ebyte), free(t->echild), free(t->ids),
        free(t->ws_only);
    free(t);
}

uint32_t rad_tok_trie_vocab(const RadTokTrie *t) { return t->n_vocab; }

int rad_tok_trie_init(RadTokTrie **out, const RadTok *tok, RadErr *e) {
    *out = NULL;
    const int32_t nv = rad_tok_n_vocab(tok);
    RadTokTrie *t = calloc(1, sizeof *t);
    Piece *p = nv > 0 ? calloc((size_t)nv, sizeof *p) : NULL;
    if (!t || !p) {
        free(t), free(p);
        return rad_err_set(e, RAD_E_NOMEM, "out of memory (a vocabulary trie of %d tokens)", nv);
    }
    t->n_vocab = (uint32_t)nv;
    const uint32_t words = (t->n_vocab + 63) / 64;
    uint32_t n = 0;
    size_t bytes = 0;
    int rc = (t->ws_only = calloc(words, sizeof *t->ws_only)) ? RAD_OK : RAD_E_NOMEM;
    for (int32_t id = 0; !rc && id < nv; id++) { /* the bytes each token prints */
        if (rad_tok_is_special(tok, id)) continue;
        char buf[256];
        const int k = rad_tok_piece(tok, id, buf, sizeof buf);
        if (k <= 0 || k > (int)sizeof buf) continue; /* no bytes, or longer than any piece we emit */
        if (!(p[n].b = malloc((size_t)k))) rc = RAD_E_NOMEM;
        else memcpy(p[n].b, buf, (size_t)k), p[n].id = id, p[n].len = (uint32_t)k, bytes += (size_t)k, n++;
        int ws = 1;
        for (int i = 0; i < k; i++) ws &= is_ws((unsigned char)buf[i]);
        if (ws) t->ws_only[id / 64] |= 1ull << (id % 64);
    }
    if (!rc) qsort(p, n, sizeof *p, piece_cmp);
    /* nodes: the root, then one per distinct prefix (at most the pieces' bytes) */
    const size_t cap = bytes + 1;
    if (!rc && (!(t->edge0 = calloc(cap, sizeof *t->edge0)) || !(t->n_edge = calloc(cap, sizeof *t->n_edge)) ||
                !(t->tok0 = calloc(cap, sizeof *t->tok0)) || !(t->n_tok = calloc(cap, sizeof *t->n_tok)) ||
                !(t->ebyte = calloc(cap, 1)) || !(t->echild = calloc(cap, sizeof *t->echild)) ||
                !(t->ids = calloc(n ? n : 1, sizeof *t->ids))))
        rc = RAD_E_NOMEM;
    if (!rc) {
        /* sorted pieces give each node's children in byte order, but interleaved with their
         * subtrees; build with a path stack, then lay the edges out per node */
        uint32_t *parent = calloc(cap, sizeof *parent);
        uint8_t *pbyte = calloc(cap, 1);
        uint32_t *path = calloc(257, sizeof *path), nodes = 1, depth = 0;
        if (!parent || !pbyte || !path) rc = RAD_E_NOMEM;
        const Piece *prev = NULL;
        for (uint32_t i = 0; !rc && i < n; i++) {
            uint32_t common = 0; /* bytes shared with the previous piece: that much of the path stays */
            if (prev)
                while (common < prev->len && common < p[i].len && prev->b[common] == p[i].b[common]) common++;
            depth = common < depth ? common : depth;
            for (uint32_t d = depth; d < p[i].len; d++) {
                parent[nodes] = path[d];
                pbyte[nodes] = (uint8_t)p[i].b[d];
                path[d + 1] = nodes++;
            }
            depth = p[i].len;
            t->n_tok[path[depth]]++;
            prev = &p[i];
        }
        if (!rc) {
            t->n_nodes = nodes;
            for (uint32_t k = 1; k < nodes; k++) t->n_edge[parent[k]]++;
            uint32_t at = 0, ta = 0;
            for (uint32_t k = 0; k < nodes; k++) t->edge0[k] = at, at += t->n_edge[k], t->n_edge[k] = 0;
            for (uint32_t k = 0; k < nodes; k++) t->tok0[k] = ta, ta += t->n_tok[k], t->n_tok[k] = 0;
            /* nodes were made in depth-first, byte-ascending order: children land in byte order */
            for (uint32_t k = 1; k < nodes; k++) {
                const uint32_t q = parent[k], slot = t->edge0[q] + t->n_edge[q]++;
                t->ebyte[slot] = pbyte[k];
                t->echild[slot] = k;
            }
            /* tokens again, along the same walk */
            depth = 0;
            prev = NULL;
            for (uint32_t i = 0; i < n; i++) {
                uint32_t node = 0;
                for (uint32_t d = 0; d < p[i].len; d++) { /* down by bytes (few children: linear) */
                    const uint8_t b = (uint8_t)p[i].b[d];
                    uint32_t s = t->edge0[node], end = s + t->n_edge[node];
                    while (s < end && t->ebyte[s] != b) s++;
                    node = t->echild[s];
                }
                t->ids[t->tok0[node] + t->n_tok[node]++] = p[i].id;
            }
        }
        free(parent), free(pbyte), free(path);
    }
    for (uint32_t i = 0; i < n; i++) free(p[i].b);
    free(p);
    if (rc) {
        rad_tok_trie_free(t);
        return rad_err_set(e, RAD_E_NOMEM, "out of memory (a vocabulary trie of %d tokens)", nv);
    }
    *out = t;
    return RAD_OK;
}

/* ---- masks ------------------------------------------------------------------------------- */

int rad_constraint_init(RadConstraint *c, RadGrammar *g, const RadTokTrie *trie, const int32_t *end, uint32_t n_end,
                        RadErr *e) {
    memset(c, 0, sizeof *c);
    c->g = g;
    c->trie = trie;
    c->state = rad_grammar_start(g);
    c->words = (trie->n_vocab + 63) / 64;
    for (uint32_t i = 0; i < n_end && c->n_end < 8; i++) {
        int dup = 0;
        for (uint32_t k = 0; k < c->n_end; k++) dup |= c->end[k] == end[i];
        if (!dup && end[i] >= 0 && (uint32_t)end[i] < trie->n_vocab) c->end[c->n_end++] = end[i];
    }
    c->n_masks = RAD_CONSTRAIN_MASKS_MAX;
    c->masks = calloc(c->n_masks, sizeof *c->masks);
    c->mask_state = malloc(c->n_masks * sizeof *c->mask_state);
    c->allow = malloc(c->words * sizeof *c->allow);
    if (!c->masks || !c->mask_state || !c->allow) {
        rad_constraint_free(c);
        return rad_err_set(e, RAD_E_NOMEM, "out of memory (a constrained request's masks)");
    }
    for (uint32_t i = 0; i < c->n_masks; i++) c->mask_state[i] = RAD_GRAMMAR_DEAD; /* never a state */
    return RAD_OK;
}

void rad_constraint_free(RadConstraint *c) {
    for (uint32_t i = 0; c->masks && i < c->n_masks; i++) free(c->masks[i]);
    free(c->masks);
    free(c->mask_state);
    free(c->allow);
    rad_grammar_free(c->g);
    memset(c, 0, sizeof *c);
}

/* ---- the grammar, then a literal suffix ------------------------------------------------------
 * A state is the grammar's (>= 0) until the value is whole and the suffix's first byte comes;
 * then -(3 + p), p the suffix bytes written (-1 and -2 are the grammar's DEAD and FULL). */
static int32_t cstep(const RadConstraint *c, int32_t cs, uint8_t b) {
    if (cs >= 0) {
        const int32_t ns = rad_grammar_step(c->g, cs, b);
        if (ns != RAD_GRAMMAR_DEAD || !c->suffix_len) return ns;
        return rad_grammar_accepting(c->g, cs) && b == (uint8_t)c->suffix[0] ? -(3 + 1) : RAD_GRAMMAR_DEAD;
    }
    const int32_t p = -(cs + 3);
    return p < (int32_t)c->suffix_len && b == (uint8_t)c->suffix[p] ? -(3 + p + 1) : RAD_GRAMMAR_DEAD;
}
static int cwhole(const RadConstraint *c, int32_t cs) {
    return c->suffix_len ? cs == -(3 + (int32_t)c->suffix_len) : rad_grammar_accepting(c->g, cs);
}
static int cdone(const RadConstraint *c, int32_t cs) {
    return c->suffix_len ? cs == -(3 + (int32_t)c->suffix_len) : rad_grammar_done(c->g, cs);
}

int rad_constraint_set_suffix(RadConstraint *c, const char *suffix, RadErr *e) {
    const size_t n = strlen(suffix);
    if (n >= sizeof c->suffix) return rad_err_set(e, RAD_E_ARG, "a constraint's suffix is longer than %zu bytes", sizeof c->suffix - 1);
    memcpy(c->suffix, suffix, n + 1);
    c->suffix_len = (uint32_t)n;
    return RAD_OK;
}

/* The tokens below `node` whose bytes keep state st alive, into m: a subtree is pruned at its
 * first dead byte. Recursion as deep as the longest piece (256 bytes). */
static int walk_node(const RadConstraint *c, uint32_t node, int32_t st, uint64_t *m, RadErr *e) {
    const RadTokTrie *t = c->trie;
    for (uint32_t k = t->edge0[node], end = k + t->n_edge[node]; k < end; k++) {
        const int32_t ns = cstep(c, st, t->ebyte[k]);
        if (ns == RAD_GRAMMAR_FULL) return rad_err_set(e, RAD_E_LIMIT, "the response format's grammar grew past its state limit");
        if (ns == RAD_GRAMMAR_DEAD) continue;
        const uint32_t child = t->echild[k];
        for (uint32_t i = t->tok0[child], ie = i + t->n_tok[child]; i < ie; i++) m[t->ids[i] / 64] |= 1ull << (t->ids[i] % 64);
        int rc = t->n_edge[child] ? walk_node(c, child, ns, m, e) : RAD_OK;
        if (rc) return rc;
    }
    return RAD_OK;
}

static int walk(const RadConstraint *c, int32_t s, uint64_t *m, RadErr *e) {
    memset(m, 0, c->words * sizeof *m);
    return walk_node(c, 0, s, m, e);
}

int rad_constraint_mask(RadConstraint *c, const uint64_t **allow, RadErr *e) {
    *allow = NULL;
    c->n_steps++;
    const int done = cdone(c, c->state), whole = cwhole(c, c->state);
    uint64_t *a = c->allow;
    if (done) {
        memset(a, 0, c->words * sizeof *a);
    } else {
        const uint32_t slot = (uint32_t)c->state % c->n_masks; /* direct-mapped: a clash recomputes */
        if (c->mask_state[slot] != c->state || !c->masks[slot]) {
            if (!c->masks[slot] && !(c->masks[slot] = malloc(c->words * sizeof **c->masks)))
                return rad_err_set(e, RAD_E_NOMEM, "out of memory (a token mask)");
            c->mask_state[slot] = RAD_GRAMMAR_DEAD;
            int rc = walk(c, c->state, c->masks[slot], e);
            if (rc) return rc;
            c->mask_state[slot] = c->state;
            c->n_walks++;
        }
        memcpy(a, c->masks[slot], c->words * sizeof *a);
        if (c->ws_run >= RAD_CONSTRAIN_WS_MAX)
            for (uint32_t w = 0; w < c->words; w++) a[w] &= ~c->trie->ws_only[w];
    }
    int any = 0;
    for (uint32_t w = 0; w < c->words && !any; w++) any = a[w] != 0;
    if (whole)
        for (uint32_t i = 0; i < c->n_end; i++) a[c->end[i] / 64] |= 1ull << (c->end[i] % 64), any = 1;
    if (!any)
        return rad_err_set(e, RAD_E_LIMIT, "no token of the vocabulary can continue the response format's grammar here%s",
                           c->n_end ? "" : " (and no end token is known)");
    *allow = a;
    return RAD_OK;
}

int rad_constraint_accept(RadConstraint *c, const RadTok *tok, int32_t token, RadErr *e) {
    for (uint32_t i = 0; i < c->n_end; i++)
        if (token == c->end[i]) return RAD_OK;
    char buf[256];
    const int k = rad_tok_piece(tok, token, buf, sizeof buf);
    if (rad_tok_is_special(tok, token) || k <= 0 || k > (int)sizeof buf)
        return rad_err_set(e, RAD_E_ARG, "token %d is not allowed by the response format's grammar", token);
    int32_t s = c->state;
    for (int i = 0; i < k; i++) {
        s = cstep(c, s, (uint8_t)buf[i]);
        if (s == RAD_GRAMMAR_DEAD || s == RAD_GRAMMAR_FULL) return rad_err_set(e, RAD_E_ARG, "token %d is not allowed by the response format's grammar", token);
        c->ws_run = is_ws((unsigned char)buf[i]) ? c->ws_run + 1 : 0;
    }
    c->state = s;
    return RAD_OK;
}

int rad_constraint_done(const RadConstraint *c) { return cdone(c, c->state); }
