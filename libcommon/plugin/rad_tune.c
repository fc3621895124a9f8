/* The tuning table: read, check, write, compare (rad_tune.h, docs/TUNE.md). */
#include "libcommon/plugin/rad_tune.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libcommon/base/rad_num.h"

#define MAX_LINE 4096

/* ---- names ------------------------------------------------------------------------------------ */

/* OP: [a-z][a-z0-9_]* (ops, knobs); LIB: [A-Za-z0-9_.-]+ (plugin names, variants). 1..63 bytes. */
enum { N_OP, N_LIB };
static int name_ok(const char *s, size_t l, int cls) {
    if (l < 1 || l >= RAD_TUNE_NAME) return 0;
    for (size_t i = 0; i < l; i++) {
        const char c = s[i];
        const int lower = c >= 'a' && c <= 'z', digit = c >= '0' && c <= '9';
        if (cls == N_OP ? !(lower || (i && (digit || c == '_')))
                        : !(lower || digit || (c >= 'A' && c <= 'Z') || c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

/* ---- the table in memory ------------------------------------------------------------------------ */

void rad_tune_free(RadTuneTable *t) {
    free(t->e);
    memset(t, 0, sizeof *t);
}

static int cmp_entry(const void *a, const void *b) {
    const RadTuneEntry *x = a, *y = b;
    if (x->op != y->op) return x->op < y->op ? -1 : 1;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Entries are kept sorted by (op, lo) as they are added: a file is written in that order. */
int rad_tune_add(RadTuneTable *t, const RadTuneEntry *en, RadErr *e) {
    const char *f = t->path[0] ? t->path : "tuning table";
    int at = t->n;
    while (at > 0 && cmp_entry(&t->e[at - 1], en) > 0) at--;
    for (int i = at - 1; i <= at; i++) { /* neighbours of the same op may not overlap */
        if (i < 0 || i >= t->n || t->e[i].op != en->op) continue;
        if (t->e[i].lo <= en->hi && en->lo <= t->e[i].hi) {
            if (en->line)
                return rad_err_set(e, RAD_E_FORMAT, "%s:%d: op %d rows %" PRId64 "..%" PRId64 " overlap line %d's rows %" PRId64
                                   "..%" PRId64 " (one entry per op and bucket)", f, en->line, en->op, en->lo, en->hi,
                                   t->e[i].line, t->e[i].lo, t->e[i].hi);
            return rad_err_set(e, RAD_E_ARG, "%s: op %d rows %" PRId64 "..%" PRId64 " overlap rows %" PRId64 "..%" PRId64
                               " already set", f, en->op, en->lo, en->hi, t->e[i].lo, t->e[i].hi);
        }
    }
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        RadTuneEntry *ne = realloc(t->e, (size_t)cap * sizeof *ne);
        if (!ne) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", f);
        t->e = ne, t->cap = cap;
    }
    memmove(&t->e[at + 1], &t->e[at], (size_t)(t->n - at) * sizeof *t->e);
    t->e[at] = *en;
    t->n++;
    return RAD_OK;
}

const RadTuneEntry *rad_tune_find(const RadTuneTable *t, int32_t op, int64_t lo, int64_t hi) {
    if (!t) return NULL;
    int a = 0, b = t->n; /* the first entry of op with lo > the bucket's lo, then one back */
    while (a < b) {
        const int m = (a + b) / 2;
        if (t->e[m].op < op || (t->e[m].op == op && t->e[m].lo <= lo)) a = m + 1;
        else b = m;
    }
    if (a == 0) return NULL;
    const RadTuneEntry *en = &t->e[a - 1];
    return en->op == op && en->lo <= lo && hi <= en->hi ? en : NULL;
}

uint64_t rad_tune_params_hash(const char *op, const RadParam *p, uint32_t n) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the op's text form: stable across builds */
    char buf[160];
#define MIX(s)                                                                                     \
    for (const unsigned char *q_ = (const unsigned char *)(s); *q_; q_++) h = (h ^ *q_) * 0x100000001b3ull; \
    h = (h ^ 0xff) * 0x100000001b3ull
    MIX(op);
    for (uint32_t i = 0; i < n; i++) {
        if (p[i].kind == RAD_PARAM_FLOAT) snprintf(buf, sizeof buf, "%s f %.17g", p[i].name ? p[i].name : "", p[i].f);
        else snprintf(buf, sizeof buf, "%s %d %" PRId64 " %" PRId64, p[i].name ? p[i].name : "", (int)p[i].kind, p[i].lo, p[i].hi);
        MIX(buf);
    }
#undef MIX
    return h;
}

/* ---- the CPU ---------------------------------------------------------------------------------- */

static void trim(char *s) {
    size_t l = strlen(s);
    while (l && (s[l - 1] == ' ' || s[l - 1] == '\t' || s[l - 1] == '\n' || s[l - 1] == '\r')) s[--l] = 0;
    size_t i = 0;
    while (s[i] == ' ' || s[i] == '\t') i++;
    memmove(s, s + i, l - i + 1);
}

/* A CPU model name may hold anything: keep printable ASCII, so the table line stays one line. */
static void clean(char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f) *s = '?';
}

void rad_tune_cpu(char *model, size_t model_n, char *flags, size_t flags_n) {
    snprintf(model, model_n, "unknown");
    snprintf(flags, flags_n, "-");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[8192], have[8192] = "";
    int got_model = 0, got_flags = 0;
    while ((!got_model || !got_flags) && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        *colon = 0;
        char *key = line, *val = colon + 1;
        trim(key);
        trim(val);
        if (!got_model && (strcmp(key, "model name") == 0 || strcmp(key, "Model") == 0) && *val) {
            clean(val);
            snprintf(model, model_n, "%s", val);
            got_model = 1;
        } else if (!got_flags && (strcmp(key, "flags") == 0 || strcmp(key, "Features") == 0)) {
            snprintf(have, sizeof have, " %s ", val);
            got_flags = 1;
        }
    }
    fclose(f);
    size_t k = 0;
    char want[] = RAD_TUNE_CPU_FLAGS, *save = NULL;
    for (char *w = strtok_r(want, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        char pat[64];
        snprintf(pat, sizeof pat, " %s ", w);
        if (!strstr(have, pat) || k + strlen(w) + 2 > flags_n) continue;
        k += (size_t)snprintf(flags + k, flags_n - k, "%s%s", k ? " " : "", w);
    }
    if (!k) snprintf(flags, flags_n, "-");
}

/* ---- comparing keys --------------------------------------------------------------------------- */

static void libs_str(const RadTuneKey *k, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < k->n_libs && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s %s", i ? ", " : "", k->libs[i].name, k->libs[i].version);
    if (!k->n_libs) snprintf(buf, n, "none");
}

int rad_tune_key_diff(const RadTuneKey *t, const RadTuneKey *h, char *why, size_t n) {
    if (t->container != h->container) {
        snprintf(why, n, "it was tuned for container %016" PRIx64 ", this model is %016" PRIx64, t->container, h->container);
        return 1;
    }
    int same = t->n_libs == h->n_libs;
    for (int i = 0; same && i < t->n_libs; i++)
        same = strcmp(t->libs[i].name, h->libs[i].name) == 0 && strcmp(t->libs[i].version, h->libs[i].version) == 0;
    if (!same) {
        char a[512], b[512];
        libs_str(t, a, sizeof a);
        libs_str(h, b, sizeof b);
        snprintf(why, n, "it was tuned with kernel libraries %s, this run has %s", a, b);
        return 1;
    }
    if (strcmp(t->cpu_model, h->cpu_model) != 0) {
        snprintf(why, n, "it was tuned on CPU '%s', this is '%s'", t->cpu_model, h->cpu_model);
        return 1;
    }
    if (strcmp(t->cpu_flags, h->cpu_flags) != 0) {
        snprintf(why, n, "it was tuned on a CPU with flags '%s', this one has '%s'", t->cpu_flags, h->cpu_flags);
        return 1;
    }
#define OPT(field, fmt, name)                                                                                        \
    if (t->field != h->field) {                                                                                      \
        snprintf(why, n, "it was tuned under " name "=" fmt ", this run has " name "=" fmt, t->field, h->field);     \
        return 1;                                                                                                    \
    }
    OPT(max_tok, "%u", "max_tok")
    /* max_seqs is recorded, not compared: it bounds only the logits ops' ranges, whose entries
     * the per-op check (name, parameter hash) catches, so the server's table serves `radiance -p` */
    OPT(ctx, "%u", "ctx")
    OPT(max_tolerance, "%g", "max_tolerance")
    OPT(deterministic, "%d", "deterministic")
    OPT(threads, "%u", "threads")
#undef OPT
    if (strcmp(t->kv_dtype, h->kv_dtype) != 0) {
        snprintf(why, n, "it was tuned under kv_dtype=%s, this run has kv_dtype=%s", t->kv_dtype, h->kv_dtype);
        return 1;
    }
    return 0;
}

/* ---- writing ---------------------------------------------------------------------------------- */

void rad_tune_write_key(const RadTuneKey *k, FILE *f) {
    fprintf(f, "radiance-tune %d\n", RAD_TUNE_VERSION);
    fprintf(f, "container %016" PRIx64 "\n", k->container);
    for (int i = 0; i < k->n_libs; i++) fprintf(f, "library %s %s\n", k->libs[i].name, k->libs[i].version[0] ? k->libs[i].version : "-");
    fprintf(f, "cpu_model %s\n", k->cpu_model[0] ? k->cpu_model : "unknown");
    fprintf(f, "cpu_flags %s\n", k->cpu_flags[0] ? k->cpu_flags : "-");
    fprintf(f, "options max_tok=%u max_seqs=%u ctx=%u max_tolerance=%.17g deterministic=%d threads=%u kv_dtype=%s\n", k->max_tok,
            k->max_seqs, k->ctx, k->max_tolerance, k->deterministic, k->threads, k->kv_dtype);
}

int rad_tune_write(const RadTuneTable *t, FILE *f, RadErr *e) {
    rad_tune_write_key(&t->key, f);
    for (int i = 0; i < t->n; i++) {
        const RadTuneEntry *x = &t->e[i];
        fprintf(f, "op index=%d name=%s params=%016" PRIx64 " rows=%" PRId64 "..%" PRId64 " lib=%s variant=%s knobs=", x->op, x->name,
                x->params, x->lo, x->hi, x->lib, x->variant);
        for (uint32_t j = 0; j < x->n_knobs; j++) fprintf(f, "%s%s:%" PRId64, j ? "," : "", x->knob[j], x->val[j]);
        fprintf(f, "%s ns=%" PRIu64 "\n", x->n_knobs ? "" : "-", x->ns);
    }
    fprintf(f, "end %d\n", t->n);
    if (fflush(f) || ferror(f)) return rad_err_set(e, RAD_E_IO, "%s: write failed: %s", t->path[0] ? t->path : "tuning table", strerror(errno));
    return RAD_OK;
}

int rad_tune_write_file(const RadTuneTable *t, const char *path, RadErr *e) {
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= sizeof tmp)
        return rad_err_set(e, RAD_E_ARG, "%s: path too long", path);
    int fd = mkstemp(tmp);
    if (fd < 0) return rad_err_set(e, RAD_E_IO, "%s: cannot create a temporary beside it: %s", path, strerror(errno));
    const mode_t um = umask(0);
    umask(um);
    (void)fchmod(fd, 0666 & ~um); /* a table is not a secret: the mode a plain file gets, not mkstemp's 0600 */
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlink(tmp);
        return rad_err_set(e, RAD_E_IO, "%s: %s", path, strerror(errno));
    }
    int rc = rad_tune_write(t, f, e);
    if (fclose(f) && !rc) rc = rad_err_set(e, RAD_E_IO, "%s: write failed: %s", path, strerror(errno));
    if (!rc && rename(tmp, path)) rc = rad_err_set(e, RAD_E_IO, "%s: cannot rename the temporary over it: %s", path, strerror(errno));
    if (rc) unlink(tmp);
    return rc;
}

/* ---- reading ---------------------------------------------------------------------------------- */

typedef struct P {
    const char *file;
    int line;
    RadErr *e;
} P;

#define FAIL(p, ...) fail_at(p, __VA_ARGS__)
__attribute__((format(printf, 2, 3))) static int fail_at(P *p, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rad_err_set(p->e, RAD_E_FORMAT, "%s:%d: %s", p->file, p->line, msg);
}

/* A whole number in [lo, hi] through rad_num (the message names the field and line). */
static int num_u64(P *p, const char *what, const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    RadErr ne = {0};
    if (rad_num_u64(what, s, lo, hi, out, &ne)) return FAIL(p, "%s", ne.msg);
    return RAD_OK;
}

/* Copies a value of `cls` (N_OP, N_LIB) into dst. */
static int name_val(P *p, const char *what, const char *s, int cls, char *dst) {
    if (!name_ok(s, strlen(s), cls))
        return FAIL(p, "%s '%.80s' is not a name (%s, 1..63 bytes)", what, s,
                    cls == N_OP ? "[a-z][a-z0-9_]*" : "[A-Za-z0-9_.-]");
    snprintf(dst, RAD_TUNE_NAME, "%s", s);
    return RAD_OK;
}

static int parse_knobs(P *p, char *s, RadTuneEntry *x) {
    if (strcmp(s, "-") == 0) return RAD_OK;
    char *save = NULL;
    for (char *item = strtok_r(s, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(item, ':');
        if (!colon) return FAIL(p, "knob '%.80s' is not NAME:VALUE", item);
        *colon = 0;
        if (x->n_knobs == RAD_KNOB_MAX) return FAIL(p, "more than %d knobs", RAD_KNOB_MAX);
        int rc = name_val(p, "knob name", item, N_OP, x->knob[x->n_knobs]);
        if (rc) return rc;
        for (uint32_t j = 0; j < x->n_knobs; j++)
            if (strcmp(x->knob[j], item) == 0) return FAIL(p, "knob '%s' is set twice", item);
        double v;
        RadErr ne = {0};
        char what[96];
        snprintf(what, sizeof what, "knob %s", item);
        if (rad_num_f64(what, colon + 1, -9007199254740992.0, 9007199254740992.0, RAD_NUM_WHOLE, &v, &ne)) return FAIL(p, "%s", ne.msg);
        x->val[x->n_knobs++] = (int64_t)v;
    }
    if (!x->n_knobs) return FAIL(p, "knobs= is empty (write knobs=- for none)");
    return RAD_OK;
}

/* "op index=3 name=gemm_nt params=HEX rows=LO..HI lib=ref variant=exact knobs=K:V,.. ns=N":
 * every key once, in any order; nothing else. */
static int parse_op(P *p, char *rest, RadTuneEntry *x) {
    static const char *const keys[] = {"index", "name", "params", "rows", "lib", "variant", "knobs", "ns"};
    enum { NK = 8 };
    int seen[NK] = {0};
    memset(x, 0, sizeof *x);
    x->line = p->line;
    char *save = NULL;
    int rc;
    for (char *tok = strtok_r(rest, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) return FAIL(p, "'%.80s' is not KEY=VALUE", tok);
        *eq = 0;
        const char *v = eq + 1;
        int k = 0;
        while (k < NK && strcmp(keys[k], tok) != 0) k++;
        if (k == NK) return FAIL(p, "unknown key '%.80s' in an op line (index name params rows lib variant knobs ns)", tok);
        if (seen[k]++) return FAIL(p, "key '%s' is given twice", tok);
        uint64_t u;
        switch (k) {
        case 0:
            if ((rc = num_u64(p, "index", v, 0, INT32_MAX, &u))) return rc;
            x->op = (int32_t)u;
            break;
        case 1: if ((rc = name_val(p, "op name", v, N_OP, x->name))) return rc; break;
        case 2: {
            if (strlen(v) != 16 || strspn(v, "0123456789abcdef") != 16) return FAIL(p, "params '%.80s' is not 16 lowercase hex digits", v);
            x->params = strtoull(v, NULL, 16);
            break;
        }
        case 3: {
            const char *dots = strstr(v, "..");
            if (!dots) return FAIL(p, "rows '%.80s' is not LO..HI", v);
            char lo[32];
            if ((size_t)(dots - v) >= sizeof lo) return FAIL(p, "rows '%.80s' is not LO..HI", v);
            memcpy(lo, v, (size_t)(dots - v));
            lo[dots - v] = 0;
            uint64_t a, b;
            if ((rc = num_u64(p, "rows", lo, 1, INT32_MAX, &a)) || (rc = num_u64(p, "rows", dots + 2, 1, INT32_MAX, &b))) return rc;
            if (a > b) return FAIL(p, "rows %" PRIu64 "..%" PRIu64 " is empty", a, b);
            x->lo = (int64_t)a, x->hi = (int64_t)b;
            break;
        }
        case 4: if ((rc = name_val(p, "lib", v, N_LIB, x->lib))) return rc; break;
        case 5: if ((rc = name_val(p, "variant", v, N_LIB, x->variant))) return rc; break;
        case 6: {
            char buf[MAX_LINE];
            snprintf(buf, sizeof buf, "%s", v);
            if ((rc = parse_knobs(p, buf, x))) return rc;
            break;
        }
        default:
            if ((rc = num_u64(p, "ns", v, 0, UINT64_MAX, &x->ns))) return rc;
            break;
        }
    }
    for (int k = 0; k < NK; k++)
        if (!seen[k]) return FAIL(p, "op line lacks key '%s'", keys[k]);
    return RAD_OK;
}

static int parse_options(P *p, char *rest, RadTuneKey *k) {
    static const char *const keys[] = {"max_tok", "max_seqs", "ctx", "max_tolerance", "deterministic", "threads", "kv_dtype"};
    enum { NK = 7 };
    int seen[NK] = {0};
    char *save = NULL;
    int rc;
    for (char *tok = strtok_r(rest, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) return FAIL(p, "'%.80s' is not KEY=VALUE", tok);
        *eq = 0;
        const char *v = eq + 1;
        int i = 0;
        while (i < NK && strcmp(keys[i], tok) != 0) i++;
        if (i == NK) return FAIL(p, "unknown option '%.80s' (max_tok max_seqs ctx max_tolerance deterministic threads kv_dtype)", tok);
        if (seen[i]++) return FAIL(p, "option '%s' is given twice", tok);
        uint64_t u = 0;
        RadErr ne = {0};
        switch (i) {
        case 3:
            if (rad_num_f64("max_tolerance", v, 0, 1e300, RAD_NUM_REAL, &k->max_tolerance, &ne)) return FAIL(p, "%s", ne.msg);
            break;
        case 4:
            if ((rc = num_u64(p, "deterministic", v, 0, 1, &u))) return rc;
            k->deterministic = (int)u;
            break;
        case 6:
            if (!name_ok(v, strlen(v), N_OP) || strlen(v) >= sizeof k->kv_dtype) return FAIL(p, "kv_dtype '%.80s' is not an encoding name", v);
            memcpy(k->kv_dtype, v, strlen(v) + 1);
            break;
        default:
            if ((rc = num_u64(p, keys[i], v, 1, UINT32_MAX, &u))) return rc;
            if (i == 0) k->max_tok = (uint32_t)u;
            else if (i == 1) k->max_seqs = (uint32_t)u;
            else if (i == 2) k->ctx = (uint32_t)u;
            else k->threads = (uint32_t)u;
        }
    }
    for (int i = 0; i < NK; i++)
        if (!seen[i]) return FAIL(p, "options lack '%s'", keys[i]);
    return RAD_OK;
}

#define BAD(...)                        \
    do {                                \
        rc = FAIL(&p, __VA_ARGS__);     \
        goto out;                       \
    } while (0)

int rad_tune_parse(const char *name, const char *text, size_t len, RadTuneTable *t, RadErr *e) {
    memset(t, 0, sizeof *t);
    snprintf(t->path, sizeof t->path, "%s", name);
    P p = {name, 0, e};
    enum { H_CONTAINER, H_CPU_MODEL, H_CPU_FLAGS, H_OPTIONS, NH };
    static const char *const hkeys[NH] = {"container", "cpu_model", "cpu_flags", "options"};
    int seen[NH] = {0}, n_ops = 0, ended = 0, rc = RAD_OK;
    size_t off = 0;
    char line[MAX_LINE + 2];
    while (off < len && !rc) {
        const char *nl = memchr(text + off, '\n', len - off);
        const size_t l = nl ? (size_t)(nl - (text + off)) : len - off;
        p.line++;
        if (l > MAX_LINE) BAD("line longer than %d bytes", MAX_LINE);
        memcpy(line, text + off, l);
        line[l] = 0;
        off += l + (nl != NULL);
        if (l && line[l - 1] == '\r') BAD("a carriage return (the file is LF-terminated)");
        for (size_t i = 0; i < l; i++)
            if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
                BAD("control byte 0x%02x at column %zu", (unsigned char)line[i], i + 1);
        if (p.line == 1) {
            int v = 0;
            char tail;
            if (sscanf(line, "radiance-tune %d%c", &v, &tail) != 1 || strncmp(line, "radiance-tune ", 14) != 0)
                BAD("not a tuning table (the first line is not 'radiance-tune %d')", RAD_TUNE_VERSION);
            if (v != RAD_TUNE_VERSION)
                BAD("tuning table version %d is not supported (this reader knows %d)", v, RAD_TUNE_VERSION);
            char want[32];
            snprintf(want, sizeof want, "radiance-tune %d", RAD_TUNE_VERSION);
            if (strcmp(line, want) != 0) BAD("the first line is not '%s'", want);
            continue;
        }
        if (!l || line[0] == '#') continue; /* blank lines and comments */
        if (ended) BAD("a line after 'end'");
        char *sp = strchr(line, ' ');
        if (!sp) BAD("'%.80s' has no value", line);
        *sp = 0;
        char *rest = sp + 1;
        if (strcmp(line, "op") == 0) {
            for (int h = 0; h < NH; h++)
                if (!seen[h]) BAD("an op line before the header's '%s'", hkeys[h]);
            if (!t->key.n_libs) BAD("an op line before any 'library'");
            RadTuneEntry x;
            if ((rc = parse_op(&p, rest, &x))) break;
            rc = rad_tune_add(t, &x, e);
            n_ops++;
            continue;
        }
        if (strcmp(line, "end") == 0) {
            uint64_t n;
            if ((rc = num_u64(&p, "end", rest, 0, INT32_MAX, &n))) break;
            if ((int64_t)n != n_ops)
                BAD("'end %" PRIu64 "' but the table has %d op lines (truncated or edited)", n, n_ops);
            ended = 1;
            continue;
        }
        if (n_ops) BAD("header key '%.40s' after the op lines", line);
        if (strcmp(line, "library") == 0) {
            char *vsp = strchr(rest, ' ');
            if (!vsp) BAD("library '%.80s' has no version (write '-' for none)", rest);
            *vsp = 0;
            if (t->key.n_libs == RAD_TUNE_MAX_LIBS) BAD("more than %d libraries", RAD_TUNE_MAX_LIBS);
            RadTuneLib *lb = &t->key.libs[t->key.n_libs];
            if ((rc = name_val(&p, "library", rest, N_LIB, lb->name))) break;
            for (int i = 0; i < t->key.n_libs; i++)
                if (strcmp(t->key.libs[i].name, lb->name) == 0) BAD("library '%s' is named twice", lb->name);
            if (!vsp[1] || strlen(vsp + 1) >= RAD_TUNE_NAME) BAD("library '%s': version is empty or too long", lb->name);
            snprintf(lb->version, sizeof lb->version, "%s", vsp + 1);
            t->key.n_libs++;
            continue;
        }
        int h = 0;
        while (h < NH && strcmp(hkeys[h], line) != 0) h++;
        if (h == NH) BAD("unknown key '%.80s' (container library cpu_model cpu_flags options op end)", line);
        if (seen[h]++) BAD("'%s' is given twice", hkeys[h]);
        if (h == H_CONTAINER) {
            if (strlen(rest) != 16 || strspn(rest, "0123456789abcdef") != 16)
                BAD("container '%.80s' is not 16 lowercase hex digits (rad-info's id)", rest);
            t->key.container = strtoull(rest, NULL, 16);
        } else if (h == H_CPU_MODEL) {
            if (strlen(rest) >= sizeof t->key.cpu_model) BAD("cpu_model is longer than %zu bytes", sizeof t->key.cpu_model - 1);
            snprintf(t->key.cpu_model, sizeof t->key.cpu_model, "%s", rest);
        } else if (h == H_CPU_FLAGS) {
            if (strlen(rest) >= sizeof t->key.cpu_flags) BAD("cpu_flags is longer than %zu bytes", sizeof t->key.cpu_flags - 1);
            snprintf(t->key.cpu_flags, sizeof t->key.cpu_flags, "%s", rest);
        } else {
            rc = parse_options(&p, rest, &t->key);
        }
    }
    if (!rc && p.line == 0) rc = rad_err_set(e, RAD_E_FORMAT, "%s: empty (not a tuning table)", name);
    else if (!rc && !ended) rc = rad_err_set(e, RAD_E_FORMAT, "%s:%d: truncated: the table ends without its 'end' line", name, p.line);
out:
    if (rc) rad_tune_free(t);
    return rc;
}
#undef BAD

int rad_tune_read(const char *path, RadTuneTable *t, RadErr *e) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) return rad_err_set(e, RAD_E_IO, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            if (cap >= ((size_t)256 << 20)) {
                free(buf);
                fclose(f);
                return rad_err_set(e, RAD_E_FORMAT, "%s: over 256 MiB (not a tuning table)", path);
            }
            cap = cap ? 2 * cap : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", path);
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    const int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return rad_err_set(e, RAD_E_IO, "%s: read failed", path);
    }
    int rc = rad_tune_parse(path, buf ? buf : "", n, t, e);
    free(buf);
    return rc;
}
