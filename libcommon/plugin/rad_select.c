/* The kernel selector (rad_select.h). */
#include "libcommon/plugin/rad_select.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/plugin/rad_tune.h"

static const RadKernelLib *lib_at(const RadSelectOpts *o, int i) {
    const RadPlugin *p = &o->libs->p[i];
    return p->info && p->info->kind == RAD_PLUGIN_KERNELS ? p->lib : NULL;
}

static const char *lib_name(const RadSelectOpts *o, int i) { return o->libs->p[i].info->name; }

static double max_tol(const RadSelectOpts *o) { return o->max_tolerance > 0 ? o->max_tolerance : RAD_SELECT_DEFAULT_TOLERANCE; }

static int covers(const RadKernel *k, int64_t n) { return n >= k->n_min && (!k->n_max || n <= k->n_max); }

static const char *enc_name(RadEnc e) { return rad_enc_info(e) ? rad_enc_info(e)->name : "?"; }

enum { FIT = 0, NO_ENC = 1, TOO_LOOSE = 2, NO_WINDOW = 3, NOT_EXACT = 4 };

/* An op whose `exact` parameter is 1 (all_reduce: a message under tp_wire_min_bytes, or any
 * message when the wire may not be lossy) is served by bitwise kernels only. */
static int op_exact(const RadSelectOp *op) {
    for (uint32_t p = 0; p < op->n_params; p++)
        if (op->params[p].kind == RAD_PARAM_INT && strcmp(op->params[p].name, "exact") == 0) return op->params[p].lo == 1;
    return 0;
}

/* attn_paged's `window` (0: full attention; a plugin that omits it asks 0). */
static int64_t op_window(const RadSelectOp *op) {
    if (strcmp(op->op, "attn_paged") != 0) return 0;
    for (uint32_t p = 0; p < op->n_params; p++)
        if (op->params[p].kind == RAD_PARAM_INT && strcmp(op->params[p].name, "window") == 0) return op->params[p].lo;
    return 0;
}

/* Whether the kernel serves a sliding window (RadKernel.attn_window, ABI 1.4; 0 before). */
static int serves_window(const RadKernel *k) {
    return k->struct_size >= offsetof(RadKernel, attn_window) + sizeof k->attn_window && k->attn_window == 1;
}

/* Whether k (named op->op) can serve op at all: its layout takes every present weight's
 * encoding, its stated tolerance is within the options', and an attention with a window is
 * one it serves. *bad: the first refused encoding. */
static int fits(const RadSelectOpts *o, const RadSelectOp *op, const RadKernel *k, RadEnc *bad) {
    for (uint32_t j = 0; j < op->n_w; j++) {
        RadEnc e = op->w_enc[j];
        if (e != RAD_ENC_COUNT && !(k->weight_encs & RAD_ENC_BIT(e))) return *bad = e, NO_ENC;
    }
    if (op_window(op) != 0 && !serves_window(k)) return NO_WINDOW;
    if (op_exact(op) && k->exactness != RAD_EXACT_BITWISE) return NOT_EXACT;
    if (k->exactness != RAD_EXACT_BITWISE && k->tolerance > max_tol(o)) return TOO_LOOSE;
    return FIT;
}

/* Preference order is pass, then library (the options' order), then the library's table order.
 * Deterministic mode takes batch-invariant kernels on the first pass and the rest on the second. */
static int passes(const RadSelectOpts *o) { return o->deterministic ? 2 : 1; }
static int offered(const RadSelectOpts *o, const RadKernel *k, int pass) {
    return !o->deterministic || (pass == 0) == (k->batch_invariant != 0);
}

#define EACH_KERNEL(o, opname, pass, li, k)                                                  \
    for (int pass = 0; pass < passes(o); pass++)                                             \
        for (int li = 0; (o)->libs && li < (o)->libs->n; li++)                               \
            for (uint32_t j_ = 0, n_ = lib_at((o), li) ? lib_at((o), li)->n_kernels : 0; j_ < n_; j_++) \
                for (const RadKernel *k = rad_kernel_at(lib_at((o), li), j_); k; k = NULL)   \
                    if (strcmp(k->op, (opname)) == 0 && offered((o), k, pass))

/* Rule 1: the table's entry for (op, bucket), when it names a kernel valid under these options;
 * else NULL with tu->note saying why the entry was skipped. */
static const RadKernel *tuned(const RadSelectOpts *o, const RadSelectOp *op, int64_t lo, int64_t hi, int *lib, RadSelectTune *tu) {
    const RadTuneEntry *te = rad_tune_find(o->tune, op->index1 - 1, lo, hi);
    if (!te) return NULL;
    char *nb = tu->note;
    const size_t nn = sizeof tu->note;
    int n = snprintf(nb, nn, "table line %d (%s:%s) skipped: ", te->line, te->lib, te->variant);
    nb += n, n = (int)nn - n;
    if (strcmp(te->name, op->op) != 0) return snprintf(nb, (size_t)n, "op %d is now '%s', not '%s'", op->index1 - 1, op->op, te->name), NULL;
    if (te->params != rad_tune_params_hash(op->op, op->params, op->n_params))
        return snprintf(nb, (size_t)n, "the op's parameters changed"), NULL;
    int li = -1;
    for (int i = 0; o->libs && i < o->libs->n && li < 0; i++)
        if (lib_at(o, i) && strcmp(lib_name(o, i), te->lib) == 0) li = i;
    if (li < 0) return snprintf(nb, (size_t)n, "no kernel library '%s' is selected", te->lib), NULL;
    const RadKernel *k = NULL;
    for (uint32_t j = 0; j < lib_at(o, li)->n_kernels && !k; j++) {
        const RadKernel *c = rad_kernel_at(lib_at(o, li), j);
        if (strcmp(c->op, op->op) == 0 && strcmp(c->variant, te->variant) == 0) k = c;
    }
    if (!k) return snprintf(nb, (size_t)n, "library '%s' has no kernel %s:%s", te->lib, op->op, te->variant), NULL;
    RadEnc bad = RAD_ENC_COUNT;
    const int f = fits(o, op, k, &bad);
    if (f == NO_ENC) return snprintf(nb, (size_t)n, "it does not take weight encoding %s", enc_name(bad)), NULL;
    if (f == TOO_LOOSE) return snprintf(nb, (size_t)n, "its tolerance %g is looser than the max tolerance %g", k->tolerance, max_tol(o)), NULL;
    if (f == NO_WINDOW) return snprintf(nb, (size_t)n, "it does not serve a sliding window"), NULL;
    if (f == NOT_EXACT) return snprintf(nb, (size_t)n, "the op asks exact = 1 and the kernel is not bitwise"), NULL;
    if (!covers(k, lo) || !covers(k, hi)) return snprintf(nb, (size_t)n, "it does not cover rows %" PRId64 "..%" PRId64, lo, hi), NULL;
    if (o->deterministic && !k->batch_invariant) return snprintf(nb, (size_t)n, "it is not batch-invariant (--deterministic)"), NULL;
    const uint32_t nk = rad_kernel_n_knobs(k);
    for (uint32_t i = 0; i < nk; i++) tu->knobs[i] = rad_kernel_knob(k, i)->def;
    for (uint32_t j = 0; j < te->n_knobs; j++) {
        uint32_t i = 0;
        while (i < nk && strcmp(rad_kernel_knob(k, i)->name, te->knob[j]) != 0) i++;
        if (i == nk) return snprintf(nb, (size_t)n, "the kernel has no knob '%s'", te->knob[j]), NULL;
        const RadKnob *kn = rad_kernel_knob(k, i);
        uint32_t v = 0;
        while (v < kn->n_values && kn->values[v] != te->val[j]) v++;
        if (v == kn->n_values) return snprintf(nb, (size_t)n, "%" PRId64 " is not a value of knob '%s'", te->val[j], te->knob[j]), NULL;
        tu->knobs[i] = te->val[j];
    }
    tu->n_knobs = te->n_knobs ? nk : 0; /* an entry that sets none leaves the kernel its defaults */
    tu->line = te->line;
    tu->note[0] = 0;
    if (lib) *lib = li;
    return k;
}

const RadKernel *rad_select_kernel_tuned(const RadSelectOpts *o, const RadSelectOp *op, int64_t lo, int64_t hi, int *lib,
                                         RadSelectTune *tu, char *why_buf, size_t why_n) {
    RadSelectTune scratch;
    if (!tu) tu = &scratch;
    tu->line = 0, tu->n_knobs = 0, tu->note[0] = 0;
    if (o->tune && op->index1 > 0) {
        const RadKernel *k = tuned(o, op, lo, hi, lib, tu);
        if (k) return k;
    }
    RadEnc bad;
    EACH_KERNEL(o, op->op, pass, li, k) {
        if (fits(o, op, k, &bad) == FIT && covers(k, lo) && covers(k, hi)) {
            if (lib) *lib = li;
            return k;
        }
    }
    if (lib) *lib = -1;
    if (!why_buf || !why_n) return NULL;
    /* the reason: the first filter that left nothing */
    int named = 0, enc_ok = 0, win_ok = 0, exact_ok = 0, tol_ok = 0, loose_lib = -1;
    const RadKernel *loose = NULL;
    RadEnc first_bad = RAD_ENC_COUNT;
    for (int li = 0; o->libs && li < o->libs->n; li++) {
        const RadKernelLib *l = lib_at(o, li);
        for (uint32_t j = 0; l && j < l->n_kernels; j++) {
            const RadKernel *k = rad_kernel_at(l, j);
            if (strcmp(k->op, op->op) != 0) continue;
            named++;
            bad = RAD_ENC_COUNT;
            int f = fits(o, op, k, &bad);
            if (f == NO_ENC && first_bad == RAD_ENC_COUNT) first_bad = bad;
            enc_ok += f != NO_ENC;
            win_ok += f != NO_ENC && f != NO_WINDOW;
            exact_ok += f != NO_ENC && f != NO_WINDOW && f != NOT_EXACT;
            tol_ok += f == FIT;
            if (f == TOO_LOOSE && !loose) loose = k, loose_lib = li;
        }
    }
    if (!named) snprintf(why_buf, why_n, "no library defines this op");
    else if (!enc_ok) snprintf(why_buf, why_n, "no kernel accepts weight encoding %s", enc_name(first_bad));
    else if (!win_ok) snprintf(why_buf, why_n, "no kernel serves a sliding window (window %" PRId64 ")", op_window(op));
    else if (!exact_ok) snprintf(why_buf, why_n, "exact = 1 and no kernel of it is bitwise");
    else if (!tol_ok)
        snprintf(why_buf, why_n, "every kernel that takes its weights states a tolerance looser than the max tolerance %g (%s:%s: %g)",
                 max_tol(o), lib_name(o, loose_lib), loose->variant, loose->tolerance);
    else snprintf(why_buf, why_n, "no kernel covers rows %" PRId64 "..%" PRId64, lo, hi);
    return NULL;
}

const RadKernel *rad_select_kernel(const RadSelectOpts *o, const RadSelectOp *op, int64_t lo, int64_t hi, int *lib,
                                   char *why_buf, size_t why_n) {
    return rad_select_kernel_tuned(o, op, lo, hi, lib, NULL, why_buf, why_n);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void rad_select_table_free(RadSelectTable *t) {
    free(t->k), free(t->k_lib), free(t->lo), free(t->pick), free(t->pick_lib);
    free(t->tune_line), free(t->knobs), free(t->n_knobs), free(t->tune_note);
    memset(t, 0, sizeof *t);
}

int rad_select_table(const RadSelectOpts *o, const RadSelectOp *op, RadSelectTable *t) {
    memset(t, 0, sizeof *t);
    t->range_lo = t->range_hi = 1;
    int chunk = 0; /* the range is a sequence chunk: the core cuts steps where the kernels' extents end */
    for (uint32_t p = 0; p < op->n_params; p++)
        if (op->params[p].kind == RAD_PARAM_RANGE)
            t->range_lo = op->params[p].lo < 1 ? 1 : op->params[p].lo, t->range_hi = op->params[p].hi,
            chunk = op->params[p].role == RAD_PROLE_SEQ_CHUNK;
    const int64_t lo = t->range_lo, hi = t->range_hi;
    /* the candidates: every kernel that fits, however many variants a library lists */
    int cap = 0;
    RadEnc bad;
    EACH_KERNEL(o, op->op, pass, li, k) {
        if (fits(o, op, k, &bad) != FIT) continue;
        if (t->n == cap) {
            cap = cap ? 2 * cap : 8;
            const RadKernel **nk = realloc(t->k, (size_t)cap * sizeof *nk);
            if (nk) t->k = nk;
            int *nl = realloc(t->k_lib, (size_t)cap * sizeof *nl);
            if (nl) t->k_lib = nl;
            if (!nk || !nl) return rad_select_table_free(t), RAD_E_NOMEM;
        }
        t->k[t->n] = k;
        t->k_lib[t->n++] = li;
    }
    if (!t->n) { /* nothing to cut: the reason is the kernel-level one */
        rad_select_kernel(o, op, lo, hi, NULL, t->why, sizeof t->why);
        return RAD_OK;
    }
    int64_t *cut = malloc((2 * (size_t)t->n + 65) * sizeof *cut);
    if (!cut) return rad_select_table_free(t), RAD_E_NOMEM;
    int nc = 0;
    cut[nc++] = lo;
    for (int64_t p2 = 2; p2 <= hi && nc < 64; p2 *= 2) /* powers of two: where a tuning table may differ */
        if (p2 > lo) cut[nc++] = p2;
    for (int i = 0; i < t->n; i++) {
        if (t->k[i]->n_min > lo && t->k[i]->n_min <= hi) cut[nc++] = t->k[i]->n_min;
        if (t->k[i]->n_max && t->k[i]->n_max >= lo && t->k[i]->n_max < hi) cut[nc++] = t->k[i]->n_max + 1;
    }
    qsort(cut, (size_t)nc, sizeof *cut, cmp_i64);
    t->lo = malloc((size_t)nc * sizeof *t->lo);
    t->pick = malloc((size_t)nc * sizeof *t->pick);
    t->pick_lib = malloc((size_t)nc * sizeof *t->pick_lib);
    if (!t->lo || !t->pick || !t->pick_lib) return free(cut), rad_select_table_free(t), RAD_E_NOMEM;
    if (o->tune && op->index1 > 0) {
        t->tune_line = calloc((size_t)nc, sizeof *t->tune_line);
        t->knobs = calloc((size_t)nc * RAD_KNOB_MAX, sizeof *t->knobs);
        t->n_knobs = calloc((size_t)nc, sizeof *t->n_knobs);
        t->tune_note = calloc((size_t)nc, sizeof *t->tune_note);
        if (!t->tune_line || !t->knobs || !t->n_knobs || !t->tune_note) return free(cut), rad_select_table_free(t), RAD_E_NOMEM;
    }
    t->served = 1;
    int prefix = 0;            /* buckets served from the first on, and where they end */
    int64_t prefix_end = lo - 1;
    for (int i = 0; i < nc; i++) {
        if (t->n_buckets && t->lo[t->n_buckets - 1] == cut[i]) continue;
        int j = i + 1;
        while (j < nc && cut[j] == cut[i]) j++;
        const int64_t end = j < nc ? cut[j] - 1 : hi;
        char why[160];
        const int b = t->n_buckets++;
        t->lo[b] = cut[i];
        RadSelectTune tu;
        t->pick[b] = rad_select_kernel_tuned(o, op, cut[i], end, &t->pick_lib[b], &tu, why, sizeof why);
        if (t->tune_line) {
            t->tune_line[b] = tu.line;
            t->n_knobs[b] = tu.n_knobs;
            memcpy(&t->knobs[(size_t)b * RAD_KNOB_MAX], tu.knobs, tu.n_knobs * sizeof *tu.knobs);
            memcpy(t->tune_note[b], tu.note, sizeof tu.note);
        }
        if (t->pick[b] && prefix == b) prefix = b + 1, prefix_end = end;
        if (!t->pick[b] && t->served) {
            t->served = 0;
            snprintf(t->why, sizeof t->why, "no selected kernel serves %" PRId64 "..%" PRId64 " rows of its range [%" PRId64
                     ", %" PRId64 "]", cut[i], end, lo, hi);
        }
    }
    free(cut);
    if (!t->served && chunk && prefix) { /* served from lo up: the range ends there, and steps are cut at it */
        t->served = 1, t->n_buckets = prefix, t->range_hi = prefix_end;
        snprintf(t->why, sizeof t->why, "each bucket: the first candidate that takes the weights and covers its rows; a "
                 "sequence chunk, cut at %" PRId64 " rows of the declared %" PRId64 " (the kernels' extent)", prefix_end, hi);
    } else if (t->served) {
        snprintf(t->why, sizeof t->why, "each bucket: the first candidate whose layout takes the weights' encodings and whose "
                                        "extent covers its rows");
    }
    return RAD_OK;
}

int rad_select_declared(const RadSelectOpts *o, const char *op) {
    for (int i = 0; o && o->libs && i < o->libs->n; i++) {
        const RadKernelLib *l = lib_at(o, i);
        for (uint32_t k = 0; l && k < l->n_kernels; k++)
            if (strcmp(rad_kernel_at(l, k)->op, op) == 0) return 1;
    }
    return 0;
}

int rad_select_enc_refusers(const RadSelectOpts *o, const char *op, RadEnc enc, char *buf, size_t n) {
    size_t k = 0;
    int count = 0;
    if (n) buf[0] = 0;
    for (int i = 0; o && o->libs && i < o->libs->n; i++) {
        const RadKernelLib *l = lib_at(o, i);
        for (uint32_t x = 0; l && x < l->n_kernels; x++) {
            const RadKernel *kr = rad_kernel_at(l, x);
            if (strcmp(kr->op, op) != 0 || (kr->weight_encs & RAD_ENC_BIT(enc))) continue;
            count++;
            if (k < n) k += (size_t)snprintf(buf + k, n - k, "%s%s:%s", k ? ", " : "", lib_name(o, i), kr->variant);
        }
    }
    return count;
}

uint32_t rad_select_kv_block_size(const RadSelectOpts *o, uint32_t max_tok, uint32_t window) {
    const RadParam p[2] = {RAD_RANGE("M", 1, max_tok ? max_tok : 1), RAD_INT("window", window)};
    const RadSelectOp attn = {.op = "attn_paged", .params = p, .n_params = 2};
    const RadKernel *k = o ? rad_select_kernel(o, &attn, 1, 1, NULL, NULL, 0) : NULL;
    return k && k->kv_block_size ? k->kv_block_size : RAD_SELECT_DEFAULT_KV_BLOCK;
}

int rad_select_check_kv(const RadKernel *k, const char *lib, const char *group, uint32_t block_size, RadDType kv_dtype,
                        RadKvQuant kv_quant, char *buf, size_t n) {
    if (k->kv_block_size && k->kv_block_size != block_size) {
        snprintf(buf, n, "kernel %s/%s/%s: kv_block_size %u but group '%s' uses %u", lib, k->op, k->variant,
                 k->kv_block_size, group, block_size);
        return RAD_E_UNSUPPORTED;
    }
    /* kv_encs and kvq_ok came after the first RadKernel: read them only where the library's has them */
    const int has_encs = k->struct_size >= offsetof(RadKernel, kv_encs) + sizeof k->kv_encs;
    const int has_kvq = k->struct_size >= offsetof(RadKernel, kvq_ok) + sizeof k->kvq_ok;
    const uint64_t encs = has_encs && k->kv_encs ? k->kv_encs : RAD_ENC_PLAIN_FLOATS;
    if ((unsigned)kv_dtype >= RAD_ENC_COUNT || !(encs & RAD_ENC_BIT(kv_dtype))) {
        snprintf(buf, n, "kernel %s/%s/%s: kv_encs lack %s but group '%s' stores %s", lib, k->op, k->variant,
                 enc_name((RadEnc)kv_dtype), group, enc_name((RadEnc)kv_dtype));
        return RAD_E_UNSUPPORTED;
    }
    if (kv_quant != RAD_KVQ_NONE && !(has_kvq && (k->kvq_ok & (1u << kv_quant)))) {
        static const char *kvq[] = {"none", "fp8_v4", "fp8_k6v4"};
        snprintf(buf, n, "kernel %s/%s/%s: kvq_ok lacks %s but group '%s' uses that narrow layout", lib, k->op, k->variant,
                 (unsigned)kv_quant < 3 ? kvq[kv_quant] : "?", group);
        return RAD_E_UNSUPPORTED;
    }
    return RAD_OK;
}

int rad_select_tolerance(int fast, double given, double *out) {
    if (fast && given && given != RAD_SELECT_FAST_TOLERANCE) return 0;
    *out = given ? given : fast ? RAD_SELECT_FAST_TOLERANCE : RAD_SELECT_DEFAULT_TOLERANCE;
    return 1;
}
