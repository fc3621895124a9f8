/* openai.c — request bodies in, response bodies out (openai.h). */
#include "openai.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int api_err(ApiErr *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return status;
}

static char *dump(json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

static json_t *err_obj(const ApiErr *e) {
    return json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", e->msg, "type", e->type ? e->type : "server_error",
                     "param", e->param[0] ? json_string(e->param) : json_null(), "code",
                     e->code ? json_string(e->code) : json_null());
}

char *api_err_body(const ApiErr *e) { return dump(err_obj(e)); }

/* ---- request parsing ---------------------------------------------------------------------- */

static int bad(ApiErr *e, const char *param, const char *fmt, const char *what) {
    return api_err(e, 400, "invalid_request_error", NULL, param, fmt, param, what);
}

/* Reads an optional number in [lo, hi]; 0 when absent or null. */
static int get_num(json_t *o, const char *key, double lo, double hi, double *out, int *given, ApiErr *e) {
    json_t *v = json_object_get(o, key);
    if (given) *given = 0;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return bad(e, key, "'%s' must be a number%s", "");
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) {
        char r[96];
        snprintf(r, sizeof r, " in [%g, %g]", lo, hi);
        return bad(e, key, "'%s' must be a number%s", r);
    }
    *out = x;
    if (given) *given = 1;
    return 0;
}

static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, int *given, ApiErr *e) {
    json_t *v = json_object_get(o, key);
    if (given) *given = 0;
    if (!v || json_is_null(v)) return 0;
    long long x;
    if (json_is_integer(v)) x = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15)
        x = (long long)json_real_value(v);
    else return bad(e, key, "'%s' must be an integer%s", "");
    if (x < lo || x > hi) {
        char r[96];
        snprintf(r, sizeof r, " in [%lld, %lld]", lo, hi);
        return bad(e, key, "'%s' must be an integer%s", r);
    }
    *out = x;
    if (given) *given = 1;
    return 0;
}

static int get_bool(json_t *o, const char *key, int *out, ApiErr *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return bad(e, key, "'%s' must be true or false%s", "");
    *out = json_is_true(v);
    return 0;
}

static int push_prompt(ApiReq *r, int32_t *ids, uint32_t n, ApiErr *e) {
    int32_t **p = realloc(r->prompt, (r->n_prompts + 1) * sizeof *p);
    uint32_t *np = p ? realloc(r->n_prompt, (r->n_prompts + 1) * sizeof *np) : NULL;
    if (p) r->prompt = p;
    if (np) r->n_prompt = np;
    if (!p || !np) {
        free(ids);
        return api_err(e, 500, "server_error", NULL, NULL, "out of memory reading the prompt");
    }
    r->prompt[r->n_prompts] = ids;
    r->n_prompt[r->n_prompts++] = n;
    return 0;
}

static int encode(const ApiCtx *cx, const char *text, size_t len, int add_special, const char *param, ApiReq *r, ApiErr *e) {
    int32_t *ids;
    size_t n;
    RadErr re = {0};
    if (rad_tok_encode(cx->tok, text, len, add_special, &ids, &n, &re))
        return api_err(e, 400, "invalid_request_error", NULL, param, "'%s' could not be tokenised: %s", param, re.msg);
    if (n > UINT32_MAX) return free(ids), bad(e, param, "'%s' is too long%s", "");
    return push_prompt(r, ids, (uint32_t)n, e);
}

static int ids_from_json(json_t *a, const ApiCtx *cx, const char *param, ApiReq *r, ApiErr *e) {
    size_t n = json_array_size(a);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return api_err(e, 500, "server_error", NULL, NULL, "out of memory reading the prompt");
    int32_t nv = rad_tok_n_vocab(cx->tok);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= nv) {
            free(ids);
            return api_err(e, 400, "invalid_request_error", NULL, param,
                           "'%s'[%zu] must be a token id in [0, %d)", param, i, (int)nv);
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    return push_prompt(r, ids, (uint32_t)n, e);
}

/* completions: a string, an array of strings, an array of token ids, or an array of arrays. */
static int parse_prompt(json_t *p, const ApiCtx *cx, ApiReq *r, ApiErr *e) {
    if (!p) return bad(e, "prompt", "'%s' is required%s", "");
    if (json_is_string(p)) return encode(cx, json_string_value(p), json_string_length(p), 1, "prompt", r, e);
    if (!json_is_array(p) || json_array_size(p) == 0)
        return bad(e, "prompt", "'%s' must be a string, an array of strings or an array of token ids%s", "");
    json_t *first = json_array_get(p, 0);
    if (json_is_integer(first)) return ids_from_json(p, cx, "prompt", r, e);
    for (size_t i = 0; i < json_array_size(p); i++) {
        json_t *v = json_array_get(p, i);
        int rc;
        if (json_is_string(v)) rc = encode(cx, json_string_value(v), json_string_length(v), 1, "prompt", r, e);
        else if (json_is_array(v)) rc = ids_from_json(v, cx, "prompt", r, e);
        else rc = bad(e, "prompt", "'%s' must be a string, an array of strings or an array of token ids%s", "");
        if (rc) return rc;
    }
    return 0;
}

static int parse_messages(json_t *m, const ApiCtx *cx, ApiReq *r, ApiErr *e) {
    if (!cx->chat)
        return api_err(e, 400, "invalid_request_error", NULL, "messages",
                       "this model has no chat format: use /v1/completions");
    RadChatMsgs msgs;
    RadErr re = {0};
    char param[64];
    if (rad_chat_msgs_from_json(m, &msgs, param, sizeof param, &re))
        return api_err(e, 400, "invalid_request_error", NULL, param, "%s", re.msg);
    char *text;
    size_t len;
    int add_special;
    unsigned flags = RAD_CHAT_GEN_PROMPT | (rad_tok_bos(cx->tok) >= 0 ? RAD_CHAT_TOK_HAS_BOS : 0);
    int rc = rad_chat_render(cx->chat, msgs.m, msgs.n, flags, &text, &len, &add_special, &re);
    rad_chat_msgs_free(&msgs);
    if (rc) return api_err(e, 400, "invalid_request_error", NULL, "messages", "%s", re.msg);
    r->in_reasoning = rad_chat_prompt_opens_reasoning(cx->chat, text, len);
    rc = encode(cx, text, len, add_special, "messages", r, e);
    free(text);
    return rc;
}

static int parse_stop(json_t *s, ApiReq *r, ApiErr *e) {
    if (!s || json_is_null(s)) return 0;
    size_t n = json_is_string(s) ? 1 : json_is_array(s) ? json_array_size(s) : 0;
    if (!json_is_string(s) && !json_is_array(s)) return bad(e, "stop", "'%s' must be a string or an array of strings%s", "");
    if (n > API_MAX_STOP) {
        char w[64];
        snprintf(w, sizeof w, " (at most %d)", API_MAX_STOP);
        return bad(e, "stop", "'%s' has too many strings%s", w);
    }
    r->stop = calloc(n ? n : 1, sizeof *r->stop);
    if (!r->stop) return api_err(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_is_string(s) ? s : json_array_get(s, i);
        if (!json_is_string(v)) return bad(e, "stop", "'%s' must be a string or an array of strings%s", "");
        size_t len = json_string_length(v);
        if (len == 0 || len > API_MAX_STOP_LEN) {
            char w[64];
            snprintf(w, sizeof w, " (1 to %d bytes)", API_MAX_STOP_LEN);
            return bad(e, "stop", "'%s' holds an empty or too long string%s", w);
        }
        if (!(r->stop[r->n_stop++] = strdup(json_string_value(v)))) return api_err(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    return 0;
}

static int parse_bias(json_t *b, const ApiCtx *cx, ApiReq *r, ApiErr *e) {
    if (!b || json_is_null(b)) return 0;
    if (!json_is_object(b)) return bad(e, "logit_bias", "'%s' must be an object of token id -> bias%s", "");
    size_t n = json_object_size(b);
    if (n > 1024) return bad(e, "logit_bias", "'%s' has more than 1024 entries%s", "");
    r->bias = calloc(n ? n : 1, sizeof *r->bias);
    if (!r->bias) return api_err(e, 500, "server_error", NULL, NULL, "out of memory");
    const char *k;
    json_t *v;
    json_object_foreach(b, k, v) {
        char *end;
        long id = strtol(k, &end, 10);
        if (!*k || *end || id < 0 || id >= rad_tok_n_vocab(cx->tok))
            return api_err(e, 400, "invalid_request_error", NULL, "logit_bias", "'logit_bias' key '%.32s' is not a token id in [0, %d)",
                           k, (int)rad_tok_n_vocab(cx->tok));
        if (!json_is_number(v) || !(json_number_value(v) >= -100 && json_number_value(v) <= 100))
            return api_err(e, 400, "invalid_request_error", NULL, "logit_bias", "'logit_bias' value for '%.32s' must be a number in [-100, 100]", k);
        r->bias[r->sp.n_bias++] = (RadLogitBias){(int32_t)id, (float)json_number_value(v)};
    }
    r->sp.bias = r->bias;
    return 0;
}

static int parse_body(ApiKind kind, json_t *j, const ApiCtx *cx, ApiReq *r, ApiErr *e) {
    if (!json_is_object(j)) return api_err(e, 400, "invalid_request_error", NULL, NULL, "the request body must be a JSON object");
    json_t *model = json_object_get(j, "model");
    if (model && !json_is_null(model) && !json_is_string(model)) return bad(e, "model", "'%s' must be a string%s", "");
    if (json_is_string(model) && strcmp(json_string_value(model), cx->model))
        return api_err(e, 404, "invalid_request_error", "model_not_found", "model",
                       "The model '%.200s' does not exist; this server serves '%.200s'", json_string_value(model), cx->model);
    int rc;
    double d;
    long long ll;
    int given;
    r->sp = cx->defaults;
    r->sp.bias = NULL;
    r->sp.n_bias = 0;
    r->n = 1;
    if ((rc = get_bool(j, "stream", &r->stream, e))) return rc;
    json_t *so = json_object_get(j, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return bad(e, "stream_options", "'%s' must be an object%s", "");
        if ((rc = get_bool(so, "include_usage", &r->include_usage, e))) return rc;
    }
    if ((rc = get_num(j, "temperature", 0, 100, &d, &given, e))) return rc;
    if (given) r->sp.temperature = (float)d;
    if ((rc = get_num(j, "top_p", 0, 1, &d, &given, e))) return rc;
    if (given) {
        if (d <= 0) return bad(e, "top_p", "'%s' must be in (0, 1]%s", "");
        r->sp.top_p = (float)d;
    }
    if ((rc = get_int(j, "top_k", -1, 1 << 30, &ll, &given, e))) return rc;
    if (given) r->sp.top_k = ll < 0 ? 0 : (int32_t)ll;
    if ((rc = get_num(j, "min_p", 0, 1, &d, &given, e))) return rc;
    if (given) r->sp.min_p = (float)d;
    if ((rc = get_num(j, "presence_penalty", -2, 2, &d, &given, e))) return rc;
    if (given) r->sp.presence_penalty = (float)d;
    if ((rc = get_num(j, "frequency_penalty", -2, 2, &d, &given, e))) return rc;
    if (given) r->sp.frequency_penalty = (float)d;
    if ((rc = get_num(j, "repetition_penalty", 0, 100, &d, &given, e))) return rc;
    if (given) {
        if (d <= 0) return bad(e, "repetition_penalty", "'%s' must be > 0%s", "");
        r->sp.repetition_penalty = (float)d;
    }
    if ((rc = get_int(j, "seed", INT64_MIN, INT64_MAX, &ll, &given, e))) return rc;
    r->sp.seed = given ? (uint64_t)ll : cx->defaults.seed;
    r->have_seed = given;
    if ((rc = get_int(j, "n", 1, API_MAX_N, &ll, &given, e))) return rc;
    if (given) r->n = (uint32_t)ll;
    const char *mt = kind == API_CHAT && json_object_get(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if ((rc = get_int(j, mt, 1, UINT32_MAX, &ll, &given, e))) return rc;
    r->max_tokens = given ? (uint32_t)ll : kind == API_COMPLETIONS ? 16 : 0; /* OpenAI's defaults */
    if (given && ll > cx->max_ctx)
        return api_err(e, 400, "invalid_request_error", "context_length_exceeded", mt,
                       "'%s' is %lld, more than this model's context of %u tokens", mt, ll, cx->max_ctx);
    if ((rc = parse_stop(json_object_get(j, "stop"), r, e))) return rc;
    if ((rc = parse_bias(json_object_get(j, "logit_bias"), cx, r, e))) return rc;
    if (kind == API_CHAT) {
        if ((rc = get_bool(j, "logprobs", &r->logprobs, e))) return rc;
        if ((rc = get_int(j, "top_logprobs", 0, RAD_SCHED_MAX_TOP, &ll, &given, e))) return rc;
        if (given) {
            if (!r->logprobs) return bad(e, "top_logprobs", "'%s' needs 'logprobs': true%s", "");
            r->top_logprobs = (uint32_t)ll;
        }
        rc = parse_messages(json_object_get(j, "messages"), cx, r, e);
    } else {
        if ((rc = get_int(j, "logprobs", 0, RAD_SCHED_MAX_TOP, &ll, &given, e))) return rc;
        if (given) r->logprobs = 1, r->top_logprobs = (uint32_t)ll;
        rc = parse_prompt(json_object_get(j, "prompt"), cx, r, e);
    }
    if (rc) return rc;
    if ((uint64_t)r->n * r->n_prompts > API_MAX_N) {
        char w[64];
        snprintf(w, sizeof w, " (n x prompts is at most %d)", API_MAX_N);
        return bad(e, "n", "'%s' asks too many choices%s", w);
    }
    const char *pp = kind == API_CHAT ? "messages" : "prompt";
    for (uint32_t i = 0; i < r->n_prompts; i++) {
        uint32_t np = r->n_prompt[i];
        if (np == 0) return bad(e, pp, "'%s' encodes to no tokens%s", "");
        if (np >= cx->max_ctx)
            return api_err(e, 400, "invalid_request_error", "context_length_exceeded", pp,
                           "This model's maximum context length is %u tokens; the prompt has %u, leaving none to generate",
                           cx->max_ctx, np);
        if (r->max_tokens && (uint64_t)np + r->max_tokens > cx->max_ctx)
            return api_err(e, 400, "invalid_request_error", "context_length_exceeded", mt,
                           "This model's maximum context length is %u tokens; you asked %u (%u in the prompt, %u to generate)",
                           cx->max_ctx, np + r->max_tokens, np, r->max_tokens);
    }
    return 0;
}

int api_parse(ApiKind kind, const char *body, size_t len, const ApiCtx *cx, ApiReq *out, ApiErr *e) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    json_error_t je;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!j) return api_err(e, 400, "invalid_request_error", NULL, NULL, "the body is not valid JSON: %s (line %d, column %d)", je.text,
                           je.line, je.column);
    int rc = parse_body(kind, j, cx, out, e);
    json_decref(j);
    if (rc) api_req_free(out);
    return rc;
}

void api_req_free(ApiReq *r) {
    for (uint32_t i = 0; i < r->n_prompts; i++) free(r->prompt[i]);
    free(r->prompt);
    free(r->n_prompt);
    for (uint32_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->bias);
    memset(r, 0, sizeof *r);
}

/* ---- responses ---------------------------------------------------------------------------- */

/* A token's text for logprobs: its bytes, as valid UTF-8 (ill-formed bytes as U+FFFD). */
static json_t *tok_str(const RadTok *t, int32_t id, json_t **bytes) {
    char buf[256], *s = NULL;
    int n = rad_tok_piece(t, id, buf, sizeof buf);
    if (n < 0) n = 0;
    if (n > (int)sizeof buf) n = (int)sizeof buf;
    if (bytes) {
        *bytes = json_array();
        for (int i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((unsigned char)buf[i]));
    }
    size_t len;
    if (rad_utf8_lossy(buf, (size_t)n, &s, &len, NULL)) return json_string("");
    json_t *j = json_stringn(s, len);
    free(s);
    return j ? j : json_string("");
}

static json_t *chat_logprobs(const ApiCtx *cx, const ApiLp *lp, size_t n) {
    json_t *content = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *bytes, *top = json_array();
        for (uint32_t k = 0; k < lp[i].n_top; k++) {
            json_t *tb;
            json_t *ts = tok_str(cx->tok, lp[i].top[k].token, &tb);
            json_array_append_new(top, json_pack("{s:o,s:f,s:o}", "token", ts, "logprob", (double)lp[i].top[k].logprob, "bytes", tb));
        }
        json_t *ts = tok_str(cx->tok, lp[i].token, &bytes);
        json_array_append_new(content, json_pack("{s:o,s:f,s:o,s:o}", "token", ts, "logprob", (double)lp[i].logprob, "bytes",
                                                 bytes, "top_logprobs", top));
    }
    return json_pack("{s:o}", "content", content);
}

static json_t *completion_logprobs(const ApiCtx *cx, const ApiLp *lp, size_t n) {
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(toks, tok_str(cx->tok, lp[i].token, NULL));
        json_array_append_new(lps, json_real(lp[i].logprob));
        json_t *top = json_object();
        for (uint32_t k = 0; k < lp[i].n_top; k++) {
            json_t *ts = tok_str(cx->tok, lp[i].top[k].token, NULL);
            json_object_set_new(top, json_string_value(ts), json_real(lp[i].top[k].logprob));
            json_decref(ts);
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer((json_int_t)lp[i].text_offset));
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops, "text_offset", offs);
}

/* Model text as a JSON string; ill-formed UTF-8 (a byte-level model may write some) as U+FFFD. */
static json_t *jstr(const char *s, size_t n) {
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    if (j) return j;
    char *t;
    size_t len;
    if (rad_utf8_lossy(s, n, &t, &len, NULL)) return json_string("");
    j = json_stringn(t, len);
    free(t);
    return j ? j : json_string("");
}

static json_t *usage_obj(const ApiUsage *u) {
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt, "completion_tokens", (json_int_t)u->completion,
                     "total_tokens", (json_int_t)u->prompt + u->completion, "prompt_tokens_details", "cached_tokens",
                     (json_int_t)u->cached);
}

static json_t *choice_obj(const ApiReq *r, const ApiCtx *cx, const ApiChoice *c, int stream, int role_only) {
    json_t *o = json_pack("{s:I}", "index", (json_int_t)c->index);
    json_t *lp = json_null();
    if (r->logprobs && c->n_lp) lp = r->kind == API_CHAT ? chat_logprobs(cx, c->lp, c->n_lp) : completion_logprobs(cx, c->lp, c->n_lp);
    if (r->kind == API_COMPLETIONS) {
        json_object_set_new(o, "text", jstr(c->text, c->len));
    } else {
        json_t *m = json_object();
        if (!stream || role_only) json_object_set_new(m, "role", json_string("assistant"));
        if (!stream || role_only || c->len) json_object_set_new(m, "content", jstr(c->text, c->len));
        if (c->reasoning && (c->reasoning_len || !stream)) json_object_set_new(m, "reasoning_content", jstr(c->reasoning, c->reasoning_len));
        json_object_set_new(o, stream ? "delta" : "message", m);
    }
    json_object_set_new(o, "logprobs", lp);
    json_object_set_new(o, "finish_reason", c->finish ? json_string(c->finish) : json_null());
    return o;
}

static json_t *envelope(const ApiReq *r, const ApiCtx *cx, const char *id, long created, int stream) {
    const char *obj = r->kind == API_COMPLETIONS ? "text_completion" : stream ? "chat.completion.chunk" : "chat.completion";
    return json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", id, "object", obj, "created", (json_int_t)created, "model", cx->model,
                     "system_fingerprint", "radiance");
}

char *api_response(const ApiReq *r, const ApiCtx *cx, const char *id, long created, const ApiChoice *ch, uint32_t n,
                   const ApiUsage *u) {
    json_t *o = envelope(r, cx, id, created, 0), *cs = json_array();
    for (uint32_t i = 0; i < n; i++) json_array_append_new(cs, choice_obj(r, cx, &ch[i], 0, 0));
    json_object_set_new(o, "choices", cs);
    json_object_set_new(o, "usage", usage_obj(u));
    return dump(o);
}

static char *sse(json_t *o) {
    char *s = dump(o);
    if (!s) return NULL;
    size_t n = strlen(s);
    char *out = malloc(n + 9);
    if (out) memcpy(out, "data: ", 6), memcpy(out + 6, s, n), memcpy(out + 6 + n, "\n\n", 3);
    free(s);
    return out;
}

char *api_chunk(const ApiReq *r, const ApiCtx *cx, const char *id, long created, const ApiChoice *c, int role_only) {
    json_t *o = envelope(r, cx, id, created, 1);
    json_object_set_new(o, "choices", json_pack("[o]", choice_obj(r, cx, c, 1, role_only)));
    return sse(o);
}

char *api_usage_chunk(const ApiReq *r, const ApiCtx *cx, const char *id, long created, const ApiUsage *u) {
    json_t *o = envelope(r, cx, id, created, 1);
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", usage_obj(u));
    return sse(o);
}

char *api_stream_error(const ApiErr *e) { return sse(err_obj(e)); }

static json_t *model_obj(const ApiCtx *cx, long created) {
    return json_pack("{s:s,s:s,s:I,s:s,s:I}", "id", cx->model, "object", "model", "created", (json_int_t)created, "owned_by", "radiance",
                     "max_model_len", (json_int_t)cx->max_ctx);
}

char *api_models(const ApiCtx *cx, long created) {
    return dump(json_pack("{s:s,s:[o]}", "object", "list", "data", model_obj(cx, created)));
}

char *api_model(const ApiCtx *cx, long created) { return dump(model_obj(cx, created)); }

static json_t *load_obj(const char *body, size_t len, ApiErr *e) {
    json_error_t je;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!j) api_err(e, 400, "invalid_request_error", NULL, NULL, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line,
                    je.column);
    else if (!json_is_object(j)) {
        api_err(e, 400, "invalid_request_error", NULL, NULL, "the request body must be a JSON object");
        json_decref(j), j = NULL;
    }
    return j;
}

char *api_tokenize(const char *body, size_t len, const ApiCtx *cx, ApiErr *e) {
    json_t *j = load_obj(body, len, e);
    if (!j) return NULL;
    ApiReq r;
    memset(&r, 0, sizeof r);
    int add_special = 1, rc = get_bool(j, "add_special_tokens", &add_special, e);
    json_t *p = json_object_get(j, "prompt"), *m = json_object_get(j, "messages");
    if (!rc && p && json_is_string(p)) rc = encode(cx, json_string_value(p), json_string_length(p), add_special, "prompt", &r, e);
    else if (!rc && !p && m) rc = parse_messages(m, cx, &r, e);
    else if (!rc) rc = bad(e, "prompt", "'%s' must be a string (or give 'messages')%s", "");
    char *out = NULL;
    if (!rc) {
        json_t *toks = json_array();
        for (uint32_t i = 0; i < r.n_prompt[0]; i++) json_array_append_new(toks, json_integer(r.prompt[0][i]));
        out = dump(json_pack("{s:o,s:I,s:I}", "tokens", toks, "count", (json_int_t)r.n_prompt[0], "max_model_len", (json_int_t)cx->max_ctx));
        if (!out) api_err(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    api_req_free(&r);
    json_decref(j);
    return out;
}

char *api_detokenize(const char *body, size_t len, const ApiCtx *cx, ApiErr *e) {
    json_t *j = load_obj(body, len, e);
    if (!j) return NULL;
    ApiReq r;
    memset(&r, 0, sizeof r);
    json_t *t = json_object_get(j, "tokens");
    int rc = json_is_array(t) ? ids_from_json(t, cx, "tokens", &r, e) : bad(e, "tokens", "'%s' must be an array of token ids%s", "");
    char *out = NULL;
    if (!rc) {
        char *text;
        size_t n;
        RadErr re = {0};
        if (rad_tok_decode(cx->tok, r.prompt[0], r.n_prompt[0], RAD_TOK_LOSSY, &text, &n, &re)) {
            api_err(e, 400, "invalid_request_error", NULL, "tokens", "%s", re.msg);
        } else {
            out = dump(json_pack("{s:s%}", "prompt", text, n));
            free(text);
            if (!out) api_err(e, 500, "server_error", NULL, NULL, "out of memory");
        }
    }
    api_req_free(&r);
    json_decref(j);
    return out;
}
