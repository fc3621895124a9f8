/* Speculative decoding outside the scheduler: prompt lookup and the draft model's engine. See rad_spec.h. */
#include "libcommon/runtime/rad_spec.h"

#include <stdio.h>
#include <string.h>

uint32_t rad_spec_ngram(const int32_t *tok, uint32_t n, uint32_t nmax, uint32_t nmin, uint32_t k, int32_t *out) {
    if (!k || nmin < 1) return 0;
    for (uint32_t len = nmax; len >= nmin; len--) {
        if (len >= n) continue; /* an earlier place needs a token before the suffix */
        const int32_t *suf = tok + n - len;
        /* the latest start i < n - len whose len tokens equal the suffix (at least one follows) */
        for (uint32_t i = n - len; i-- > 0;) {
            if (tok[i] != suf[0] || memcmp(tok + i, suf, len * sizeof *tok)) continue;
            uint32_t m = n - (i + len);
            if (m > k) m = k;
            memcpy(out, tok + i + len, m * sizeof *out);
            return m;
        }
    }
    return 0;
}

int rad_spec_check_vocab(const RadTok *target, const RadTok *draft, const char *what, RadErr *e) {
    const int32_t nt = rad_tok_n_vocab(target), nd = rad_tok_n_vocab(draft);
    if (nt != nd)
        return rad_err_set(e, RAD_E_ARG, "%s: the draft model's vocabulary has %d tokens, the target's %d: a drafter needs the "
                           "target's tokenizer", what, nd, nt);
    if (rad_tok_eos(target) != rad_tok_eos(draft) || rad_tok_eot(target) != rad_tok_eot(draft))
        return rad_err_set(e, RAD_E_ARG, "%s: the draft model's end tokens (eos %d, eot %d) are not the target's (eos %d, eot %d)",
                           what, rad_tok_eos(draft), rad_tok_eot(draft), rad_tok_eos(target), rad_tok_eot(target));
    char a[256], b[256];
    for (int32_t id = 0; id < nt; id++) {
        int la = rad_tok_piece(target, id, a, sizeof a), lb = rad_tok_piece(draft, id, b, sizeof b);
        int same = la == lb && (la <= 0 || memcmp(a, b, (size_t)(la < (int)sizeof a ? la : (int)sizeof a)) == 0) &&
                   rad_tok_is_special(target, id) == rad_tok_is_special(draft, id);
        if (!same)
            return rad_err_set(e, RAD_E_ARG, "%s: token %d differs between the draft model's vocabulary and the target's: a "
                               "drafter needs the target's tokenizer", what, id);
    }
    return RAD_OK;
}

int rad_spec_open_draft(const RadEngineOpts *to, const RadEngine *en, const RadTok *tok, const char *path, RadEngine **out,
                        RadErr *e) {
    *out = NULL;
    const RadEngineLimits lim = rad_engine_limits(en);
    RadEngineOpts d = {.model = path, .plugin_dirs = to->plugin_dirs, .n_plugin_dirs = to->n_plugin_dirs, .kernels = to->kernels,
                       .n_threads = lim.n_threads, .max_tok = lim.max_tok, .max_seqs = lim.max_seqs, .max_ctx = lim.max_ctx,
                       .kv_dtype = to->kv_quant ? RAD_F32 : to->kv_dtype, .deterministic = to->deterministic,
                       .max_tolerance = to->max_tolerance, .mmap_weights = to->mmap_weights, .no_verify = to->no_verify,
                       .no_repack = to->no_repack, .scope = "draft"};
    RadEngine *de = NULL;
    RadErr oe = {0};
    if (rad_engine_open(&de, &d, &oe)) return rad_err_set(e, oe.code, "--draft: %s", oe.msg);
    RadTok *dt = NULL;
    int rc = rad_tok_init(&dt, rad_engine_tok_data(de), &oe);
    if (rc) rc = rad_err_set(e, oe.code, "--draft %s: %s", path, oe.msg);
    else {
        char what[600];
        snprintf(what, sizeof what, "--draft %s", path);
        rc = rad_spec_check_vocab(tok, dt, what, e);
    }
    rad_tok_free(dt);
    if (rc) return rad_engine_close(de), rc;
    *out = de;
    return RAD_OK;
}
