/* JSON Schema to a byte automaton: a Thompson NFA built by a recursive compiler, walked through
 * a lazily built DFA. See rad_grammar.h. */
#include "libcommon/text/rad_grammar.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/base/rad_buf.h"
#include "libcommon/text/rad_pyjson.h"

enum {
    NFA_COMPILE_MAX = 100000, /* NFA states a schema may compile to */
    NFA_LAZY_MAX = 500000,    /* with the generic parts expanded while walking */
    DFA_MAX = 20000,          /* DFA states, then RAD_GRAMMAR_FULL */
    DFA_CAP_MAX = 1 << 20,    /* the most rad_grammar_set_dfa_cap allows */
    SCHEMA_DEPTH_MAX = 64,    /* schema objects nested (through $ref too) */
    GENERIC_DEPTH = 16,       /* nesting of an "any JSON value" part */
    ENUM_MAX = 10000,         /* enum values */
    ENUM_BYTES_MAX = 1 << 20, /* enum literal text in all */
    ITEMS_MAX = 256,          /* minItems / maxItems */
    REF_UNROLL = 4,           /* instances of one $ref target nested in itself */
    JSON_MODE_DEPTH_MAX = 1024,
    EXPAND_STATES = 256,      /* at least the states (and /4 the edges) one lazy expansion adds */
};
#define UNSET INT32_MIN /* trans[]: not computed yet */

typedef struct NState {
    int32_t head;  /* first edge in g->ed, -1 when none */
    int32_t lazy;  /* >= 0: an unexpanded "any JSON value" nesting at most this deep; -1 otherwise */
    int32_t exit;  /* lazy: the state the value leads to */
} NState;

typedef struct NEdge {
    int32_t to;     /* target state */
    int32_t next;   /* the same state's next edge, -1 at the end */
    uint8_t lo, hi; /* byte range, inclusive (unused for epsilon) */
    uint8_t eps;    /* 1: an epsilon edge */
} NEdge;

enum { FAIL_CAP = 1, FAIL_NOMEM = 2 };

struct RadGrammar {
    NState *st;           /* [n_st] NFA states */
    int32_t n_st, cap_st; /* used, allocated */
    int32_t max_st;       /* NFA_COMPILE_MAX while compiling, NFA_LAZY_MAX after */
    NEdge *ed;            /* [n_ed] edges, linked per state */
    int32_t n_ed, cap_ed;
    int fail;             /* sticky while compiling: FAIL_CAP or FAIL_NOMEM */
    int32_t start, final; /* NFA start; the one accepting NFA state (no edges out) */
    uint32_t *mark;       /* [cap_st] closure visit stamps */
    uint32_t stamp;       /* the current closure's stamp */
    int32_t *stack;       /* closure DFS stack */
    size_t stack_cap;
    int32_t *set;         /* the closure being built: its states with byte edges, or final */
    size_t set_n, set_cap;
    int32_t *seed;        /* the states one byte leads to */
    size_t seed_n, seed_cap;
    int32_t *trans;       /* [n_dfa * 256]: next DFA state, DEAD, or UNSET */
    uint32_t *set_off;    /* [n_dfa] offset of the state's NFA set in pool */
    uint32_t *set_len;    /* [n_dfa] its length */
    uint32_t *set_hash;   /* [n_dfa] its hash */
    uint8_t *accept;      /* [n_dfa] 1 when the set holds final */
    int32_t n_dfa, cap_dfa, dfa_max;
    int32_t *pool;        /* the DFA states' NFA sets, back to back */
    size_t pool_n, pool_cap;
    int32_t *hash;        /* [hash_cap] open addressing over DFA ids, -1 empty */
    uint32_t hash_cap;
};

/* --- NFA building: sticky failure, so a builder runs straight through and is checked after --- */

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q) return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* Room for ns more states and ne more edges, so what follows cannot fail halfway. */
static int reserve(RadGrammar *g, int32_t ns, int32_t ne) {
    if (g->n_st + ns > g->max_st) return FAIL_CAP;
    size_t cs = (size_t)g->cap_st, ce = (size_t)g->cap_ed, cm = (size_t)g->cap_st;
    if (grow((void **)&g->st, &cs, (size_t)(g->n_st + ns), sizeof *g->st)) return FAIL_NOMEM;
    if (grow((void **)&g->mark, &cm, cs, sizeof *g->mark)) return FAIL_NOMEM;
    if (cm > (size_t)g->cap_st) memset(g->mark + g->cap_st, 0, (cm - (size_t)g->cap_st) * sizeof *g->mark);
    g->cap_st = (int32_t)cs; /* cm == cs: the stamps follow the states */
    if (grow((void **)&g->ed, &ce, (size_t)(g->n_ed + ne), sizeof *g->ed)) return FAIL_NOMEM;
    g->cap_ed = (int32_t)ce;
    return 0;
}

static int32_t st_new(RadGrammar *g) {
    if (g->fail) return 0;
    if (g->n_st >= g->cap_st || g->n_st >= g->max_st) {
        int f = reserve(g, 1, 0);
        if (f) return g->fail = f, 0;
    }
    g->st[g->n_st] = (NState){-1, -1, -1};
    return g->n_st++;
}

static void edge(RadGrammar *g, int32_t a, int32_t b, int eps, uint8_t lo, uint8_t hi) {
    if (g->fail) return;
    if (g->n_ed >= g->cap_ed) {
        size_t ce = (size_t)g->cap_ed;
        if (grow((void **)&g->ed, &ce, (size_t)g->n_ed + 1, sizeof *g->ed)) {
            g->fail = FAIL_NOMEM;
            return;
        }
        g->cap_ed = (int32_t)ce;
    }
    g->ed[g->n_ed] = (NEdge){b, g->st[a].head, lo, hi, (uint8_t)eps};
    g->st[a].head = g->n_ed++;
}

static void eps(RadGrammar *g, int32_t a, int32_t b) { edge(g, a, b, 1, 0, 0); }
static void rng(RadGrammar *g, int32_t a, int32_t b, uint8_t lo, uint8_t hi) { edge(g, a, b, 0, lo, hi); }

/* The builders below are cursor-style: they attach to `from` and return the state they end in. */

static int32_t b_byte(RadGrammar *g, int32_t from, uint8_t c) {
    int32_t s = st_new(g);
    rng(g, from, s, c, c);
    return s;
}

static int32_t b_lit(RadGrammar *g, int32_t from, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) from = b_byte(g, from, (uint8_t)p[i]);
    return from;
}

/* ws*: one state looping on space, \t, \n, \r. */
static int32_t b_ws(RadGrammar *g, int32_t from) {
    int32_t w = st_new(g);
    eps(g, from, w);
    rng(g, w, w, ' ', ' ');
    rng(g, w, w, '\t', '\n');
    rng(g, w, w, '\r', '\r');
    return w;
}

static void hex(RadGrammar *g, int32_t a, int32_t b) {
    rng(g, a, b, '0', '9');
    rng(g, a, b, 'A', 'F');
    rng(g, a, b, 'a', 'f');
}

static int32_t b_string(RadGrammar *g, int32_t from) {
    int32_t q = st_new(g), end = st_new(g), esc = st_new(g);
    rng(g, from, q, '"', '"');
    rng(g, q, end, '"', '"');
    rng(g, q, q, 0x20, 0x21);
    rng(g, q, q, 0x23, 0x5b);
    rng(g, q, q, 0x5d, 0x7f);
    rng(g, q, esc, '\\', '\\');
    for (const char *c = "\"\\/bfnrt"; *c; c++) rng(g, esc, q, (uint8_t)*c, (uint8_t)*c);
    /* \uXXXX: x3..x1 count the hex digits still due; a high surrogate D[89AB]xx must be
     * followed by \uD[C-F]xx, and a lone low surrogate D[C-F]xx is refused (jansson would) */
    int32_t u = st_new(g), x3 = st_new(g), x2 = st_new(g), x1 = st_new(g), d = st_new(g);
    rng(g, esc, u, 'u', 'u');
    hex(g, x1, q);
    hex(g, x2, x1);
    hex(g, x3, x2);
    rng(g, u, x3, '0', '9');
    rng(g, u, x3, 'A', 'C');
    rng(g, u, x3, 'a', 'c');
    rng(g, u, x3, 'E', 'F');
    rng(g, u, x3, 'e', 'f');
    rng(g, u, d, 'D', 'D');
    rng(g, u, d, 'd', 'd');
    rng(g, d, x2, '0', '7');
    int32_t h1 = st_new(g), h2 = st_new(g), h3 = st_new(g), h4 = st_new(g), h5 = st_new(g), h6 = st_new(g);
    rng(g, d, h1, '8', '9');
    rng(g, d, h1, 'A', 'B');
    rng(g, d, h1, 'a', 'b');
    hex(g, h1, h2);
    hex(g, h2, h3);
    rng(g, h3, h4, '\\', '\\');
    rng(g, h4, h5, 'u', 'u');
    rng(g, h5, h6, 'D', 'D');
    rng(g, h5, h6, 'd', 'd');
    rng(g, h6, x2, 'C', 'F');
    rng(g, h6, x2, 'c', 'f');
    /* well-formed UTF-8 (RFC 3629's table): c1..c3 count continuation bytes still due */
    int32_t c1 = st_new(g), c2 = st_new(g), c3 = st_new(g);
    int32_t e0 = st_new(g), ed = st_new(g), f0 = st_new(g), f4 = st_new(g);
    rng(g, c1, q, 0x80, 0xbf);
    rng(g, c2, c1, 0x80, 0xbf);
    rng(g, c3, c2, 0x80, 0xbf);
    rng(g, q, c1, 0xc2, 0xdf);
    rng(g, q, e0, 0xe0, 0xe0);
    rng(g, e0, c1, 0xa0, 0xbf);
    rng(g, q, c2, 0xe1, 0xec);
    rng(g, q, ed, 0xed, 0xed);
    rng(g, ed, c1, 0x80, 0x9f);
    rng(g, q, c2, 0xee, 0xef);
    rng(g, q, f0, 0xf0, 0xf0);
    rng(g, f0, c2, 0x90, 0xbf);
    rng(g, q, c3, 0xf1, 0xf3);
    rng(g, q, f4, 0xf4, 0xf4);
    rng(g, f4, c2, 0x80, 0x8f);
    return end;
}

static int32_t b_number(RadGrammar *g, int32_t from, int integer) {
    int32_t sign = st_new(g), ip = st_new(g), nz = st_new(g);
    rng(g, from, sign, '-', '-');
    eps(g, from, sign);
    rng(g, sign, ip, '0', '0');
    rng(g, sign, nz, '1', '9');
    rng(g, nz, nz, '0', '9');
    eps(g, nz, ip);
    if (integer) return ip;
    int32_t dot = st_new(g), frac = st_new(g), ex = st_new(g);
    rng(g, ip, dot, '.', '.');
    rng(g, dot, frac, '0', '9');
    rng(g, frac, frac, '0', '9');
    eps(g, ip, ex);
    eps(g, frac, ex);
    int32_t e = st_new(g), es = st_new(g), ed = st_new(g), end = st_new(g);
    rng(g, ex, e, 'e', 'e');
    rng(g, ex, e, 'E', 'E');
    rng(g, e, es, '+', '+');
    rng(g, e, es, '-', '-');
    eps(g, e, es);
    rng(g, es, ed, '0', '9');
    rng(g, ed, ed, '0', '9');
    eps(g, ex, end);
    eps(g, ed, end);
    return end;
}

/* A placeholder for any JSON value nesting at most depth deep, expanded when a walk reaches it. */
static int32_t b_generic(RadGrammar *g, int32_t from, int32_t depth) {
    int32_t p = st_new(g), x = st_new(g);
    eps(g, from, p);
    if (!g->fail) g->st[p].lazy = depth, g->st[p].exit = x;
    return x;
}

/* {} or {"key": value, ...} with values nesting at most depth - 1 deep (depth >= 1). */
static int32_t b_gen_object(RadGrammar *g, int32_t from, int32_t depth) {
    int32_t w = b_ws(g, b_byte(g, from, '{')), end = st_new(g), l = st_new(g);
    rng(g, w, end, '}', '}');
    eps(g, w, l);
    int32_t k = b_ws(g, b_string(g, l));
    int32_t v = b_ws(g, b_generic(g, b_ws(g, b_byte(g, k, ':')), depth - 1));
    rng(g, v, end, '}', '}');
    eps(g, b_ws(g, b_byte(g, v, ',')), l);
    return end;
}

static int32_t b_gen_array(RadGrammar *g, int32_t from, int32_t depth) {
    int32_t w = b_ws(g, b_byte(g, from, '[')), end = st_new(g), l = st_new(g);
    rng(g, w, end, ']', ']');
    eps(g, w, l);
    int32_t v = b_ws(g, b_generic(g, l, depth - 1));
    rng(g, v, end, ']', ']');
    eps(g, b_ws(g, b_byte(g, v, ',')), l);
    return end;
}

static int32_t b_gen_value(RadGrammar *g, int32_t from, int32_t depth) {
    int32_t end = st_new(g);
    eps(g, b_string(g, from), end);
    eps(g, b_number(g, from, 0), end);
    eps(g, b_lit(g, from, "true", 4), end);
    eps(g, b_lit(g, from, "false", 5), end);
    eps(g, b_lit(g, from, "null", 4), end);
    if (depth > 0) {
        eps(g, b_gen_object(g, from, depth), end);
        eps(g, b_gen_array(g, from, depth), end);
    }
    return end;
}

/* Expands placeholder p in place, all or nothing: room is reserved first. */
static int expand(RadGrammar *g, int32_t p) {
    if (reserve(g, EXPAND_STATES, EXPAND_STATES * 4)) return -1;
    int32_t depth = g->st[p].lazy, x = g->st[p].exit;
    g->st[p].lazy = -1;
    eps(g, b_gen_value(g, p, depth), x);
    return g->fail ? -1 : 0;
}

/* --- the schema compiler ------------------------------------------------------------------ */

/* A compiled piece: entered at s, left at e; its states are [lo, hi). s < 0: the empty language
 * (a recursive $ref left out). Nothing outside points in but at s, nothing inside out. */
typedef struct Frag {
    int32_t s, e;   /* entry and exit states */
    int32_t lo, hi; /* the states it owns */
} Frag;

/* A second instance of an untouched fragment (array items need one per position). */
static Frag frag_copy(RadGrammar *g, Frag f) {
    int32_t off = g->n_st - f.lo;
    for (int32_t s = f.lo; s < f.hi; s++) st_new(g);
    for (int32_t s = f.lo; s < f.hi && !g->fail; s++) {
        g->st[s + off].lazy = g->st[s].lazy;
        g->st[s + off].exit = g->st[s].exit >= 0 ? g->st[s].exit + off : -1;
        for (int32_t e = g->st[s].head; e >= 0; e = g->ed[e].next) {
            NEdge d = g->ed[e];
            edge(g, s + off, d.to >= f.lo && d.to < f.hi ? d.to + off : d.to, d.eps, d.lo, d.hi);
        }
    }
    return (Frag){f.s + off, f.e + off, f.lo + off, f.hi + off};
}

enum { T_OBJ = 1, T_ARR = 2, T_STR = 4, T_NUM = 8, T_INT = 16, T_BOOL = 32, T_NULL = 64, T_ANY = 127 };
static const char *const TYPE_NAME[] = {"object", "array", "string", "number", "integer", "boolean", "null"};

/* Keywords that constrain nothing: skipped. */
static const char *const ANNOTATION[] = {"title", "description", "default", "examples", "$schema", "$id",
                                         "$comment", "strict", "$defs", "definitions", "deprecated",
                                         "readOnly", "writeOnly"};
/* Keywords served: a bit each. */
static const char *const SERVED[] = {"type", "properties", "required", "additionalProperties", "items",
                                     "minItems", "maxItems", "enum", "const", "anyOf", "$ref"};
enum { K_TYPE = 1, K_PROPS = 2, K_REQ = 4, K_ADDL = 8, K_ITEMS = 16, K_MINI = 32, K_MAXI = 64,
       K_ENUM = 128, K_CONST = 256, K_ANYOF = 512, K_REF = 1024 };
#define K_OBJECT (K_PROPS | K_REQ | K_ADDL)
#define K_ARRAY (K_ITEMS | K_MINI | K_MAXI)

typedef struct Cc {
    RadGrammar *g;
    const json_t *root;                       /* for $ref */
    RadErr *e;
    RadBuf path;                              /* where the schema being compiled is: "properties.a" */
    char *param;                              /* the caller's, cap bytes; may be NULL */
    size_t cap;
    int depth;                                /* schema objects being compiled, nested */
    const json_t *refs[SCHEMA_DEPTH_MAX + 2]; /* $ref targets being compiled (the root first) */
    int n_refs;
    int failed;                               /* an error is reported: unwind */
    char *pruned;                             /* where the first recursive $ref was left out */
    char *pruned_ref;                         /* and its text */
} Cc;

static void path_set(Cc *c, size_t len) {
    c->path.len = len;
    if (c->path.p) c->path.p[len] = 0;
}

/* Appends ".seg" (or "seg" at the root); returns the length to restore. */
static size_t path_push(Cc *c, const char *seg) {
    size_t old = c->path.len;
    RadErr e = {0};
    if ((old && rad_buf_put(&c->path, ".", 1, &e)) || rad_buf_puts(&c->path, seg, &e)) path_set(c, old);
    return old;
}

static size_t path_push_idx(Cc *c, const char *kw, size_t i) {
    char s[64];
    snprintf(s, sizeof s, "%zu", i);
    size_t old = path_push(c, kw);
    path_push(c, s);
    return old;
}

/* Reports at `at` (a full parameter path); the first report wins. */
__attribute__((format(printf, 4, 5))) static int fail_at(Cc *c, int code, const char *at, const char *fmt, ...) {
    if (c->failed) return code;
    c->failed = 1;
    char m[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    rad_err_set(c->e, code, "schema%s%s: %s", *at ? "." : "", at, m);
    if (c->param && c->cap) snprintf(c->param, c->cap, "%s", at);
    return code;
}

/* Reports at the current path, or at its keyword kw when kw is non-NULL. */
__attribute__((format(printf, 3, 4))) static int fail(Cc *c, const char *kw, const char *fmt, ...) {
    if (c->failed) return RAD_E_ARG;
    char m[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    size_t old = kw ? path_push(c, kw) : c->path.len;
    int rc = fail_at(c, RAD_E_ARG, c->path.p ? c->path.p : "", "%s", m);
    path_set(c, old);
    return rc;
}

static int fail_build(Cc *c) {
    if (c->g->fail == FAIL_NOMEM) return fail_at(c, RAD_E_NOMEM, c->path.p ? c->path.p : "", "out of memory");
    return fail(c, NULL, "schema too large: more than %d automaton states", NFA_COMPILE_MAX);
}

static int index_of(const char *const *list, size_t n, const char *s) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(list[i], s)) return (int)i;
    return -1;
}
#define N_OF(a) (sizeof(a) / sizeof *(a))

/* The first keyword of s among the served bits in mask, for messages. */
static const char *first_kw(const json_t *s, unsigned mask) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        int i = index_of(SERVED, N_OF(SERVED), k);
        if (i >= 0 && (mask & (1u << i))) return k;
    }
    return "?";
}

static int parse_types(Cc *c, const json_t *s, unsigned *types) {
    const json_t *t = json_object_get(s, "type");
    *types = 0;
    if (!t) return *types = T_ANY, RAD_OK;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    if (!json_is_string(t) && !(json_is_array(t) && n)) return fail(c, "type", "'type' must be a type name or a non-empty array of them");
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_is_array(t) ? json_array_get(t, i) : t;
        int k = json_is_string(x) ? index_of(TYPE_NAME, N_OF(TYPE_NAME), json_string_value(x)) : -1;
        if (k < 0) return fail(c, "type", "'type' %s%s%s is not a JSON Schema type", json_is_string(x) ? "\"" : "",
                               json_is_string(x) ? json_string_value(x) : "(not a string)", json_is_string(x) ? "\"" : "");
        *types |= 1u << k;
    }
    return RAD_OK;
}

static int compile(Cc *c, const json_t *s, Frag *out);

/* `from` leads into f and f out to `to`. */
static void link_frag(RadGrammar *g, int32_t from, Frag f, int32_t to) {
    eps(g, from, f.s);
    eps(g, f.e, to);
}

/* Any JSON value nesting at most depth deep. */
static Frag frag_generic(RadGrammar *g, int32_t depth) {
    int32_t s = st_new(g);
    int32_t e = b_generic(g, s, depth);
    return (Frag){s, e, s, g->n_st};
}

static Frag frag_void(RadGrammar *g) { return (Frag){-1, -1, g->n_st, g->n_st}; }

static int json_matches(const json_t *v, unsigned types) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return !!(types & T_OBJ);
    case JSON_ARRAY: return !!(types & T_ARR);
    case JSON_STRING: return !!(types & T_STR);
    case JSON_INTEGER: return !!(types & (T_NUM | T_INT));
    case JSON_REAL: {
        double d = json_real_value(v);
        return (types & T_NUM) || ((types & T_INT) && d == floor(d));
    }
    case JSON_TRUE:
    case JSON_FALSE: return !!(types & T_BOOL);
    case JSON_NULL: return !!(types & T_NULL);
    }
    return 0;
}

/* Adds the literal p[0, n) to the trie rooted at root, ending in end. */
static void trie_add(RadGrammar *g, int32_t root, int32_t end, const char *p, size_t n) {
    int32_t cur = root;
    for (size_t i = 0; i < n && !g->fail; i++) {
        uint8_t b = (uint8_t)p[i];
        int32_t nx = -1;
        for (int32_t e = g->st[cur].head; e >= 0; e = g->ed[e].next)
            if (!g->ed[e].eps && g->ed[e].lo == b && g->ed[e].hi == b) {
                nx = g->ed[e].to;
                break;
            }
        cur = nx >= 0 ? nx : b_byte(g, cur, b);
    }
    if (g->fail) return;
    for (int32_t e = g->st[cur].head; e >= 0; e = g->ed[e].next)
        if (g->ed[e].eps && g->ed[e].to == end) return;
    eps(g, cur, end);
}

static int compile_enum(Cc *c, const json_t *s, unsigned have, Frag *out) {
    RadGrammar *g = c->g;
    if ((have & K_ENUM) && (have & K_CONST)) return fail(c, "const", "'const' next to 'enum' is not served");
    const char *kw = (have & K_ENUM) ? "enum" : "const";
    unsigned other = have & ~(unsigned)(K_ENUM | K_CONST | K_TYPE);
    if (other) return fail(c, first_kw(s, other), "'%s' next to '%s' is not served", first_kw(s, other), kw);
    unsigned types;
    int rc = parse_types(c, s, &types);
    if (rc) return rc;
    const json_t *v = json_object_get(s, kw);
    size_t n = 1;
    if (have & K_ENUM) {
        if (!json_is_array(v) || !(n = json_array_size(v))) return fail(c, kw, "'enum' must be a non-empty array");
        if (n > ENUM_MAX) return fail(c, kw, "'enum' has %zu values: more than %d is too large", n, ENUM_MAX);
    }
    int32_t root = st_new(g), end = st_new(g);
    RadBuf b = {0};
    size_t total = 0, kept = 0;
    for (size_t i = 0; i < n && !g->fail; i++) {
        const json_t *x = (have & K_ENUM) ? json_array_get(v, i) : v;
        if (!json_matches(x, types)) continue;
        RadErr e = {0};
        b.len = 0;
        if (rad_pyjson_dump(&b, x, &e)) {
            rad_buf_free(&b);
            if (e.code == RAD_E_NOMEM) return fail_at(c, RAD_E_NOMEM, c->path.p ? c->path.p : "", "out of memory");
            return fail(c, kw, "'%s': %s", kw, e.msg);
        }
        if ((total += b.len) > ENUM_BYTES_MAX) {
            rad_buf_free(&b);
            return fail(c, kw, "'%s' is too large: more than %d bytes of values", kw, ENUM_BYTES_MAX);
        }
        trie_add(g, root, end, b.p, b.len);
        kept++;
    }
    rad_buf_free(&b);
    if (g->fail) return fail_build(c);
    if (!kept) return fail(c, kw, "no value of '%s' has the schema's 'type'", kw);
    *out = (Frag){root, end, root, g->n_st};
    return RAD_OK;
}

/* Resolves a local JSON pointer ("#", "#/$defs/a") against the root; tpath gets its path. */
static const json_t *resolve(Cc *c, const char *ref, RadBuf *tpath) {
    if (ref[0] != '#') return NULL;
    const json_t *cur = c->root;
    const char *p = ref + 1;
    RadErr e = {0};
    if (rad_buf_put(tpath, "", 0, &e)) return NULL;
    if (!*p) return cur;
    if (*p != '/') return NULL;
    while (*p == '/' && cur) {
        p++;
        char seg[1024];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '%' && p[1] && p[2]) { /* a URI fragment: %XX */
                char h[3] = {p[1], p[2], 0}, *endp;
                long x = strtol(h, &endp, 16);
                if (*endp) return NULL;
                ch = (char)x, p += 2;
            } else if (ch == '~') { /* JSON pointer: ~0 is ~, ~1 is / */
                if (p[1] != '0' && p[1] != '1') return NULL;
                ch = p[1] == '0' ? '~' : '/', p++;
            }
            if (n + 1 >= sizeof seg) return NULL;
            seg[n++] = ch;
        }
        seg[n] = 0;
        if (json_is_object(cur)) cur = json_object_get(cur, seg);
        else if (json_is_array(cur)) {
            char *endp;
            unsigned long long i = strtoull(seg, &endp, 10);
            cur = (*seg && !*endp && seg[0] != '-') ? json_array_get(cur, (size_t)i) : NULL;
        } else cur = NULL;
        if ((tpath->len && rad_buf_put(tpath, ".", 1, &e)) || rad_buf_puts(tpath, seg, &e)) return NULL;
    }
    return *p ? NULL : cur;
}

static int compile_ref(Cc *c, const json_t *s, unsigned have, Frag *out) {
    unsigned other = have & ~(unsigned)K_REF;
    if (other) return fail(c, first_kw(s, other), "'%s' next to '$ref' is not served", first_kw(s, other));
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (!ref) return fail(c, "$ref", "'$ref' must be a string");
    if (ref[0] != '#')
        return fail(c, "$ref", "'$ref' \"%s\" is not served: only references inside the schema (\"#/$defs/NAME\")", ref);
    RadBuf tpath = {0};
    const json_t *t = resolve(c, ref, &tpath);
    if (!t) {
        rad_buf_free(&tpath);
        return fail(c, "$ref", "'$ref' \"%s\" does not resolve in this schema", ref);
    }
    int seen = 0;
    for (int i = 0; i < c->n_refs; i++) seen += c->refs[i] == t;
    if (seen >= REF_UNROLL) { /* deep enough: this branch is left out */
        if (!c->pruned) {
            size_t old = path_push(c, "$ref");
            c->pruned = strdup(c->path.p ? c->path.p : "");
            c->pruned_ref = strdup(ref);
            path_set(c, old);
        }
        rad_buf_free(&tpath);
        *out = frag_void(c->g);
        return RAD_OK;
    }
    RadBuf saved = c->path;
    c->path = tpath;
    c->refs[c->n_refs++] = t;
    int rc = compile(c, t, out);
    c->n_refs--;
    rad_buf_free(&c->path);
    c->path = saved;
    return rc;
}

static int compile_anyof(Cc *c, const json_t *s, unsigned have, Frag *out) {
    unsigned other = have & ~(unsigned)K_ANYOF;
    if (other) return fail(c, first_kw(s, other), "'%s' next to 'anyOf' is not served", first_kw(s, other));
    const json_t *a = json_object_get(s, "anyOf");
    if (!json_is_array(a) || !json_array_size(a)) return fail(c, "anyOf", "'anyOf' must be a non-empty array of schemas");
    RadGrammar *g = c->g;
    int32_t st = st_new(g), end = st_new(g);
    int any = 0;
    for (size_t i = 0; i < json_array_size(a); i++) {
        Frag f;
        size_t old = path_push_idx(c, "anyOf", i);
        int rc = compile(c, json_array_get(a, i), &f);
        path_set(c, old);
        if (rc) return rc;
        if (f.s < 0) continue;
        link_frag(g, st, f, end);
        any = 1;
    }
    *out = any ? (Frag){st, end, st, g->n_st} : frag_void(g);
    return RAD_OK;
}

/* An object's members: props (NULL: none listed), addl (NULL or false), need the required names. */
static int compile_members(Cc *c, const json_t *props, const json_t *addl, const json_t *need, Frag *out) {
    RadGrammar *g = c->g;
    int32_t st = st_new(g);
    if (!props) {
        if (addl) { /* additionalProperties false and nothing listed: {} */
            int32_t e = st_new(g);
            rng(g, b_ws(g, b_byte(g, st, '{')), e, '}', '}');
            *out = (Frag){st, e, st, g->n_st};
        } else {
            int32_t e = b_gen_object(g, st, GENERIC_DEPTH);
            *out = (Frag){st, e, st, g->n_st};
        }
        return RAD_OK;
    }
    /* Members in order. nw: the position with nothing written yet, sw: something written (a
     * comma must come first). A member leads from either to the next sw; one not required may
     * be skipped from both. */
    int32_t nw = st_new(g), sw = st_new(g);
    eps(g, b_ws(g, b_byte(g, st, '{')), nw);
    const char *k;
    json_t *ps;
    RadBuf key = {0};
    json_object_foreach((json_t *)props, k, ps) {
        int required = json_object_get(need, k) != NULL;
        Frag f;
        size_t old = path_push(c, "properties");
        path_push(c, k);
        int rc = compile(c, ps, &f);
        path_set(c, old);
        if (rc) return rad_buf_free(&key), rc;
        if (f.s < 0) {
            if (required) return rad_buf_free(&key), *out = frag_void(g), RAD_OK;
            continue;
        }
        json_t *ks = json_string(k);
        RadErr e = {0};
        key.len = 0;
        if (!ks || rad_pyjson_dump(&key, ks, &e)) {
            json_decref(ks);
            rad_buf_free(&key);
            return fail_at(c, RAD_E_NOMEM, c->path.p ? c->path.p : "", "out of memory");
        }
        json_decref(ks);
        int32_t kst = st_new(g), nw2 = st_new(g), sw2 = st_new(g);
        int32_t v = b_ws(g, b_byte(g, b_ws(g, b_lit(g, kst, key.p, key.len)), ':'));
        eps(g, v, f.s);
        eps(g, b_ws(g, f.e), sw2);
        eps(g, nw, kst);
        eps(g, b_ws(g, b_byte(g, sw, ',')), kst);
        if (!required) eps(g, nw, nw2), eps(g, sw, sw2);
        nw = nw2, sw = sw2;
        if (g->fail) break;
    }
    rad_buf_free(&key);
    int32_t end = st_new(g);
    rng(g, nw, end, '}', '}');
    rng(g, sw, end, '}', '}');
    *out = (Frag){st, end, st, g->n_st};
    return g->fail ? fail_build(c) : RAD_OK;
}

static int compile_object(Cc *c, const json_t *s, Frag *out) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return fail(c, "properties", "'properties' must be an object");
    if (addl && !json_is_false(addl))
        return fail(c, "additionalProperties",
                    "'additionalProperties' other than false is not served (objects get exactly the listed properties)");
    if (req && !json_is_array(req)) return fail(c, "required", "'required' must be an array of property names");
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const char *k = json_string_value(json_array_get(req, i));
        if (!k) return fail(c, "required", "'required' must be an array of property names");
        if (!props || !json_object_get(props, k))
            return fail(c, "required", "'required' names \"%s\", which is not in 'properties'", k);
    }
    json_t *need = json_object(); /* the required names, looked up per property */
    for (size_t i = 0; need && req && i < json_array_size(req); i++)
        if (json_object_set(need, json_string_value(json_array_get(req, i)), json_true())) json_decref(need), need = NULL;
    if (!need) return fail_at(c, RAD_E_NOMEM, c->path.p ? c->path.p : "", "out of memory");
    int rc = compile_members(c, props, addl, need, out);
    json_decref(need);
    return rc;
}

static int count_kw(Cc *c, const json_t *s, const char *kw, long long *n) {
    const json_t *v = json_object_get(s, kw);
    if (!v) return *n = -1, RAD_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0) return fail(c, kw, "'%s' must be a non-negative integer", kw);
    *n = json_integer_value(v);
    if (*n > ITEMS_MAX) return fail(c, kw, "'%s' %lld is too large: at most %d is served", kw, *n, ITEMS_MAX);
    return RAD_OK;
}

static int compile_array(Cc *c, const json_t *s, Frag *out) {
    RadGrammar *g = c->g;
    const json_t *items = json_object_get(s, "items");
    long long mn, mx;
    int rc;
    if (items && !json_is_object(items) && !json_is_boolean(items))
        return fail(c, "items", "'items' must be a schema (an array of them is 'prefixItems', not served)");
    if ((rc = count_kw(c, s, "minItems", &mn)) || (rc = count_kw(c, s, "maxItems", &mx))) return rc;
    if (mn < 0) mn = 0;
    if (mx >= 0 && mn > mx) return fail(c, "minItems", "'minItems' %lld is above 'maxItems' %lld", mn, mx);
    Frag item;
    if (items) {
        size_t old = path_push(c, "items");
        rc = compile(c, items, &item);
        path_set(c, old);
        if (rc) return rc;
    } else item = frag_generic(g, GENERIC_DEPTH - 1);
    int32_t st = st_new(g), end = st_new(g);
    int32_t pos = b_ws(g, b_byte(g, st, '['));
    if (item.s < 0) { /* a recursion left out: only [] remains */
        if (mn > 0) return *out = frag_void(g), RAD_OK;
        rng(g, pos, end, ']', ']');
        *out = (Frag){st, end, st, g->n_st};
        return RAD_OK;
    }
    /* one item instance per position: the first minItems required, then up to maxItems, or a
     * loop after max(minItems, 1) when unbounded. Copies are made while item is untouched. */
    int n = mx >= 0 ? (int)mx : (int)(mn > 1 ? mn : 1) + 1;
    Frag *fr = malloc((size_t)n * sizeof *fr + 1);
    if (!fr) return fail_at(c, RAD_E_NOMEM, c->path.p ? c->path.p : "", "out of memory");
    for (int i = 0; i < n && !g->fail; i++) fr[i] = i ? frag_copy(g, item) : item;
    if (g->fail) return free(fr), fail_build(c);
    int slots = mx >= 0 ? n : n - 1; /* the unbounded case's last copy is the loop */
    for (int k = 0; k < slots; k++) {
        if (k >= mn) rng(g, pos, end, ']', ']');
        int32_t in = k ? b_ws(g, b_byte(g, pos, ',')) : pos;
        eps(g, in, fr[k].s);
        pos = b_ws(g, fr[k].e);
    }
    rng(g, pos, end, ']', ']');
    if (mx < 0) { /* pos has slots >= 1 items: ", item" again and again */
        eps(g, b_ws(g, b_byte(g, pos, ',')), fr[n - 1].s);
        eps(g, b_ws(g, fr[n - 1].e), pos);
    }
    free(fr);
    *out = (Frag){st, end, st, g->n_st};
    return g->fail ? fail_build(c) : RAD_OK;
}

static int compile_types(Cc *c, const json_t *s, unsigned have, Frag *out) {
    RadGrammar *g = c->g;
    unsigned types;
    int rc = parse_types(c, s, &types);
    if (rc) return rc;
    if (!(have & K_TYPE)) { /* inferred from the keywords there */
        types = ((have & K_OBJECT) ? T_OBJ : 0) | ((have & K_ARRAY) ? T_ARR : 0);
        if (!types) return *out = frag_generic(g, GENERIC_DEPTH), RAD_OK;
    }
    if (types & T_NUM) types &= ~(unsigned)T_INT;
    int32_t st = st_new(g), end = st_new(g);
    int any = 0;
    for (unsigned t = 1; t <= T_NULL && !g->fail; t <<= 1) {
        if (!(types & t)) continue;
        Frag f;
        if (t == T_OBJ || t == T_ARR) {
            if ((rc = t == T_OBJ ? compile_object(c, s, &f) : compile_array(c, s, &f))) return rc;
            if (f.s < 0) continue;
        } else {
            int32_t fs = st_new(g), fe;
            switch (t) {
            case T_STR: fe = b_string(g, fs); break;
            case T_NUM: fe = b_number(g, fs, 0); break;
            case T_INT: fe = b_number(g, fs, 1); break;
            case T_BOOL: fe = st_new(g), eps(g, b_lit(g, fs, "true", 4), fe), eps(g, b_lit(g, fs, "false", 5), fe); break;
            default: fe = b_lit(g, fs, "null", 4); break;
            }
            f = (Frag){fs, fe, fs, g->n_st};
        }
        link_frag(g, st, f, end);
        any = 1;
    }
    if (g->fail) return fail_build(c);
    *out = any ? (Frag){st, end, st, g->n_st} : frag_void(g);
    return RAD_OK;
}

static int compile_in(Cc *c, const json_t *s, Frag *out) {
    if (json_is_true(s)) return *out = frag_generic(c->g, GENERIC_DEPTH), RAD_OK;
    if (json_is_false(s)) return fail(c, NULL, "the schema false accepts no value");
    if (!json_is_object(s)) return fail(c, NULL, "a schema must be an object or a boolean");
    unsigned have = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (index_of(ANNOTATION, N_OF(ANNOTATION), k) >= 0) continue;
        int i = index_of(SERVED, N_OF(SERVED), k);
        if (i < 0) return fail(c, k, "'%s' is not served", k);
        have |= 1u << i;
    }
    if (have & K_REF) return compile_ref(c, s, have, out);
    if (have & (K_ENUM | K_CONST)) return compile_enum(c, s, have, out);
    if (have & K_ANYOF) return compile_anyof(c, s, have, out);
    return compile_types(c, s, have, out);
}

static int compile(Cc *c, const json_t *s, Frag *out) {
    *out = frag_void(c->g);
    if (c->depth >= SCHEMA_DEPTH_MAX) return fail(c, NULL, "nested deeper than %d levels", SCHEMA_DEPTH_MAX);
    c->depth++;
    int rc = compile_in(c, s, out);
    c->depth--;
    if (!rc && c->g->fail) rc = fail_build(c);
    return rc;
}

/* --- the lazy DFA ------------------------------------------------------------------------- */

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int push(int32_t **p, size_t *n, size_t *cap, int32_t v) {
    if (*n >= *cap && grow((void **)p, cap, *n + 1, sizeof **p)) return -1;
    (*p)[(*n)++] = v;
    return 0;
}

/* g->set = the epsilon closure of g->seed, kept to the states that matter to a DFA state: those
 * with byte edges, and final. Placeholders met are expanded first. -1: out of room. */
static int closure(RadGrammar *g) {
    if (++g->stamp == 0) {
        memset(g->mark, 0, (size_t)g->cap_st * sizeof *g->mark);
        g->stamp = 1;
    }
    size_t sp = 0;
    g->set_n = 0;
    for (size_t i = 0; i < g->seed_n; i++) {
        int32_t u = g->seed[i];
        if (g->mark[u] == g->stamp) continue;
        g->mark[u] = g->stamp;
        if (push(&g->stack, &sp, &g->stack_cap, u)) return -1;
    }
    while (sp) {
        int32_t u = g->stack[--sp];
        if (g->st[u].lazy >= 0 && expand(g, u)) return -1;
        int keep = u == g->final;
        for (int32_t e = g->st[u].head; e >= 0; e = g->ed[e].next) {
            if (!g->ed[e].eps) {
                keep = 1;
                continue;
            }
            int32_t v = g->ed[e].to;
            if (g->mark[v] == g->stamp) continue;
            g->mark[v] = g->stamp;
            if (push(&g->stack, &sp, &g->stack_cap, v)) return -1;
        }
        if (keep && push(&g->set, &g->set_n, &g->set_cap, u)) return -1;
    }
    qsort(g->set, g->set_n, sizeof *g->set, cmp_i32);
    return 0;
}

static uint32_t set_hash(const int32_t *p, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint32_t)p[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return (uint32_t)h;
}

static int hash_put(RadGrammar *g, int32_t id) {
    if ((uint32_t)(g->n_dfa + 1) * 2 > g->hash_cap) { /* rehash at half full */
        uint32_t cap = g->hash_cap ? g->hash_cap * 2 : 1024;
        int32_t *h = malloc((size_t)cap * sizeof *h);
        if (!h) return -1;
        memset(h, 0xff, (size_t)cap * sizeof *h);
        for (int32_t i = 0; i < g->n_dfa; i++) {
            if (i == id) continue;
            uint32_t j = g->set_hash[i] & (cap - 1);
            while (h[j] >= 0) j = (j + 1) & (cap - 1);
            h[j] = i;
        }
        free(g->hash);
        g->hash = h, g->hash_cap = cap;
    }
    uint32_t j = g->set_hash[id] & (g->hash_cap - 1);
    while (g->hash[j] >= 0) j = (j + 1) & (g->hash_cap - 1);
    g->hash[j] = id;
    return 0;
}

/* The DFA state for g->set: found, or made. RAD_GRAMMAR_FULL past the cap or out of memory. */
static int32_t dfa_add(RadGrammar *g) {
    uint32_t h = set_hash(g->set, g->set_n);
    if (g->hash_cap)
        for (uint32_t j = h & (g->hash_cap - 1); g->hash[j] >= 0; j = (j + 1) & (g->hash_cap - 1)) {
            int32_t id = g->hash[j];
            if (g->set_hash[id] == h && g->set_len[id] == g->set_n &&
                !memcmp(g->pool + g->set_off[id], g->set, g->set_n * sizeof *g->set))
                return id;
        }
    if (g->n_dfa >= g->dfa_max || g->pool_n + g->set_n > UINT32_MAX) return RAD_GRAMMAR_FULL;
    int32_t id = g->n_dfa;
    if (id >= g->cap_dfa) {
        size_t cap = g->cap_dfa ? (size_t)g->cap_dfa * 2 : 64;
        int32_t *t = realloc(g->trans, cap * 256 * sizeof *t);
        if (!t) return RAD_GRAMMAR_FULL;
        g->trans = t;
        uint32_t *o = realloc(g->set_off, cap * sizeof *o);
        if (!o) return RAD_GRAMMAR_FULL;
        g->set_off = o;
        uint32_t *l = realloc(g->set_len, cap * sizeof *l);
        if (!l) return RAD_GRAMMAR_FULL;
        g->set_len = l;
        uint32_t *hh = realloc(g->set_hash, cap * sizeof *hh);
        if (!hh) return RAD_GRAMMAR_FULL;
        g->set_hash = hh;
        uint8_t *a = realloc(g->accept, cap);
        if (!a) return RAD_GRAMMAR_FULL;
        g->accept = a;
        g->cap_dfa = (int32_t)cap;
    }
    if (grow((void **)&g->pool, &g->pool_cap, g->pool_n + g->set_n, sizeof *g->pool)) return RAD_GRAMMAR_FULL;
    memcpy(g->pool + g->pool_n, g->set, g->set_n * sizeof *g->set);
    g->set_off[id] = (uint32_t)g->pool_n;
    g->set_len[id] = (uint32_t)g->set_n;
    g->set_hash[id] = h;
    g->accept[id] = bsearch(&g->final, g->set, g->set_n, sizeof *g->set, cmp_i32) != NULL;
    for (size_t i = 0; i < 256; i++) g->trans[(size_t)id * 256 + i] = UNSET;
    g->n_dfa++;
    if (hash_put(g, id)) {
        g->n_dfa--;
        return RAD_GRAMMAR_FULL;
    }
    g->pool_n += g->set_n;
    return id;
}

int32_t rad_grammar_step(RadGrammar *g, int32_t s, uint8_t b) {
    if (!g || s < 0 || s >= g->n_dfa) return RAD_GRAMMAR_DEAD;
    int32_t t = g->trans[(size_t)s * 256 + b];
    if (t != UNSET) return t;
    g->seed_n = 0;
    const int32_t *set = g->pool + g->set_off[s];
    for (uint32_t i = 0; i < g->set_len[s]; i++)
        for (int32_t e = g->st[set[i]].head; e >= 0; e = g->ed[e].next) {
            const NEdge *d = &g->ed[e];
            if (!d->eps && d->lo <= b && b <= d->hi && push(&g->seed, &g->seed_n, &g->seed_cap, d->to))
                return RAD_GRAMMAR_FULL;
        }
    if (g->seed_n) {
        if (closure(g)) return RAD_GRAMMAR_FULL;
        t = g->set_n ? dfa_add(g) : RAD_GRAMMAR_DEAD;
        if (t == RAD_GRAMMAR_FULL) return t; /* not cached: a raised cap may serve it later */
    } else t = RAD_GRAMMAR_DEAD;
    g->trans[(size_t)s * 256 + b] = t;
    return t;
}

int32_t rad_grammar_start(RadGrammar *g) { return g && g->n_dfa ? 0 : RAD_GRAMMAR_DEAD; }

int rad_grammar_accepting(RadGrammar *g, int32_t s) { return g && s >= 0 && s < g->n_dfa && g->accept[s]; }

/* The set keeps only final and states with byte edges, and final has none: the set {final}
 * is the one where nothing can follow. */
int rad_grammar_done(RadGrammar *g, int32_t s) {
    return rad_grammar_accepting(g, s) && g->set_len[s] == 1;
}

void rad_grammar_set_dfa_cap(RadGrammar *g, int32_t n) {
    if (g) g->dfa_max = n < 1 ? 1 : n > DFA_CAP_MAX ? DFA_CAP_MAX : n;
}

int32_t rad_grammar_n_dfa(const RadGrammar *g) { return g ? g->n_dfa : 0; }
int32_t rad_grammar_n_nfa(const RadGrammar *g) { return g ? g->n_st : 0; }

void rad_grammar_free(RadGrammar *g) {
    if (!g) return;
    free(g->st);
    free(g->ed);
    free(g->mark);
    free(g->stack);
    free(g->set);
    free(g->seed);
    free(g->trans);
    free(g->set_off);
    free(g->set_len);
    free(g->set_hash);
    free(g->accept);
    free(g->pool);
    free(g->hash);
    free(g);
}

static RadGrammar *g_new(void) {
    RadGrammar *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->max_st = NFA_COMPILE_MAX;
    g->dfa_max = DFA_MAX;
    return g;
}

/* Closes the NFA (root, then final) and makes the start DFA state. */
static int g_finish(RadGrammar *g, Frag root, RadErr *e) {
    g->final = st_new(g);
    eps(g, root.e, g->final);
    g->start = root.s;
    if (g->fail == FAIL_NOMEM) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    if (g->fail) return rad_err_set(e, RAD_E_ARG, "schema: too large: more than %d automaton states", NFA_COMPILE_MAX);
    g->max_st = NFA_LAZY_MAX;
    g->seed_n = 0;
    if (push(&g->seed, &g->seed_n, &g->seed_cap, g->start) || closure(g) || dfa_add(g) != 0)
        return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    return RAD_OK;
}

int rad_grammar_from_schema(const json_t *schema, RadGrammar **out, char *param, size_t cap, RadErr *e) {
    *out = NULL;
    if (param && cap) param[0] = 0;
    if (!schema) return rad_err_set(e, RAD_E_ARG, "schema: missing");
    RadGrammar *g = g_new();
    if (!g) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    Cc c = {.g = g, .root = schema, .e = e, .param = param, .cap = cap};
    RadErr pe = {0};
    if (rad_buf_put(&c.path, "", 0, &pe)) return rad_grammar_free(g), rad_err_set(e, RAD_E_NOMEM, "out of memory");
    c.refs[c.n_refs++] = schema;
    Frag root;
    int rc = compile(&c, schema, &root);
    if (!rc && root.s < 0)
        rc = fail_at(&c, RAD_E_ARG, c.pruned ? c.pruned : "",
                     "recursive '$ref' \"%s\" needs more than %d levels: make the recursion optional (an anyOf "
                     "alternative, a property not required, or an array item with minItems 0)", c.pruned_ref ? c.pruned_ref : "?",
                     REF_UNROLL);
    rad_buf_free(&c.path);
    free(c.pruned);
    free(c.pruned_ref);
    if (!rc) rc = g_finish(g, root, e);
    if (rc) return rad_grammar_free(g), rc;
    *out = g;
    return RAD_OK;
}

int rad_grammar_json_object(unsigned max_depth, RadGrammar **out, RadErr *e) {
    *out = NULL;
    if (max_depth < 1 || max_depth > JSON_MODE_DEPTH_MAX)
        return rad_err_set(e, RAD_E_ARG, "json_object: max_depth %u is outside 1..%d", max_depth, JSON_MODE_DEPTH_MAX);
    RadGrammar *g = g_new();
    if (!g) return rad_err_set(e, RAD_E_NOMEM, "out of memory");
    int32_t st = st_new(g);
    int32_t end = b_gen_object(g, st, (int32_t)max_depth);
    int rc = g_finish(g, (Frag){st, end, st, g->n_st}, e);
    if (rc) return rad_grammar_free(g), rc;
    *out = g;
    return RAD_OK;
}
