/* openai.c — request bodies in, response bodies out (openai.h). */
#include "openai.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/base/rad_num.h"
#include "libcommon/text/rad_grammar.h"

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

/* A message as a JSON string. It may quote a client's bytes, or be cut inside a UTF-8 sequence
 * by its buffer: ill-formed UTF-8 becomes U+FFFD, so an error body is never lost (it would be a
 * 500 "out of memory"). */
static json_t *msg_str(const char *s) {
    json_t *j = json_string(s);
    char *t;
    size_t n;
    if (j || rad_utf8_lossy(s, strlen(s), &t, &n, NULL)) return j;
    j = json_stringn(t, n);
    free(t);
    return j;
}

static json_t *err_obj(const ApiErr *e) {
    return json_pack("{s:{s:o,s:s,s:o,s:o}}", "error", "message", msg_str(e->msg), "type", e->type ? e->type : "server_error",
                     "param", e->param[0] ? msg_str(e->param) : json_null(), "code",
                     e->code ? json_string(e->code) : json_null());
}

char *api_err_body(const ApiErr *e) { return dump(err_obj(e)); }

/* ---- request parsing ---------------------------------------------------------------------- */

static int bad(ApiErr *e, const char *param, const char *fmt, const char *what) {
    return api_err(e, 400, "invalid_request_error", NULL, param, fmt, param, what);
}

/* A number the parser could not hold (an integer past 64 bits, a real past a double) stands in
 * the tree as +-DBL_MAX, out of every range (load_json). */
static const char *num_shown(double v, char *buf, size_t cap) {
    if (fabs(v) == DBL_MAX) snprintf(buf, cap, "%s", v > 0 ? "(a number too large to read)" : "(a number too negative to read)");
    else snprintf(buf, cap, "%.17g", v);
    return buf;
}

/* One strict check for every numeric field: finite, in range, whole where it must be, the field
 * named (rad_num_check decides; the message shows the range as the field's type reads it). */
static int num_bad(ApiErr *e, const char *key, const char *shown, const char *range, int whole) {
    return api_err(e, 400, "invalid_request_error", NULL, key, "'%s' %s: expected a %s in %s", key, shown, whole ? "whole number" : "number",
                   range);
}

/* Reads an optional number in [lo, hi]; 0 when absent or null. */
static int get_num(json_t *o, const char *key, double lo, double hi, double *out, int *given, ApiErr *e) {
    json_t *v = json_object_get(o, key);
    if (given) *given = 0;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return bad(e, key, "'%s' must be a number%s", "");
    double x = json_number_value(v);
    RadErr re = {0};
    if (rad_num_check(key, x, lo, hi, RAD_NUM_REAL, &re)) {
        char shown[64], range[96];
        snprintf(range, sizeof range, "[%g, %g]", lo, hi);
        return num_bad(e, key, num_shown(x, shown, sizeof shown), range, 0);
    }
    *out = x;
    if (given) *given = 1;
    return 0;
}

/* Reads an optional whole number in [lo, hi]: a JSON integer (compared as one: a double holds
 * only 53 bits), or a real with no fraction (7.0). */
static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, int *given, ApiErr *e) {
    json_t *v = json_object_get(o, key);
    if (given) *given = 0;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return bad(e, key, "'%s' must be an integer%s", "");
    char shown[64], range[96];
    snprintf(range, sizeof range, "[%lld, %lld]", lo, hi);
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
        snprintf(shown, sizeof shown, "%lld", x);
    } else {
        double d = json_real_value(v);
        RadErr re = {0};
        /* the bounds as doubles may round outwards: the cast is guarded, then x is checked exactly */
        if (rad_num_check(key, d, (double)lo, (double)hi, RAD_NUM_WHOLE, &re) || !(d >= -0x1p63 && d < 0x1p63))
            return num_bad(e, key, num_shown(d, shown, sizeof shown), range, 1);
        x = (long long)d;
        num_shown(d, shown, sizeof shown);
    }
    if (x < lo || x > hi) return num_bad(e, key, shown, range, 1);
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

/* Compiles schema once to check it (the server compiles one grammar per choice): 0, or a 400
 * whose param is where (`at`, then the keyword's path inside the schema). Takes schema's reference
 * on failure. */
static int check_schema(json_t *schema, const char *at, ApiErr *e) {
    RadGrammar *g = NULL;
    RadErr re = {0};
    char path[200] = "";
    const int rc = rad_grammar_from_schema(schema, &g, path, sizeof path, &re);
    rad_grammar_free(g);
    if (!rc) return 0;
    json_decref(schema);
    char param[256];
    snprintf(param, sizeof param, "%s%s%s", at, path[0] ? "." : "", path);
    if (rc == RAD_E_NOMEM) return api_err(e, 500, "server_error", NULL, NULL, "out of memory compiling '%s'", at);
    return api_err(e, 400, "invalid_request_error", NULL, param, "'%s': %s", at, re.msg);
}

/* response_format: {"type": "text"}, {"type": "json_object"} or {"type": "json_schema",
 * "json_schema": {"name", "schema", "strict"}} (docs/SERVER.md "Structured outputs"). The schema is
 * compiled here once to check it (the server compiles one grammar per choice). */
static int parse_format(json_t *j, ApiReq *r, ApiErr *e) {
    json_t *f = json_object_get(j, "response_format");
    if (!f || json_is_null(f)) return 0;
    const char *type = json_string_value(json_object_get(f, "type"));
    if (!json_is_object(f) || !type)
        return bad(e, "response_format", "'%s' must be {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}%s", "");
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) return r->json_mode = 1, 0;
    if (strcmp(type, "json_schema"))
        return bad(e, "response_format", "'%s' type must be \"text\", \"json_object\" or \"json_schema\"%s", "");
    json_t *js = json_object_get(f, "json_schema"), *schema = json_object_get(js, "schema");
    const char *name = json_string_value(json_object_get(js, "name"));
    if (!json_is_object(js) || !name || !*name)
        return bad(e, "response_format.json_schema", "'%s' must be an object with a 'name' and a 'schema'%s", "");
    if (!schema) schema = json_true(); /* OpenAI: no schema is any JSON */
    else json_incref(schema);
    if (!json_is_object(schema) && !json_is_boolean(schema)) {
        json_decref(schema);
        return bad(e, "response_format.json_schema.schema", "'%s' must be a JSON Schema object%s", "");
    }
    int rc = check_schema(schema, "response_format.json_schema.schema", e);
    if (rc) return rc;
    r->schema = schema;
    r->json_mode = 1;
    return 0;
}

/* A function name as OpenAI takes it: [a-zA-Z0-9_-]{1,64}. */
static int tool_name_ok(const char *s) {
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') || (s[n] >= '0' && s[n] <= '9') || s[n] == '_' || s[n] == '-'))
            return 0;
    return n >= 1 && n <= 64;
}

/* tools, tool_choice and parallel_tool_calls (docs/SERVER.md "Tool calls"). */
static int parse_tools(json_t *j, const ApiCtx *cx, ApiReq *r, ApiErr *e) {
    json_t *t = json_object_get(j, "tools"), *tc = json_object_get(j, "tool_choice");
    int rc;
    r->parallel_tool_calls = 1;
    if ((rc = get_bool(j, "parallel_tool_calls", &r->parallel_tool_calls, e))) return rc;
    size_t nt = 0;
    if (t && !json_is_null(t)) {
        if (!json_is_array(t)) return bad(e, "tools", "'%s' must be an array of {\"type\": \"function\", \"function\": {...}}%s", "");
        nt = json_array_size(t);
        for (size_t i = 0; i < nt; i++) {
            json_t *o = json_array_get(t, i), *fn = json_object_get(o, "function");
            const char *type = json_string_value(json_object_get(o, "type"));
            const char *name = json_string_value(json_object_get(fn, "name"));
            json_t *params = json_object_get(fn, "parameters"), *desc = json_object_get(fn, "description");
            char p[48];
            snprintf(p, sizeof p, "tools[%zu]", i);
            if (!json_is_object(o) || !type || strcmp(type, "function") || !json_is_object(fn))
                return api_err(e, 400, "invalid_request_error", NULL, p, "'%s' must be {\"type\": \"function\", \"function\": {...}} "
                               "(function tools only)", p);
            if (!name || !tool_name_ok(name))
                return api_err(e, 400, "invalid_request_error", NULL, p, "'%s.function.name' must be 1 to 64 of a-z, A-Z, 0-9, _ and -", p);
            if ((params && !json_is_null(params) && !json_is_object(params)) || (desc && !json_is_null(desc) && !json_is_string(desc)))
                return api_err(e, 400, "invalid_request_error", NULL, p, "'%s.function': 'parameters' must be an object and "
                               "'description' a string", p);

            for (size_t k = 0; k < i; k++)
                if (!strcmp(name, json_string_value(json_object_get(json_object_get(json_array_get(t, k), "function"), "name"))))
                    return api_err(e, 400, "invalid_request_error", NULL, p, "'%s.function.name' '%s' is given twice", p, name);
        }
    }
    /* tool_choice: "none" (the tools are not shown to the model), "auto", "required", or
     * {"type": "function", "function": {"name": ...}}; the default "auto" with tools, else "none" */
    const char *choice = nt ? "auto" : "none", *named = NULL;
    if (tc && !json_is_null(tc)) {
        if (json_is_string(tc)) choice = json_string_value(tc);
        else named = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
        if (json_is_string(tc) ? strcmp(choice, "none") && strcmp(choice, "auto") && strcmp(choice, "required")
                               : !json_is_object(tc) || !named || strcmp(json_string_value(json_object_get(tc, "type")) ?
                                                                          json_string_value(json_object_get(tc, "type")) : "", "function"))
            return bad(e, "tool_choice", "'%s' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                       "\"function\": {\"name\": ...}}%s", "");
        if (named) choice = "function";
    }
    if (!nt && strcmp(choice, "none"))
        return bad(e, "tool_choice", "'%s' asks for a tool call, but the request offers no 'tools'%s", "");
    if (named) {
        int found = 0;
        for (size_t i = 0; i < nt; i++)
            found |= !strcmp(named, json_string_value(json_object_get(json_object_get(json_array_get(t, i), "function"), "name")));
        if (!found) return api_err(e, 400, "invalid_request_error", NULL, "tool_choice", "'tool_choice' names '%.64s', which is not "
                                   "among 'tools'", named);
    }
    if (!nt || !strcmp(choice, "none")) return 0;
    /* strict functions: their arguments are constrained when a call is forced (one function
     * named, or "required": the call to whichever one the model picks); under "auto" a strict
     * function is not served (the grammar would have to span free text and the markup) */
    const char *forced = named ? named : !strcmp(choice, "required") && nt == 1 ?
        json_string_value(json_object_get(json_object_get(json_array_get(t, 0), "function"), "name")) : NULL;
    const int required_many = !named && !strcmp(choice, "required") && nt > 1;
    for (size_t i = 0; i < nt; i++) {
        json_t *fn = json_object_get(json_array_get(t, i), "function");
        if (!json_is_true(json_object_get(fn, "strict"))) continue;
        char p[48];
        snprintf(p, sizeof p, "tools[%zu]", i);
        if (required_many) { /* checked here, by its own path; constrained in the whole call's schema below */
            json_t *params = json_object_get(fn, "parameters");
            char at[96];
            snprintf(at, sizeof at, "%s.function.parameters", p);
            if (!params || json_is_null(params)) continue;
            int rc = check_schema(json_incref(params), at, e); /* takes the reference on a refusal only */
            if (rc) return rc;
            json_decref(params);
            continue;
        }
        if (!forced || strcmp(forced, json_string_value(json_object_get(fn, "name"))))
            return api_err(e, 400, "invalid_request_error", "unsupported_parameter", p, "'%s.function.strict': true is served "
                           "when tool_choice forces a call (names the function, or \"required\"): send false, or force it", p);
        json_t *params = json_object_get(fn, "parameters");
        json_t *schema = params && !json_is_null(params) ? json_incref(params) : json_pack("{s:s}", "type", "object");
        char at[96];
        snprintf(at, sizeof at, "%s.function.parameters", p);
        int rc = check_schema(schema, at, e);
        if (rc) return rc;
        r->args_schema = schema;
    }
    if (!cx->chat || !rad_chat_has_tools(cx->chat))
        return api_err(e, 400, "invalid_request_error", "unsupported_parameter", "tools", "this model's chat format (%s) describes "
                       "no tool-call markup, so 'tools' cannot be served: leave it out (or send tool_choice \"none\")",
                       cx->chat ? cx->chat->kind : "none");
    r->tools = json_incref(t);
    if (!strcmp(choice, "auto")) return 0;
    if (!named && nt == 1) /* required with one tool: that one, named as a named choice would */
        named = json_string_value(json_object_get(json_object_get(json_array_get(t, 0), "function"), "name"));
    const RadChatFormat *f = cx->chat;
    const char *brace = strchr(f->tool_call_open, '{');
    if (!named && brace && f->tool_call_close[0] == '}') {
        /* required among several: the reply is one call to one of them, the whole call object
         * constrained (vLLM's guided "required"): the prompt ends before the call's "{" */
        json_t *any = json_array();
        for (size_t i = 0; any && i < nt; i++) {
            json_t *fn = json_object_get(json_array_get(t, i), "function"), *params = json_object_get(fn, "parameters");
            json_t *args = json_is_true(json_object_get(fn, "strict")) && params && !json_is_null(params) ? json_incref(params)
                                                                                                         : json_pack("{s:s}", "type", "object");
            json_t *one = json_pack("{s:s,s:{s:{s:O},s:o},s:[s,s],s:b}", "type", "object", "properties", "name", "const",
                                    json_object_get(fn, "name"), "arguments", args, "required", "name", "arguments",
                                    "additionalProperties", 0);
            if (!one || json_array_append_new(any, one)) json_decref(any), any = NULL;
        }
        json_t *schema = any ? json_pack("{s:o}", "anyOf", any) : NULL;
        if (!schema) return api_err(e, 500, "server_error", NULL, NULL, "out of memory reading the tools");
        int rc = check_schema(schema, "tools", e);
        if (rc) return rc;
        json_decref(r->args_schema);
        r->args_schema = schema;
        r->call_schema = 1;
        size_t len = (size_t)(brace - f->tool_call_open) + 1;
        if (!(r->tool_prefix = malloc(len))) return api_err(e, 500, "server_error", NULL, NULL, "out of memory reading the tools");
        snprintf(r->tool_prefix, len, "%.*s", (int)(len - 1), f->tool_call_open);
        return 0;
    }
    /* required or named: the reply opens with the call, the prompt ending with its opening */
    size_t len = strlen(f->tool_call_open) + (named ? strlen(named) + strlen(f->tool_call_mid) : 0) + 1;
    if (!(r->tool_prefix = malloc(len))) return api_err(e, 500, "server_error", NULL, NULL, "out of memory reading the tools");
    snprintf(r->tool_prefix, len, "%s%s%s", f->tool_call_open, named ? named : "", named ? f->tool_call_mid : "");
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
    size_t len, n;
    int32_t *ids;
    /* content is text: special-token strings in it are not control tokens unless the server
     * runs with --chat-special-tokens (docs/SERVER.md) */
    unsigned flags = RAD_CHAT_GEN_PROMPT | (cx->chat_special ? RAD_CHAT_SPECIAL_IN_CONTENT : 0);
    int rc = rad_chat_encode_tools(cx->chat, cx->tok, msgs.m, msgs.n, r->tools, flags, &ids, &n, &text, &len, &re);
    rad_chat_msgs_free(&msgs);
    if (rc == RAD_E_NOMEM) return api_err(e, 500, "server_error", NULL, NULL, "out of memory reading the messages");
    if (rc) return api_err(e, 400, "invalid_request_error", NULL, "messages", "%s", re.msg);
    r->in_reasoning = rad_chat_prompt_opens_reasoning(cx->chat, text, len);
    free(text);
    if (r->tool_prefix) { /* the forced call's opening, after the generation prompt */
        int32_t *more, *all;
        size_t k;
        if (rad_tok_encode(cx->tok, r->tool_prefix, strlen(r->tool_prefix), 0, &more, &k, &re))
            return free(ids), api_err(e, 500, "server_error", NULL, NULL, "the tool call's opening could not be tokenised: %s", re.msg);
        if (!(all = realloc(ids, (n + k) * sizeof *ids))) {
            free(ids), free(more);
            return api_err(e, 500, "server_error", NULL, NULL, "out of memory reading the messages");
        }
        memcpy(all + n, more, k * sizeof *more);
        free(more);
        ids = all, n += k;
    }
    if (n > UINT32_MAX) return free(ids), bad(e, "messages", "'%s' is too long%s", "");
    return push_prompt(r, ids, (uint32_t)n, e);
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
    int32_t nv = rad_tok_n_vocab(cx->tok);
    json_object_foreach(b, k, v) {
        uint64_t id;
        RadErr re = {0};
        if (nv <= 0 || rad_num_u64("key", k, 0, (uint64_t)nv - 1, &id, &re))
            return api_err(e, 400, "invalid_request_error", NULL, "logit_bias", "'logit_bias' key '%.32s' is not a token id in [0, %d)",
                           k, (int)nv);
        char shown[64];
        if (!json_is_number(v) || rad_num_check("logit_bias", json_number_value(v), -100, 100, RAD_NUM_REAL, &re))
            return api_err(e, 400, "invalid_request_error", NULL, "logit_bias", "'logit_bias' token '%.32s': %s: expected a number in [-100, 100]",
                           k, json_is_number(v) ? num_shown(json_number_value(v), shown, sizeof shown) : "not a number");
        r->bias[r->sp.n_bias++] = (RadLogitBias){(int32_t)id, (float)json_number_value(v)};
    }
    r->sp.bias = r->bias;
    return 0;
}

/* ---- fields the server does not serve, and NUL in strings ------------------------------------ */

/* What passes of a field that is not served: its "off" values. */
enum { OK_FALSE, OK_TRUE, OK_ONE, OK_ZERO, OK_EMPTY_STR, OK_EMPTY_ARR, OK_NONE_AUTO, OK_TEXT_FORMAT, OK_TEXT_ONLY, OK_NULL };

/* OpenAI's (and vLLM's) fields that would change the answer if honoured. Ignoring one would
 * answer another question than the one asked, so each is refused by name unless it is off or
 * null. Fields that change nothing in the answer (user, metadata, store, service_tier,
 * prediction, reasoning_effort) and unknown ones are ignored. */
static const struct {
    const char *key;
    int ok;
    const char *why;
} UNSERVED[] = {
    {"echo", OK_FALSE, "the prompt is not returned"},
    {"best_of", OK_ONE, "use 'n' for several choices"},
    {"suffix", OK_EMPTY_STR, "no text is inserted"},
    {"functions", OK_EMPTY_ARR, "the deprecated functions API: use 'tools'"},
    {"function_call", OK_NONE_AUTO, "the deprecated functions API: use 'tool_choice'"},
    {"modalities", OK_TEXT_ONLY, "text only"},
    {"audio", OK_NULL, "text only"},
    {"web_search_options", OK_NULL, "no web search"},
    {"ignore_eos", OK_FALSE, "generation stops at the end-of-sequence token"},
    {"min_tokens", OK_ZERO, "no minimum length"},
    {"stop_token_ids", OK_EMPTY_ARR, "use 'stop' strings"},
    {"use_beam_search", OK_FALSE, "no beam search"},
    {"guided_json", OK_NULL, "no guided decoding"},
    {"guided_regex", OK_NULL, "no guided decoding"},
    {"guided_choice", OK_NULL, "no guided decoding"},
    {"guided_grammar", OK_NULL, "no guided decoding"},
    {"prompt_logprobs", OK_NULL, "no prompt logprobs"},
    {"chat_template", OK_NULL, "the container's chat format is used"},
    {"add_generation_prompt", OK_TRUE, "the assistant's turn is always opened"},
    {"continue_final_message", OK_FALSE, "the assistant's turn is always opened"},
};

static int passes(json_t *v, int ok) {
    switch (ok) {
    case OK_FALSE: return json_is_false(v);
    case OK_TRUE: return json_is_true(v);
    case OK_ONE: return json_is_number(v) && json_number_value(v) == 1;
    case OK_ZERO: return json_is_number(v) && json_number_value(v) == 0;
    case OK_EMPTY_STR: return json_is_string(v) && json_string_length(v) == 0;
    case OK_EMPTY_ARR: return json_is_array(v) && json_array_size(v) == 0;
    case OK_NONE_AUTO: return json_is_string(v) && (!strcmp(json_string_value(v), "none") || !strcmp(json_string_value(v), "auto"));
    case OK_TEXT_FORMAT: {
        json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
        return json_is_string(t) && !strcmp(json_string_value(t), "text");
    }
    case OK_TEXT_ONLY: {
        if (!json_is_array(v) || !json_array_size(v)) return 0;
        for (size_t i = 0; i < json_array_size(v); i++) {
            json_t *m = json_array_get(v, i);
            if (!json_is_string(m) || strcmp(json_string_value(m), "text")) return 0;
        }
        return 1;
    }
    }
    return 0;
}

static int refuse_unserved(json_t *j, ApiErr *e) {
    static const char *off[] = {"false", "true", "1", "0", "\"\"", "[]", "\"none\" or \"auto\"", "{\"type\": \"text\"}", "[\"text\"]", "null"};
    for (size_t i = 0; i < sizeof UNSERVED / sizeof UNSERVED[0]; i++) {
        json_t *v = json_object_get(j, UNSERVED[i].key);
        if (v && !json_is_null(v) && !passes(v, UNSERVED[i].ok))
            return api_err(e, 400, "invalid_request_error", "unsupported_parameter", UNSERVED[i].key,
                           "'%s' is not served (%s): send %s or leave it out", UNSERVED[i].key, UNSERVED[i].why, off[UNSERVED[i].ok]);
    }
    return 0;
}

/* Whether a string under v holds NUL; path grows to name it ("messages[0].content"). */
static int nul_under(json_t *v, char *path, size_t cap, size_t at) {
    if (at >= cap) at = cap - 1;
    if (json_is_string(v)) return strlen(json_string_value(v)) != json_string_length(v);
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            snprintf(path + at, cap - at, "[%zu]", i);
            if (nul_under(json_array_get(v, i), path, cap, at + strlen(path + at))) return 1;
        }
    } else if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            snprintf(path + at, cap - at, ".%s", k);
            if (nul_under(x, path, cap, at + strlen(path + at))) return 1;
        }
    }
    path[at] = 0;
    return 0;
}

/* \u0000 is valid JSON and the body is parsed with it. A prompt string takes it (tokenised as
 * bytes, as the CLI does); the fields below become C strings downstream, where a NUL would cut
 * them silently, so a NUL there is refused by name. */
static int refuse_nul(json_t *j, ApiErr *e) {
    static const char *keys[] = {"model", "messages", "stop"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        json_t *v = json_object_get(j, keys[i]);
        char path[64];
        snprintf(path, sizeof path, "%s", keys[i]);
        if (v && nul_under(v, path, sizeof path, strlen(path)))
            return api_err(e, 400, "invalid_request_error", NULL, path, "'%s' holds a NUL character (\\u0000), which it cannot carry", path);
    }
    return 0;
}

static int parse_body(ApiKind kind, json_t *j, const ApiCtx *cx, ApiReq *r, ApiErr *e) {
    if (!json_is_object(j)) return api_err(e, 400, "invalid_request_error", NULL, NULL, "the request body must be a JSON object");
    int rc;
    if ((rc = refuse_nul(j, e)) || (rc = refuse_unserved(j, e))) return rc;
    json_t *model = json_object_get(j, "model");
    if (model && !json_is_null(model) && !json_is_string(model)) return bad(e, "model", "'%s' must be a string%s", "");
    if (json_is_string(model) && strcmp(json_string_value(model), cx->model))
        return api_err(e, 404, "invalid_request_error", "model_not_found", "model",
                       "The model '%.200s' does not exist; this server serves '%.200s'", json_string_value(model), cx->model);
    double d;
    long long ll;
    int given;
    r->sp = cx->defaults;
    r->sp.bias = NULL;
    r->sp.n_bias = 0;
    r->n = 1;
    if ((rc = get_bool(j, "stream", &r->stream, e))) return rc;
    int spec = 1; /* an extension, as vLLM's and llama.cpp's sampling extras: false opts out of speculation */
    if ((rc = get_bool(j, "speculative", &spec, e))) return rc;
    r->no_spec = !spec;
    json_t *so = json_object_get(j, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return bad(e, "stream_options", "'%s' must be an object%s", "");
        if ((rc = get_bool(so, "include_usage", &r->include_usage, e))) return rc;
    }
    if ((rc = get_num(j, "temperature", 0, 100, &d, &given, e))) return rc;
    if (given) r->sp.temperature = (float)d;
    /* top_p and repetition_penalty must be > 0 as the sampler's 32-bit floats: 1e-300 is 0 there */
    if ((rc = get_num(j, "top_p", 0, 1, &d, &given, e))) return rc;
    if (given) {
        char shown[64];
        if (!((float)d > 0)) return num_bad(e, "top_p", num_shown(d, shown, sizeof shown), "(0, 1] (above 1e-45)", 0);
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
        char shown[64];
        if (!((float)d > 0)) return num_bad(e, "repetition_penalty", num_shown(d, shown, sizeof shown), "(0, 100] (above 1e-45)", 0);
        r->sp.repetition_penalty = (float)d;
    }
    /* a JSON integer here is at most 64-bit signed (jansson's); a negative seed is refused, not
     * wrapped */
    if ((rc = get_int(j, "seed", 0, INT64_MAX, &ll, &given, e))) return rc;
    r->sp.seed = given ? (uint64_t)ll : cx->defaults.seed;
    r->have_seed = given;
    if ((rc = get_int(j, "n", 1, API_MAX_N, &ll, &given, e))) return rc;
    if (given) r->n = (uint32_t)ll;
    const char *mt = "max_tokens";
    if (kind == API_CHAT) { /* both: each checked, and they must agree */
        long long l2;
        int g2;
        if ((rc = get_int(j, "max_tokens", 1, UINT32_MAX, &l2, &g2, e))) return rc;
        if ((rc = get_int(j, "max_completion_tokens", 1, UINT32_MAX, &ll, &given, e))) return rc;
        if (given) mt = "max_completion_tokens";
        if (given && g2 && l2 != ll)
            return bad(e, "max_tokens", "'%s' and 'max_completion_tokens' differ%s", ": send one");
    }
    if ((rc = get_int(j, mt, 1, UINT32_MAX, &ll, &given, e))) return rc;
    r->max_tokens = given ? (uint32_t)ll : cx->default_max_tokens ? cx->default_max_tokens
                                          : kind == API_COMPLETIONS ? 16 : 0; /* OpenAI's defaults */
    r->max_tokens_default = !given && cx->default_max_tokens;
    if (given && ll > cx->max_ctx)
        return api_err(e, 400, "invalid_request_error", "context_length_exceeded", mt,
                       "'%s' is %lld, more than this model's context of %u tokens", mt, ll, cx->max_ctx);
    if ((rc = parse_stop(json_object_get(j, "stop"), r, e))) return rc;
    if ((rc = parse_format(j, r, e))) return rc;
    if ((rc = parse_bias(json_object_get(j, "logit_bias"), cx, r, e))) return rc;
    if (kind == API_CHAT) {
        if ((rc = get_bool(j, "logprobs", &r->logprobs, e))) return rc;
        if ((rc = get_int(j, "top_logprobs", 0, RAD_SCHED_MAX_TOP, &ll, &given, e))) return rc;
        if (given) {
            if (!r->logprobs) return bad(e, "top_logprobs", "'%s' needs 'logprobs': true%s", "");
            r->top_logprobs = (uint32_t)ll;
        }
        if ((rc = parse_tools(j, cx, r, e))) return rc;
        if (r->tools && r->json_mode)
            return api_err(e, 400, "invalid_request_error", "unsupported_parameter", "response_format", "'response_format' "
                           "json_object/json_schema with 'tools' is not served (a reply is either calls or the JSON): send one");
        rc = parse_messages(json_object_get(j, "messages"), cx, r, e);
    } else {
        if (json_object_get(j, "tools") && !json_is_null(json_object_get(j, "tools")))
            return bad(e, "tools", "'%s' is a chat field: use /v1/chat/completions%s", "");
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
        if (r->max_tokens_default && (uint64_t)np + r->max_tokens > cx->max_ctx)
            r->max_tokens = cx->max_ctx - np; /* a default the client did not ask for: at most what is left */
        if (r->max_tokens && (uint64_t)np + r->max_tokens > cx->max_ctx)
            return api_err(e, 400, "invalid_request_error", "context_length_exceeded", mt,
                           "This model's maximum context length is %u tokens; you asked %u (%u in the prompt, %u to generate)",
                           cx->max_ctx, np + r->max_tokens, np, r->max_tokens);
    }
    return 0;
}

/* Parses a request body. \u0000 in strings is valid JSON and is taken (refuse_nul). A number
 * jansson cannot hold (an integer past 64 bits, a real past a double) is a parse error naming
 * no field; it is out of every field's range, so it is replaced, in a copy, by +-DBL_MAX (which
 * says so in a message: num_shown) and the body parsed again, for the field's own check to name
 * it (a field the server ignores stays ignored). */
static json_t *load_json(const char *body, size_t len, ApiErr *e) {
    json_error_t je;
    char *copy = NULL;
    const char *b = body;
    json_t *j = NULL;
    for (int tries = 0; tries < 64; tries++) {
        j = json_loadb(b, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
        if (j || json_error_code(&je) != json_error_numeric_overflow || je.position < 0 || (size_t)je.position > len) break;
        size_t end = (size_t)je.position, start = end; /* the number ends where the lexer stopped */
        while (start > 0 && b[start - 1] && strchr("0123456789+-.eE", b[start - 1])) start--;
        if (start == end) break;
        const char *big = b[start] == '-' ? "-1.7976931348623157e308" : "1.7976931348623157e308";
        size_t bl = strlen(big), nlen = len - (end - start) + bl;
        char *nb = malloc(nlen);
        if (!nb) break;
        memcpy(nb, b, start);
        memcpy(nb + start, big, bl);
        memcpy(nb + start + bl, b + end, len - end);
        free(copy);
        b = copy = nb;
        len = nlen;
    }
    free(copy);
    if (j) return j;
    enum json_error_code code = json_error_code(&je);
    if (code == json_error_out_of_memory) api_err(e, 500, "server_error", NULL, NULL, "out of memory reading the body");
    else if (code == json_error_null_byte_in_key)
        api_err(e, 400, "invalid_request_error", NULL, NULL, "the body has an object key holding \\u0000, which this server does not take (line %d, column %d)",
                je.line, je.column);
    else api_err(e, 400, "invalid_request_error", NULL, NULL, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    return NULL;
}

int api_parse(ApiKind kind, const char *body, size_t len, const ApiCtx *cx, ApiReq *out, ApiErr *e) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    json_t *j = load_json(body, len, e);
    if (!j) return e->status;
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
    json_decref(r->tools);
    free(r->tool_prefix);
    json_decref(r->schema);
    json_decref(r->args_schema);
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
        if (!stream && c->n_calls && !c->len) json_object_set_new(m, "content", json_null()); /* a reply that only calls */
        else if (!stream || role_only || c->len) json_object_set_new(m, "content", jstr(c->text, c->len));
        if (c->reasoning && (c->reasoning_len || !stream)) json_object_set_new(m, "reasoning_content", jstr(c->reasoning, c->reasoning_len));
        if (c->n_calls) {
            json_t *calls = json_array();
            for (size_t k = 0; k < c->n_calls; k++) {
                char id[64];
                snprintf(id, sizeof id, "call_%.24s%02x%02x", c->call_id ? c->call_id : "", (unsigned)(c->index & 0xff),
                         (unsigned)((c->call0 + k) & 0xff));
                json_t *call = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function", "function", "name", c->calls[k].name,
                                         "arguments", c->calls[k].arguments);
                if (stream) json_object_set_new(call, "index", json_integer((json_int_t)(c->call0 + k)));
                json_array_append_new(calls, call);
            }
            json_object_set_new(m, "tool_calls", calls);
        }
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

/* ---- /v1/embeddings ------------------------------------------------------------------------ */

/* input: what parse_prompt takes, each text or id list non-empty (OpenAI refuses "" and []). */
static int parse_input(json_t *p, const ApiCtx *cx, ApiReq *r, ApiErr *e) {
    static const char *what = "'%s' must be a non-empty string, an array of them, an array of token ids or an array of such arrays%s";
    if (!p || json_is_null(p)) return bad(e, "input", "'%s' is required%s", "");
    if (json_is_string(p)) {
        if (!json_string_length(p)) return bad(e, "input", what, "");
        return encode(cx, json_string_value(p), json_string_length(p), 1, "input", r, e);
    }
    if (!json_is_array(p) || !json_array_size(p)) return bad(e, "input", what, "");
    if (json_array_size(p) > API_MAX_INPUTS)
        return api_err(e, 400, "invalid_request_error", NULL, "input", "'input' holds %zu inputs; at most %d a request",
                       json_array_size(p), API_MAX_INPUTS);
    if (json_is_integer(json_array_get(p, 0))) return ids_from_json(p, cx, "input", r, e);
    for (size_t i = 0; i < json_array_size(p); i++) {
        json_t *v = json_array_get(p, i);
        int rc;
        if (json_is_string(v) && json_string_length(v)) rc = encode(cx, json_string_value(v), json_string_length(v), 1, "input", r, e);
        else if (json_is_array(v) && json_array_size(v)) rc = ids_from_json(v, cx, "input", r, e);
        else rc = api_err(e, 400, "invalid_request_error", NULL, "input", "'input'[%zu] must be a non-empty string or a non-empty "
                          "array of token ids", i);
        if (rc) return rc;
    }
    return 0;
}

static int parse_embeddings(json_t *j, const ApiCtx *cx, ApiReq *r, ApiErr *e) {
    if (!json_is_object(j)) return api_err(e, 400, "invalid_request_error", NULL, NULL, "the request body must be a JSON object");
    json_t *model = json_object_get(j, "model");
    if (model && !json_is_null(model) && !json_is_string(model)) return bad(e, "model", "'%s' must be a string%s", "");
    if (json_is_string(model) && strcmp(json_string_value(model), cx->model))
        return api_err(e, 404, "invalid_request_error", "model_not_found", "model",
                       "The model '%.200s' does not exist; this server serves '%.200s'", json_string_value(model), cx->model);
    if (!cx->embed_dim)
        return api_err(e, 400, "invalid_request_error", "model_not_supported", "model", "the model '%.200s' generates text: it has "
                       "no embeddings (serve an embedding model for /v1/embeddings)", cx->model);
    json_t *f = json_object_get(j, "encoding_format");
    if (f && !json_is_null(f)) {
        if (!json_is_string(f) || (strcmp(json_string_value(f), "float") && strcmp(json_string_value(f), "base64")))
            return bad(e, "encoding_format", "'%s' must be \"float\" or \"base64\"%s", "");
        r->base64 = !strcmp(json_string_value(f), "base64");
    }
    json_t *u = json_object_get(j, "user");
    if (u && !json_is_null(u) && !json_is_string(u)) return bad(e, "user", "'%s' must be a string%s", "");
    long long d;
    int given = 0, rc;
    if ((rc = get_int(j, "dimensions", 1, cx->embed_dim, &d, &given, e))) return rc;
    r->dimensions = given ? (uint32_t)d : cx->embed_dim;
    int served = r->dimensions == cx->embed_dim;
    for (uint32_t i = 0; i < cx->n_embed_dims; i++) served |= cx->embed_dims[i] == r->dimensions;
    if (!served) {
        char sizes[160] = "";
        size_t k = 0;
        for (uint32_t i = 0; i < cx->n_embed_dims && k < sizeof sizes; i++)
            k += (size_t)snprintf(sizes + k, sizeof sizes - k, ", %u", cx->embed_dims[i]);
        return api_err(e, 400, "invalid_request_error", NULL, "dimensions", "'dimensions' %u is not served: the model embeds in %u%s%s",
                       r->dimensions, cx->embed_dim, cx->n_embed_dims ? " and was trained to be cut to" : " (it was not trained "
                       "to be cut: no Matryoshka sizes)", sizes + (cx->n_embed_dims ? 1 : 0));
    }
    if ((rc = parse_input(json_object_get(j, "input"), cx, r, e))) return rc;
    for (uint32_t i = 0; i < r->n_prompts; i++)
        if (r->n_prompt[i] > cx->embed_max)
            return api_err(e, 400, "invalid_request_error", "context_length_exceeded", "input", "'input'[%u] is %u tokens; the model "
                           "embeds at most %u", i, r->n_prompt[i], cx->embed_max);
    return 0;
}

int api_parse_embeddings(const char *body, size_t len, const ApiCtx *cx, ApiReq *out, ApiErr *e) {
    memset(out, 0, sizeof *out);
    out->kind = API_EMBEDDINGS;
    out->n = 1;
    json_t *j = load_json(body, len, e);
    if (!j) return e->status;
    int rc = parse_embeddings(j, cx, out, e);
    json_decref(j);
    if (rc) api_req_free(out);
    return rc;
}

/* RFC 4648 base64 of n bytes (malloc'd, NUL-terminated), or NULL. */
static char *b64(const uint8_t *p, size_t n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc((n + 2) / 3 * 4 + 1), *w = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *w++ = A[v >> 18 & 63], *w++ = A[v >> 12 & 63];
        *w++ = i + 1 < n ? A[v >> 6 & 63] : '=';
        *w++ = i + 2 < n ? A[v & 63] : '=';
    }
    *w = 0;
    return o;
}

char *api_embeddings_response(const ApiReq *r, const ApiCtx *cx, const float *const *vec, uint32_t n, uint32_t prompt_tokens) {
    const uint32_t dim = r->dimensions;
    json_t *data = json_array();
    float *row = malloc(dim * sizeof *row);
    int oom = !data || !row;
    for (uint32_t i = 0; !oom && i < n; i++) {
        memcpy(row, vec[i], dim * sizeof *row);
        if (dim < cx->embed_dim && cx->embed_normalized) { /* a cut unit vector, made unit again (Matryoshka) */
            double ss = 0;
            for (uint32_t k = 0; k < dim; k++) ss += (double)row[k] * row[k];
            double inv = 1.0 / (sqrt(ss) > 1e-12 ? sqrt(ss) : 1e-12);
            for (uint32_t k = 0; k < dim; k++) row[k] = (float)(row[k] * inv);
        }
        json_t *emb;
        if (r->base64) {
            uint8_t *le = (uint8_t *)row; /* each float's bytes, little-endian, in place */
            for (uint32_t k = 0; k < dim; k++) {
                uint32_t w;
                memcpy(&w, &row[k], 4);
                le[4 * k] = (uint8_t)w, le[4 * k + 1] = (uint8_t)(w >> 8), le[4 * k + 2] = (uint8_t)(w >> 16),
                le[4 * k + 3] = (uint8_t)(w >> 24);
            }
            char *t = b64(le, dim * sizeof *row);
            emb = t ? json_string(t) : NULL;
            free(t);
        } else {
            emb = json_array();
            for (uint32_t k = 0; emb && k < dim; k++)
                if (json_array_append_new(emb, json_real((double)row[k]))) json_decref(emb), emb = NULL;
        }
        json_t *o = emb ? json_pack("{s:s,s:I,s:o}", "object", "embedding", "index", (json_int_t)i, "embedding", emb) : NULL;
        oom = !o || json_array_append_new(data, o);
    }
    free(row);
    if (oom) return json_decref(data), NULL;
    /* 9 significant digits: every f32 read back exactly, half the bytes of %.17g */
    json_t *j = json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model", cx->model, "usage",
                          "prompt_tokens", (json_int_t)prompt_tokens, "total_tokens", (json_int_t)prompt_tokens);
    char *out = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(j);
    return out;
}

static json_t *model_obj(const ApiCtx *cx, long created) {
    return json_pack("{s:s,s:s,s:I,s:s,s:I}", "id", cx->model, "object", "model", "created", (json_int_t)created, "owned_by", "radiance",
                     "max_model_len", (json_int_t)cx->max_ctx);
}

char *api_models(const ApiCtx *cx, long created) {
    return dump(json_pack("{s:s,s:[o]}", "object", "list", "data", model_obj(cx, created)));
}

char *api_model(const ApiCtx *cx, long created) { return dump(model_obj(cx, created)); }

static json_t *load_obj(const char *body, size_t len, ApiErr *e) {
    json_t *j = load_json(body, len, e);
    if (j && !json_is_object(j)) {
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
    int add_special = 1, rc = refuse_nul(j, e);
    if (!rc) rc = get_bool(j, "add_special_tokens", &add_special, e);
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
