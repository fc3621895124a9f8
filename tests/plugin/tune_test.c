/* The tuning table's format (docs/TUNE.md): what the writer writes the reader reads back equal,
 * and a truncated, hand-edited or inconsistent file is refused with one line naming the line;
 * keys that differ are named. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcommon/plugin/rad_tune.h"

static void sample(RadTuneTable *t) {
    memset(t, 0, sizeof *t);
    snprintf(t->path, sizeof t->path, "m.tune");
    RadTuneKey *k = &t->key;
    k->container = 0x1451a89276aa6cf4ull;
    k->n_libs = 2;
    snprintf(k->libs[0].name, sizeof k->libs[0].name, "ref");
    snprintf(k->libs[0].version, sizeof k->libs[0].version, "0.1.0");
    snprintf(k->libs[1].name, sizeof k->libs[1].name, "kern_test");
    snprintf(k->libs[1].version, sizeof k->libs[1].version, "-");
    snprintf(k->cpu_model, sizeof k->cpu_model, "AMD EPYC 7B13 64-Core Processor");
    snprintf(k->cpu_flags, sizeof k->cpu_flags, "avx f16c fma avx2");
    k->max_tok = 512, k->max_seqs = 16, k->ctx = 8192, k->max_tolerance = 0.02, k->deterministic = 1, k->threads = 2;
    snprintf(k->kv_dtype, sizeof k->kv_dtype, "f16");
    RadErr e = {0};
    RadTuneEntry x = {.op = 7, .params = 0x0123456789abcdefull, .lo = 2, .hi = 3, .ns = 12345};
    snprintf(x.name, sizeof x.name, "gemm_nt");
    snprintf(x.lib, sizeof x.lib, "ref");
    snprintf(x.variant, sizeof x.variant, "exact");
    x.n_knobs = 2;
    snprintf(x.knob[0], sizeof x.knob[0], "threads");
    x.val[0] = 2;
    snprintf(x.knob[1], sizeof x.knob[1], "prefetch");
    x.val[1] = 4096;
    cr_assert_eq(rad_tune_add(t, &x, &e), RAD_OK, "%s", e.msg);
    x.lo = x.hi = 1, x.n_knobs = 0, x.ns = 0;
    cr_assert_eq(rad_tune_add(t, &x, &e), RAD_OK, "%s", e.msg);
    x.op = 3, x.lo = 1, x.hi = 512, x.n_knobs = 1, x.val[0] = -5;
    snprintf(x.name, sizeof x.name, "attn_paged");
    cr_assert_eq(rad_tune_add(t, &x, &e), RAD_OK, "%s", e.msg);
}

static char *text_of(const RadTuneTable *t) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    RadErr e = {0};
    cr_assert_eq(rad_tune_write(t, f, &e), RAD_OK, "%s", e.msg);
    fclose(f);
    return buf;
}

/* Parses text; on failure returns the message (static), else NULL. */
static const char *parse(const char *text, RadTuneTable *t) {
    static RadErr e;
    memset(&e, 0, sizeof e);
    int rc = rad_tune_parse("m.tune", text, strlen(text), t, &e);
    if (rc) {
        cr_assert_null(strchr(e.msg, '\n'), "one line: %s", e.msg);
        cr_assert(strncmp(e.msg, "m.tune", 6) == 0, "names the file: %s", e.msg);
        return e.msg;
    }
    return NULL;
}

Test(tune, roundtrip) {
    RadTuneTable t, u;
    sample(&t);
    char *a = text_of(&t);
    const char *err = parse(a, &u);
    cr_assert_null(err, "%s\n%s", err, a);
    cr_assert_eq(memcmp(&t.key, &u.key, sizeof t.key), 0, "the key reads back equal");
    cr_assert_eq(u.n, 3);
    for (int i = 0; i < 3; i++) {
        const RadTuneEntry *x = &u.e[i], *y = &t.e[i];
        cr_assert_eq(x->line, 8 + i, "entries know their line");
        cr_assert(x->op == y->op && !strcmp(x->name, y->name) && x->params == y->params && x->lo == y->lo && x->hi == y->hi &&
                      !strcmp(x->lib, y->lib) && !strcmp(x->variant, y->variant) && x->ns == y->ns && x->n_knobs == y->n_knobs,
                  "entry %d reads back equal", i);
        for (uint32_t j = 0; j < x->n_knobs; j++)
            cr_assert(!strcmp(x->knob[j], y->knob[j]) && x->val[j] == y->val[j], "entry %d knob %u", i, j);
    }
    cr_assert_eq(u.e[0].op, 3, "sorted by op");
    char *b = text_of(&u);
    cr_assert_str_eq(a, b, "written again: the same bytes");
    const RadTuneEntry *f = rad_tune_find(&u, 7, 2, 2);
    cr_assert(f && f->lo == 2 && f->n_knobs == 2);
    cr_assert_null(rad_tune_find(&u, 7, 1, 2), "no entry covers rows 1..2");
    cr_assert_null(rad_tune_find(&u, 8, 1, 1));
    free(a), free(b);
    rad_tune_free(&t), rad_tune_free(&u);
}

Test(tune, file_roundtrip) {
    RadTuneTable t, u;
    sample(&t);
    char path[64];
    snprintf(path, sizeof path, "/tmp/rad-tune-%d.tune", (int)getpid());
    RadErr e = {0};
    cr_assert_eq(rad_tune_write_file(&t, path, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_tune_read(path, &u, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(u.n, t.n);
    cr_assert_eq(rad_tune_key_diff(&t.key, &u.key, e.msg, sizeof e.msg), 0);
    unlink(path);
    rad_tune_free(&u); /* a read zeroes its table first */
    cr_assert_neq(rad_tune_read(path, &u, &e), RAD_OK);
    cr_assert(strstr(e.msg, path), "%s", e.msg);
    rad_tune_free(&t), rad_tune_free(&u);
}

/* Cut at every byte: every prefix but the whole file (and the whole less its final newline) is
 * refused, each with a line number. */
Test(tune, truncated) {
    RadTuneTable t, u;
    sample(&t);
    char *a = text_of(&t);
    const size_t n = strlen(a);
    for (size_t cut = 0; cut + 1 < n; cut++) {
        char *p = strndup(a, cut);
        const char *err = parse(p, &u);
        cr_assert_not_null(err, "a table cut at byte %zu of %zu was accepted", cut, n);
        if (cut) cr_assert(strstr(err, "m.tune:"), "names the line: %s", err);
        free(p);
    }
    char *p = strndup(a, n - 1); /* the last newline only */
    cr_assert_null(parse(p, &u));
    rad_tune_free(&u);
    free(p);
    /* the whole last op line gone, end intact: the count catches it */
    char *last = strstr(a, "op index=7 name=gemm_nt params=0123456789abcdef rows=2..3");
    cr_assert_not_null(last);
    char *nl = strchr(last, '\n');
    memmove(last, nl + 1, strlen(nl + 1) + 1);
    const char *err = parse(a, &u);
    cr_assert(err && strstr(err, "m.tune:10: 'end 3' but the table has 2 op lines"), "%s", err);
    free(a);
    rad_tune_free(&t);
}

/* One edit each; the message names its line and what is wrong. */
Test(tune, hand_edited) {
    RadTuneTable t, u;
    sample(&t);
    char *a = text_of(&t);
    static const struct {
        const char *from, *to, *want;
    } cases[] = {
        {"radiance-tune 1", "radiance-tune 2", "m.tune:1: tuning table version 2 is not supported"},
        {"radiance-tune 1", "radiance-tuning 1", "m.tune:1: not a tuning table"},
        {"lib=ref variant=exact knobs=-", "lyb=ref variant=exact knobs=-", "m.tune:9: unknown key 'lyb' in an op line"},
        {"index=3", "index=x3", "m.tune:8: index x3"},
        {"index=3", "index=3 index=4", "m.tune:8: key 'index' is given twice"},
        {"rows=1..512", "rows=9..2", "m.tune:8: rows 9..2 is empty"},
        {"rows=1..512", "rows=1-512", "m.tune:8: rows '1-512' is not LO..HI"},
        {"ns=12345", "ns=1.5", "m.tune:10: ns 1.5"},
        {"knobs=threads:-5", "knobs=threads:five", "m.tune:8: knob threads five"},
        {"knobs=threads:-5", "knobs=threads:1,threads:2", "m.tune:8: knob 'threads' is set twice"},
        {"knobs=threads:-5", "knobs=", "m.tune:8: knobs= is empty"},
        {"name=attn_paged", "name=Attn", "m.tune:8: op name 'Attn' is not a name"},
        {" ns=0\n", " ns=0 extra=1\n", "m.tune:8: unknown key 'extra'"},
        {"params=0123456789abcdef rows=1..1", "params=0123456789ABCDEF rows=1..1", "m.tune:9: params"},
        {"rows=2..3", "rows=1..3", "m.tune:10: op 7 rows 1..3 overlap line 9's rows 1..1"},
        {"container 1451a89276aa6cf4", "container 1451a89276aa6cf", "m.tune:2: container"},
        {"cpu_model", "cpu_modl", "m.tune:5: unknown key 'cpu_modl'"},
        {"max_seqs=16", "max_seqs=16 max_seqs=2", "m.tune:7: option 'max_seqs' is given twice"},
        {"max_seqs=16", "max_sequences=16", "m.tune:7: unknown option 'max_sequences'"},
        {" threads=2", "", "m.tune:7: options lack 'threads'"},
        {"max_tolerance=0.02", "max_tolerance=nan", "m.tune:7: max_tolerance nan"},
        {"library kern_test -", "library ref 0.2", "m.tune:4: library 'ref' is named twice"},
        {"end 3", "end 3\nop index=9", "m.tune:12: a line after 'end'"},
        {"end 3", "end three", "m.tune:11: end three"},
        {"cpu_flags", "op index=1\ncpu_flags", "m.tune:6: an op line before the header's 'cpu_flags'"},
        {"deterministic=1", "deterministic=1\t", "m.tune:7: control byte 0x09"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *at = strstr(a, cases[i].from);
        cr_assert_not_null(at, "case %zu: '%s' not in the table", i, cases[i].from);
        size_t pre = (size_t)(at - a), fl = strlen(cases[i].from), tl = strlen(cases[i].to);
        char *b = malloc(strlen(a) - fl + tl + 1);
        memcpy(b, a, pre);
        memcpy(b + pre, cases[i].to, tl);
        strcpy(b + pre + tl, at + fl);
        const char *err = parse(b, &u);
        cr_assert_not_null(err, "case %zu accepted:\n%s", i, b);
        cr_assert(strstr(err, cases[i].want), "case %zu: got '%s', want '%s'", i, err, cases[i].want);
        free(b);
    }
    /* comments and blank lines are allowed */
    char *c = malloc(strlen(a) + 64);
    char *nl = strchr(a, '\n');
    memcpy(c, a, (size_t)(nl - a) + 1);
    strcpy(c + (nl - a) + 1, "# tuned by hand\n\n");
    strcat(c, nl + 1);
    cr_assert_null(parse(c, &u));
    rad_tune_free(&u);
    free(c);
    free(a);
    rad_tune_free(&t);
}

Test(tune, key_diff) {
    RadTuneTable t;
    sample(&t);
    RadTuneKey h = t.key;
    char why[600];
    cr_assert_eq(rad_tune_key_diff(&t.key, &h, why, sizeof why), 0);
    h.container ^= 1;
    cr_assert_eq(rad_tune_key_diff(&t.key, &h, why, sizeof why), 1);
    cr_assert(strstr(why, "container 1451a89276aa6cf4, this model is 1451a89276aa6cf5"), "%s", why);
    h = t.key;
    snprintf(h.libs[0].version, sizeof h.libs[0].version, "0.2.0");
    cr_assert_eq(rad_tune_key_diff(&t.key, &h, why, sizeof why), 1);
    cr_assert(strstr(why, "kernel libraries ref 0.1.0, kern_test -, this run has ref 0.2.0, kern_test -"), "%s", why);
    h = t.key;
    h.n_libs = 1;
    cr_assert_eq(rad_tune_key_diff(&t.key, &h, why, sizeof why), 1);
    h = t.key;
    snprintf(h.cpu_model, sizeof h.cpu_model, "Intel Xeon");
    cr_assert_eq(rad_tune_key_diff(&t.key, &h, why, sizeof why), 1);
    cr_assert(strstr(why, "CPU 'AMD EPYC 7B13 64-Core Processor', this is 'Intel Xeon'"), "%s", why);
    h = t.key;
    snprintf(h.cpu_flags, sizeof h.cpu_flags, "avx f16c fma avx2 avx512f");
    cr_assert_eq(rad_tune_key_diff(&t.key, &h, why, sizeof why), 1);
    h = t.key;
    h.max_tok = 256;
    cr_assert_eq(rad_tune_key_diff(&t.key, &h, why, sizeof why), 1);
    cr_assert(strstr(why, "max_tok=512, this run has max_tok=256"), "%s", why);
    h = t.key;
    h.deterministic = 0;
    cr_assert_eq(rad_tune_key_diff(&t.key, &h, why, sizeof why), 1);
    h = t.key;
    snprintf(h.kv_dtype, sizeof h.kv_dtype, "f32");
    cr_assert_eq(rad_tune_key_diff(&t.key, &h, why, sizeof why), 1);
    cr_assert(strstr(why, "kv_dtype=f16, this run has kv_dtype=f32"), "%s", why);
    rad_tune_free(&t);
}

Test(tune, cpu_and_params_hash) {
    char model[128], flags[256];
    rad_tune_cpu(model, sizeof model, flags, sizeof flags);
    cr_assert(model[0] && flags[0]);
    cr_assert_null(strchr(model, '\n'));
    const RadParam a[] = {RAD_INT("N", 576), RAD_INT("K", 1536), RAD_RANGE("M", 1, 512)};
    const RadParam b[] = {RAD_INT("N", 576), RAD_INT("K", 1536), RAD_RANGE("M", 1, 256)};
    cr_assert_eq(rad_tune_params_hash("gemm_nt", a, 3), rad_tune_params_hash("gemm_nt", a, 3));
    cr_assert_neq(rad_tune_params_hash("gemm_nt", a, 3), rad_tune_params_hash("gemm_nt", b, 3));
    cr_assert_neq(rad_tune_params_hash("gemm_nt", a, 3), rad_tune_params_hash("logits_gemm", a, 3));
}
