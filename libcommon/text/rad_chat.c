/* rad_chat.c — chat turns into a model's prompt text, and reasoning split out of replies
 * (rad_chat.h). */
#include "libcommon/text/rad_chat.h"

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/plugin/rad_plugins.h"
#include "libcommon/text/rad_pyjson.h"

static int add_str(RadBuf *b, const char *s, RadErr *e) { return s ? rad_buf_put(b, s, strlen(s), e) : RAD_OK; }

/* ---- messages from JSON ------------------------------------------------------------------- */

static int set_param(char *param, size_t cap, const char *fmt, size_t i, const char *field) {
    if (param && cap) snprintf(param, cap, fmt, i, field);
    return RAD_E_ARG;
}

/* messages[i].tool_calls (an array) into out->calls[i]. */
static int read_calls(json_t *tc, size_t i, RadChatMsgs *out, char *param, size_t cap, RadErr *e) {
    const size_t k = json_array_size(tc);
    if (k == 0) return RAD_OK; /* the templates render an empty list as no calls */
    RadChatCall *c = calloc(k, sizeof *c);
    if (!c) return rad_err_set(e, RAD_E_NOMEM, "out of memory (%zu tool calls)", k);
    out->calls[i] = c;
    out->m[i].calls = c;
    for (size_t j = 0; j < k; j++) {
        json_t *call = json_array_get(tc, j);
        json_t *fn = json_object_get(call, "function");
        const char *type = json_string_value(json_object_get(call, "type"));
        json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
        char field[40];
        snprintf(field, sizeof field, "tool_calls[%zu]", j);
        if (!json_is_object(call) || !json_is_object(fn) || (json_object_get(call, "type") && (!type || strcmp(type, "function")))) {
            set_param(param, cap, "messages[%zu].%s", i, field);
            return rad_err_set(e, RAD_E_ARG, "messages[%zu].%s is not a {\"type\": \"function\", \"function\": {...}} object", i, field);
        }
        if (!json_is_string(name) || !json_string_length(name) || strlen(json_string_value(name)) != json_string_length(name)) {
            set_param(param, cap, "messages[%zu].%s", i, field);
            return rad_err_set(e, RAD_E_ARG, "messages[%zu].%s.function.name is missing or not a non-empty string", i, field);
        }
        json_t *parsed = NULL;
        if (json_is_string(args)) {
            json_error_t je;
            parsed = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, &je);
            if (!parsed) {
                set_param(param, cap, "messages[%zu].%s", i, field);
                return rad_err_set(e, RAD_E_ARG, "messages[%zu].%s.function.arguments is not JSON (%s at character %d)", i, field,
                                   je.text, je.position);
            }
        } else if (args && !json_is_null(args)) {
            parsed = json_incref(args);
        } else {
            set_param(param, cap, "messages[%zu].%s", i, field);
            return rad_err_set(e, RAD_E_ARG, "messages[%zu].%s.function.arguments is missing", i, field);
        }
        c[j].name = json_string_value(name);
        c[j].args = parsed;
        out->m[i].n_calls = j + 1;
    }
    return RAD_OK;
}

int rad_chat_msgs_from_json(const json_t *messages, RadChatMsgs *out, char *param, size_t cap, RadErr *e) {
    memset(out, 0, sizeof *out);
    if (param && cap) snprintf(param, cap, "messages");
    if (!json_is_array(messages)) return rad_err_set(e, RAD_E_ARG, "'messages' must be an array of message objects");
    size_t n = json_array_size(messages);
    if (n == 0) return rad_err_set(e, RAD_E_ARG, "'messages' is empty: a chat needs at least one message");
    out->m = calloc(n, sizeof *out->m);
    out->owned = calloc(n, sizeof *out->owned);
    out->calls = calloc(n, sizeof *out->calls);
    if (!out->m || !out->owned || !out->calls) {
        rad_chat_msgs_free(out);
        return rad_err_set(e, RAD_E_NOMEM, "out of memory (%zu messages)", n);
    }
    out->n = n;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(messages, i);
        int rc = RAD_OK;
        if (!json_is_object(m)) {
            rc = rad_err_set(e, RAD_E_ARG, "messages[%zu] is not an object", i);
            set_param(param, cap, "messages[%zu]%s", i, "");
        }
        const char *role = rc ? NULL : json_string_value(json_object_get(m, "role"));
        if (!rc && !role) {
            rc = rad_err_set(e, RAD_E_ARG, "messages[%zu].role is missing or not a string", i);
            set_param(param, cap, "messages[%zu].%s", i, "role");
        }
        if (!rc) {
            if (!strcmp(role, "system") || !strcmp(role, "developer")) out->m[i].role = RAD_ROLE_SYSTEM;
            else if (!strcmp(role, "user")) out->m[i].role = RAD_ROLE_USER;
            else if (!strcmp(role, "assistant")) out->m[i].role = RAD_ROLE_ASSISTANT;
            else if (!strcmp(role, "tool")) out->m[i].role = RAD_ROLE_TOOL;
            else {
                rc = rad_err_set(e, RAD_E_ARG, "messages[%zu].role '%.64s' is not one of system, developer, user, assistant, tool",
                                 i, role);
                set_param(param, cap, "messages[%zu].%s", i, "role");
            }
        }
        json_t *c = rc ? NULL : json_object_get(m, "content");
        if (!rc && json_is_string(c)) {
            out->m[i].content = json_string_value(c);
        } else if (!rc && (!c || json_is_null(c))) {
            if (out->m[i].role != RAD_ROLE_ASSISTANT) {
                rc = rad_err_set(e, RAD_E_ARG, "messages[%zu].content is missing (only an assistant message may omit it)", i);
                set_param(param, cap, "messages[%zu].%s", i, "content");
            }
            out->m[i].content = "";
        } else if (!rc && json_is_array(c)) {
            RadBuf b = {0};
            for (size_t k = 0; !rc && k < json_array_size(c); k++) {
                json_t *part = json_array_get(c, k);
                const char *type = json_string_value(json_object_get(part, "type"));
                const char *text = json_string_value(json_object_get(part, "text"));
                if (!type || strcmp(type, "text") || !text) {
                    rc = rad_err_set(e, RAD_E_ARG, "messages[%zu].content[%zu] is not a {\"type\": \"text\", \"text\": ...} part%s", i,
                                     k, type && strcmp(type, "text") ? " (only text is served)" : "");
                    set_param(param, cap, "messages[%zu].%s", i, "content");
                } else {
                    rc = rad_buf_put(&b, text, strlen(text), e);
                }
            }
            if (!rc && !b.p) rc = rad_buf_put(&b, "", 0, e);
            out->owned[i] = b.p;
            out->m[i].content = b.p;
        } else if (!rc) {
            rc = rad_err_set(e, RAD_E_ARG, "messages[%zu].content must be a string or an array of text parts", i);
            set_param(param, cap, "messages[%zu].%s", i, "content");
        }
        json_t *tc = rc ? NULL : json_object_get(m, "tool_calls");
        if (tc && !json_is_null(tc)) {
            if (out->m[i].role != RAD_ROLE_ASSISTANT || !json_is_array(tc)) {
                rc = rad_err_set(e, RAD_E_ARG, "messages[%zu].tool_calls: %s", i,
                                 json_is_array(tc) ? "only an assistant message makes tool calls" : "not an array");
                set_param(param, cap, "messages[%zu].%s", i, "tool_calls");
            } else {
                rc = read_calls(tc, i, out, param, cap, e);
            }
        }
        if (rc) {
            rad_chat_msgs_free(out);
            return rc;
        }
    }
    return RAD_OK;
}

void rad_chat_msgs_free(RadChatMsgs *m) {
    if (m->owned)
        for (size_t i = 0; i < m->n; i++) free(m->owned[i]);
    for (size_t i = 0; m->calls && m->m && i < m->n; i++) {
        for (size_t j = 0; j < m->m[i].n_calls; j++) json_decref(m->calls[i][j].args);
        free(m->calls[i]);
    }
    free(m->calls);
    free(m->owned);
    free(m->m);
    memset(m, 0, sizeof *m);
}

/* ---- rendering ---------------------------------------------------------------------------- */

/* The tool turn's opening: user_start with its role name replaced, or NULL when the format
 * does not name the role in text. */
/* user_start with `name` in place of "user" (a turn of another role), or NULL. */
static char *role_start(const RadChatFormat *f, const char *name) {
    const char *u = f->user_start ? strstr(f->user_start, "user") : NULL;
    if (!u) return NULL;
    size_t pre = (size_t)(u - f->user_start), nl = strlen(name), post = strlen(u + 4);
    char *s = malloc(pre + nl + post + 1);
    if (!s) return NULL;
    memcpy(s, f->user_start, pre);
    memcpy(s + pre, name, nl);
    memcpy(s + pre + nl, u + 4, post + 1);
    return s;
}

static char *tool_start(const RadChatFormat *f) {
    return role_start(f, (f->kind && !strcmp(f->kind, "llama3")) ? "ipython" : "tool");
}

static const char *role_name(RadChatRole r) {
    return r == RAD_ROLE_SYSTEM ? "system" : r == RAD_ROLE_USER ? "user" : r == RAD_ROLE_ASSISTANT ? "assistant" : "tool";
}

/* Where message content sits in the rendered text (for rad_tok_encode_spans). */
typedef struct Spans {
    RadTokSpan *p;
    size_t n, cap;
} Spans;

/* Appends message content, recording its range when sp is given. */
static int add_content(RadBuf *b, const char *s, Spans *sp, RadErr *e) {
    size_t off = b->len, n = strlen(s);
    int rc = rad_buf_put(b, s, n, e);
    if (rc || !sp || n == 0) return rc;
    if (sp->n == sp->cap) {
        size_t cap = sp->cap ? 2 * sp->cap : 16;
        RadTokSpan *p = realloc(sp->p, cap * sizeof *p);
        if (!p) return rad_err_set(e, RAD_E_NOMEM, "out of memory (chat of %zu messages)", sp->n);
        sp->p = p;
        sp->cap = cap;
    }
    sp->p[sp->n++] = (RadTokSpan){off, n};
    return RAD_OK;
}

/* Python's str.isspace() for the code point at s (UTF-8), its length in *n; 0 when not a space. */
static int py_space(const unsigned char *s, size_t left, size_t *n) {
    uint32_t c;
    if (s[0] < 0x80) c = s[0], *n = 1;
    else if ((s[0] & 0xe0) == 0xc0 && left >= 2) c = ((uint32_t)(s[0] & 0x1f) << 6) | (s[1] & 0x3f), *n = 2;
    else if ((s[0] & 0xf0) == 0xe0 && left >= 3)
        c = ((uint32_t)(s[0] & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f), *n = 3;
    else return 0;
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* s without the leading and trailing white space Jinja's trim (str.strip()) removes: [*b, *b + *n). */
static void py_strip(const char *s, const char **b, size_t *n) {
    const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);
    size_t k;
    while (p < end && py_space(p, (size_t)(end - p), &k)) p += k;
    const unsigned char *q = end;
    for (;;) { /* the last code point: back over continuation bytes */
        const unsigned char *c = q;
        while (c > p && (c[-1] & 0xc0) == 0x80) c--;
        if (c <= p) break;
        c--;
        if (!py_space(c, (size_t)(q - c), &k) || c + k != q) break;
        q = c;
    }
    *b = (const char *)p;
    *n = (size_t)(q - p);
}

/* Content of a user/assistant/tool turn: as given, or stripped under RAD_CHAT_TRIM_CONTENT. */
static int add_turn_content(const RadChatFormat *f, RadBuf *b, const char *s, Spans *sp, RadErr *e) {
    if (!(f->flags & RAD_CHAT_TRIM_CONTENT)) return add_content(b, s, sp, e);
    const char *t;
    size_t n;
    py_strip(s, &t, &n);
    char *c = strndup(t, n);
    if (!c) return rad_err_set(e, RAD_E_NOMEM, "out of memory (a chat message of %zu bytes)", n);
    int rc = add_content(b, c, sp, e);
    free(c);
    return rc;
}

/* A field of ABI 1.7 or later: NULL when the plugin's struct ends before it. */
#define CHAT_FIELD(f, field) \
    ((f)->struct_size >= offsetof(RadChatFormat, field) + sizeof((f)->field) ? (f)->field : NULL)

int rad_chat_has_tools(const RadChatFormat *f) { return f && CHAT_FIELD(f, tools_start) != NULL; }

/* v as Jinja's tojson writes it, as content (a client's text: no special tokens in it). */
static int add_json(RadBuf *b, const json_t *v, Spans *sp, RadErr *e) {
    RadBuf j = {0};
    int rc = rad_pyjson_dump(&j, v, e);
    if (!rc) rc = add_content(b, j.p, sp, e);
    rad_buf_free(&j);
    return rc;
}

/* The system turn of a request with tools (see RadChatFormat's ABI 1.7 fields). */
static int add_tools_turn(const RadChatFormat *f, RadBuf *b, const char *sys, Spans *sys_sp, const json_t *tools, Spans *sp,
                          RadErr *e) {
    int rc = add_str(b, f->system_start, e);
    if (!rc && sys && !(rc = add_content(b, sys, sys_sp, e))) rc = add_str(b, CHAT_FIELD(f, tools_system_sep), e);
    if (!rc) rc = add_str(b, CHAT_FIELD(f, tools_start), e);
    for (size_t t = 0; !rc && t < json_array_size(tools); t++)
        if (!(rc = add_str(b, CHAT_FIELD(f, tools_sep), e))) rc = add_json(b, json_array_get(tools, t), sp, e);
    if (!rc && !(rc = add_str(b, CHAT_FIELD(f, tools_end), e))) rc = add_str(b, f->system_end, e);
    return rc;
}

/* An assistant message's calls, after its content. */
static int add_calls(const RadChatFormat *f, RadBuf *b, const RadChatMsg *m, size_t i, Spans *sp, RadErr *e) {
    if (!CHAT_FIELD(f, tool_call_open))
        return rad_err_set(e, RAD_E_ARG, "messages[%zu]: the %s chat format renders no tool calls", i, f->kind);
    int rc = RAD_OK;
    for (size_t j = 0; !rc && j < m->n_calls; j++) {
        if ((j > 0 || m->content[0]) && (rc = add_str(b, CHAT_FIELD(f, tool_calls_sep), e))) break;
        if (!(rc = add_str(b, CHAT_FIELD(f, tool_call_open), e)) && !(rc = add_content(b, m->calls[j].name, sp, e)) &&
            !(rc = add_str(b, CHAT_FIELD(f, tool_call_mid), e)) && !(rc = add_json(b, m->calls[j].args, sp, e)))
            rc = add_str(b, CHAT_FIELD(f, tool_call_close), e);
    }
    return rc;
}

static int render(const RadChatFormat *f, const RadChatMsg *msgs, size_t n, const json_t *tools, unsigned flags, char **text,
                  size_t *len, int *add_special, Spans *sp, RadErr *e) {
    *text = NULL;
    *len = 0;
    if (!f) return rad_err_set(e, RAD_E_ARG, "no chat format");
    if (n == 0 && !(flags & RAD_CHAT_GEN_PROMPT)) return rad_err_set(e, RAD_E_ARG, "a chat needs at least one message");
    const int with_tools = json_array_size(tools) > 0;
    if (with_tools && (!rad_chat_has_tools(f) || (f->flags & RAD_CHAT_SYSTEM_IN_FIRST_USER)))
        return rad_err_set(e, RAD_E_ARG, "the %s chat format renders no tools", f->kind);
    RadBuf b = {0};
    int rc = rad_buf_put(&b, "", 0, e);
    int in_first_user = (f->flags & RAD_CHAT_SYSTEM_IN_FIRST_USER) != 0;
    const int no_auto_bos = (f->flags & RAD_CHAT_NO_AUTO_BOS) != 0;
    *add_special = !no_auto_bos;
    if (!rc && f->bos && *f->bos && (no_auto_bos || !(flags & RAD_CHAT_TOK_HAS_BOS))) rc = add_str(&b, f->bos, e);
    size_t i = 0;
    const char *sys = f->default_system;
    Spans *sys_sp = NULL; /* the format's default system text is the template's, not content */
    if (n && msgs[0].role == RAD_ROLE_SYSTEM) sys = msgs[i++].content, sys_sp = sp;
    if (!rc && with_tools) {
        rc = add_tools_turn(f, &b, sys, sys_sp, tools, sp, e);
        sys = NULL;
    }
    if (!rc && sys && !in_first_user) {
        if (!(rc = add_str(&b, f->system_start, e)) && !(rc = add_content(&b, sys, sys_sp, e))) rc = add_str(&b, f->system_end, e);
        sys = NULL;
    }
    char *tstart = NULL;
    const size_t first_turn = i;
    for (; !rc && i < n; i++) {
        const RadChatMsg *m = &msgs[i];
        if (!m->content) {
            rc = rad_err_set(e, RAD_E_ARG, "messages[%zu]: no content", i);
            break;
        }
        if ((f->flags & RAD_CHAT_ALTERNATE) && (m->role == RAD_ROLE_USER) != ((i - first_turn) % 2 == 0)) {
            rc = rad_err_set(e, RAD_E_ARG, "messages[%zu]: the %s chat format needs user turns at even places and others "
                             "between them (user, assistant, user, ...; after an optional first system message); this one "
                             "is %s", i, f->kind ? f->kind : "model's", role_name(m->role));
            break;
        }
        switch (m->role) {
        case RAD_ROLE_SYSTEM:
            if (in_first_user && (f->flags & RAD_CHAT_ALTERNATE)) { /* Gemma: a turn named "system" */
                char *st = role_start(f, "system");
                if (!st) rc = rad_err_set(e, RAD_E_NOMEM, "out of memory");
                else if (!(rc = add_str(&b, st, e)) && !(rc = add_turn_content(f, &b, m->content, sp, e)))
                    rc = add_str(&b, f->user_end, e);
                free(st);
                break;
            }
            if (in_first_user) {
                rc = rad_err_set(e, RAD_E_ARG, "messages[%zu]: the %s chat format takes a system message only first", i,
                                 f->kind ? f->kind : "model's");
                break;
            }
            if (!(rc = add_str(&b, f->system_start, e)) && !(rc = add_content(&b, m->content, sp, e))) rc = add_str(&b, f->system_end, e);
            break;
        case RAD_ROLE_USER:
            rc = add_str(&b, f->user_start, e);
            if (!rc && sys) { /* Llama 2: <<SYS>> inside the first [INST] */
                if (!(rc = add_str(&b, f->system_start, e)) && !(rc = add_content(&b, sys, sys_sp, e))) rc = add_str(&b, f->system_end, e);
                sys = NULL;
            }
            if (!rc && !(rc = add_turn_content(f, &b, m->content, sp, e))) rc = add_str(&b, f->user_end, e);
            break;
        case RAD_ROLE_ASSISTANT:
            if (!(rc = add_str(&b, f->assistant_start, e)) && !(rc = add_turn_content(f, &b, m->content, sp, e)) &&
                !(rc = m->n_calls ? add_calls(f, &b, m, i, sp, e) : RAD_OK))
                rc = add_str(&b, f->assistant_end, e);
            break;
        case RAD_ROLE_TOOL:
            if (CHAT_FIELD(f, tool_turn_start)) { /* a run of tool results is one turn */
                if ((i == 0 || msgs[i - 1].role != RAD_ROLE_TOOL) && (rc = add_str(&b, CHAT_FIELD(f, tool_turn_start), e))) break;
                if (!(rc = add_str(&b, CHAT_FIELD(f, tool_result_start), e)) && !(rc = add_turn_content(f, &b, m->content, sp, e)))
                    rc = add_str(&b, CHAT_FIELD(f, tool_result_end), e);
                if (!rc && (i + 1 == n || msgs[i + 1].role != RAD_ROLE_TOOL)) rc = add_str(&b, f->user_end, e);
                break;
            }
            if (!tstart && !(tstart = tool_start(f))) {
                rc = rad_err_set(e, RAD_E_ARG, "messages[%zu]: the %s chat format has no %s role", i, f->kind ? f->kind : "model's",
                                 role_name(m->role));
                break;
            }
            if (!(rc = add_str(&b, tstart, e)) && !(rc = add_turn_content(f, &b, m->content, sp, e))) rc = add_str(&b, f->user_end, e);
            break;
        }
    }
    free(tstart);
    if (!rc && (flags & RAD_CHAT_GEN_PROMPT)) rc = add_str(&b, f->assistant_start, e);
    if (rc) {
        rad_buf_free(&b);
        return rc;
    }
    *text = b.p;
    *len = b.len;
    return RAD_OK;
}

int rad_chat_render(const RadChatFormat *f, const RadChatMsg *msgs, size_t n, unsigned flags, char **text, size_t *len,
                    int *add_special, RadErr *e) {
    return render(f, msgs, n, NULL, flags, text, len, add_special, NULL, e);
}

int rad_chat_render_tools(const RadChatFormat *f, const RadChatMsg *msgs, size_t n, const json_t *tools, unsigned flags,
                          char **text, size_t *len, int *add_special, RadErr *e) {
    return render(f, msgs, n, tools, flags, text, len, add_special, NULL, e);
}

int rad_chat_encode(const RadChatFormat *f, const RadTok *tok, const RadChatMsg *msgs, size_t n, unsigned flags,
                    int32_t **ids, size_t *n_ids, char **text, size_t *len, RadErr *e) {
    return rad_chat_encode_tools(f, tok, msgs, n, NULL, flags, ids, n_ids, text, len, e);
}

int rad_chat_encode_tools(const RadChatFormat *f, const RadTok *tok, const RadChatMsg *msgs, size_t n, const json_t *tools,
                          unsigned flags, int32_t **ids, size_t *n_ids, char **text, size_t *len, RadErr *e) {
    *ids = NULL;
    *n_ids = 0;
    if (text) *text = NULL;
    if (len) *len = 0;
    if (!tok) return rad_err_set(e, RAD_E_ARG, "no tokenizer");
    if (rad_tok_bos(tok) >= 0) flags |= RAD_CHAT_TOK_HAS_BOS;
    Spans sp = {0};
    char *t;
    size_t tl;
    int add_special;
    int special = (flags & RAD_CHAT_SPECIAL_IN_CONTENT) != 0;
    int rc = render(f, msgs, n, tools, flags, &t, &tl, &add_special, special ? NULL : &sp, e);
    if (!rc) rc = rad_tok_encode_spans(tok, t, tl, add_special, sp.p, sp.n, ids, n_ids, e);
    free(sp.p);
    if (!rc && text) *text = t, t = NULL;
    if (!rc && len) *len = tl;
    free(t);
    return rc;
}

static int stop_id_add(const RadTok *tok, const char *text, int32_t *ids, uint32_t *n, RadErr *e) {
    if (!text || !*text || *n == RAD_CHAT_MAX_STOP_IDS) return RAD_OK;
    int32_t *v;
    size_t k;
    int rc = rad_tok_encode(tok, text, strlen(text), 0, &v, &k, e);
    if (rc) return rc;
    int dup = 0;
    for (uint32_t i = 0; k == 1 && i < *n; i++) dup |= ids[i] == v[0];
    if (k == 1 && !dup && rad_tok_is_special(tok, v[0])) ids[(*n)++] = v[0];
    free(v);
    return RAD_OK;
}

int rad_chat_stop_ids(const RadChatFormat *f, const RadTok *tok, int32_t *ids, uint32_t *n, RadErr *e) {
    *n = 0;
    if (!f || !tok) return RAD_OK;
    int rc = RAD_OK;
    for (int i = 0; !rc && f->stop && f->stop[i] && i < 16; i++) rc = stop_id_add(tok, f->stop[i], ids, n, e);
    if (!rc) rc = stop_id_add(tok, f->assistant_end, ids, n, e);
    return rc;
}

/* ---- reasoning split ---------------------------------------------------------------------- */

int rad_chat_prompt_opens_reasoning(const RadChatFormat *f, const char *prompt, size_t len) {
    if (!f || !f->reasoning_start || !*f->reasoning_start || !f->reasoning_end || !*f->reasoning_end) return 0;
    while (len && (prompt[len - 1] == ' ' || prompt[len - 1] == '\n' || prompt[len - 1] == '\t' || prompt[len - 1] == '\r'))
        len--;
    size_t k = strlen(f->reasoning_start);
    return len >= k && memcmp(prompt + len - k, f->reasoning_start, k) == 0;
}

void rad_chat_split_init(RadChatSplit *s, const RadChatFormat *f, int in_reasoning) {
    memset(s, 0, sizeof *s);
    int have = f && f->reasoning_start && *f->reasoning_start && f->reasoning_end && *f->reasoning_end &&
               strlen(f->reasoning_start) < sizeof s->hold && strlen(f->reasoning_end) < sizeof s->hold;
    if (have) {
        s->start = f->reasoning_start;
        s->end = f->reasoning_end;
        s->in_reasoning = in_reasoning != 0;
    }
}

/* Sends n bytes of decided text where the state says, dropping newlines that open the content. */
static int put(RadChatSplit *s, const char *p, size_t n, RadBuf *content, RadBuf *reasoning, RadErr *e) {
    if (s->in_reasoning) return rad_buf_put(reasoning, p, n, e);
    if (s->after_end) {
        while (n && (*p == '\n' || *p == '\r')) p++, n--;
        if (n) s->after_end = 0;
    }
    return rad_buf_put(content, p, n, e);
}

/* The longest suffix of t[0..n) that is a proper prefix of the marker m. */
static size_t partial_suffix(const char *t, size_t n, const char *m) {
    size_t k = strlen(m);
    for (size_t l = (n < k - 1 ? n : k - 1); l > 0; l--)
        if (memcmp(t + n - l, m, l) == 0) return l;
    return 0;
}

static int feed(RadChatSplit *s, const char *p, size_t n, RadBuf *content, RadBuf *reasoning, RadErr *e) {
    int rc = RAD_OK;
    while (!rc && n) {
        const char *m = s->in_reasoning ? s->end : s->start;
        size_t k = strlen(m);
        /* a whole marker inside p? */
        const char *hit = NULL;
        for (size_t i = 0; i + k <= n; i++)
            if (p[i] == m[0] && memcmp(p + i, m, k) == 0) {
                hit = p + i;
                break;
            }
        if (hit) {
            rc = put(s, p, (size_t)(hit - p), content, reasoning, e);
            if (s->in_reasoning) s->after_end = 1;
            s->in_reasoning = !s->in_reasoning;
            n -= (size_t)(hit - p) + k;
            p = hit + k;
            continue;
        }
        size_t keep = partial_suffix(p, n, m);
        rc = put(s, p, n - keep, content, reasoning, e);
        memcpy(s->hold, p + n - keep, keep);
        s->n_hold = keep;
        break;
    }
    return rc;
}

int rad_chat_split_feed(RadChatSplit *s, const char *chunk, size_t n, RadBuf *content, RadBuf *reasoning, RadErr *e) {
    int rc = RAD_OK;
    if (!content->p) rc = rad_buf_put(content, "", 0, e);
    if (!rc && !reasoning->p) rc = rad_buf_put(reasoning, "", 0, e);
    if (rc || !n) return rc;
    if (!s->start) return rad_buf_put(content, chunk, n, e);
    /* held bytes first, then the chunk: the hold is short, so join them in a small buffer and
     * feed the chunk's rest directly */
    while (s->n_hold && n) {
        char tmp[sizeof s->hold + 1];
        size_t h = s->n_hold;
        memcpy(tmp, s->hold, h);
        tmp[h] = *chunk++;
        n--;
        s->n_hold = 0;
        if ((rc = feed(s, tmp, h + 1, content, reasoning, e))) return rc;
    }
    return n ? feed(s, chunk, n, content, reasoning, e) : RAD_OK;
}

int rad_chat_split_flush(RadChatSplit *s, RadBuf *content, RadBuf *reasoning, RadErr *e) {
    int rc = RAD_OK;
    if (!content->p) rc = rad_buf_put(content, "", 0, e);
    if (!rc && !reasoning->p) rc = rad_buf_put(reasoning, "", 0, e);
    if (!rc && s->n_hold) rc = put(s, s->hold, s->n_hold, content, reasoning, e);
    s->n_hold = 0;
    return rc;
}

/* ---- a plugin's chat format, checked ---------------------------------------------------------- */

#define CHAT_STR_MAX 4096

static int chat_str(const char *s, int may_be_null, const char *plugin, const char *field, RadErr *e) {
    if (!s) return may_be_null ? RAD_OK : rad_err_set(e, RAD_E_FORMAT, "plugin '%s': RadChatFormat.%s is NULL", plugin, field);
    if (strnlen(s, CHAT_STR_MAX + 1) > CHAT_STR_MAX)
        return rad_err_set(e, RAD_E_FORMAT, "plugin '%s': RadChatFormat.%s is longer than %d bytes", plugin, field, CHAT_STR_MAX);
    return RAD_OK;
}

int rad_chat_format_check(const RadChatFormat *f, const char *plugin, RadErr *e) {
    const size_t v10 = offsetof(RadChatFormat, flags) + sizeof f->flags; /* ABI 1.0's fields */
    if (f->struct_size < v10)
        return rad_err_set(e, RAD_E_FORMAT, "plugin '%s': RadChatFormat.struct_size %u is smaller than ABI 1.0's %zu", plugin,
                           f->struct_size, v10);
    int rc;
    if ((rc = chat_str(f->kind, 0, plugin, "kind", e)) || (rc = chat_str(f->bos, 0, plugin, "bos", e)) ||
        (rc = chat_str(f->system_start, 0, plugin, "system_start", e)) || (rc = chat_str(f->system_end, 0, plugin, "system_end", e)) ||
        (rc = chat_str(f->user_start, 0, plugin, "user_start", e)) || (rc = chat_str(f->user_end, 0, plugin, "user_end", e)) ||
        (rc = chat_str(f->assistant_start, 0, plugin, "assistant_start", e)) ||
        (rc = chat_str(f->assistant_end, 0, plugin, "assistant_end", e)) ||
        (rc = chat_str(f->default_system, 1, plugin, "default_system", e)) ||
        (rc = chat_str(f->reasoning_start, 1, plugin, "reasoning_start", e)) ||
        (rc = chat_str(f->reasoning_end, 1, plugin, "reasoning_end", e)) ||
        (rc = chat_str(f->tool_call_start, 1, plugin, "tool_call_start", e)) ||
        (rc = chat_str(f->tool_call_end, 1, plugin, "tool_call_end", e)))
        return rc;
    if (!f->kind[0]) return rad_err_set(e, RAD_E_FORMAT, "plugin '%s': RadChatFormat.kind is empty", plugin);
    /* ABI 1.7's tool fields, where the struct has them: all or none of a group */
    static const struct { size_t off; const char *name; } tool_fields[] = {
#define TF(x) {offsetof(RadChatFormat, x), #x}
        TF(tools_start), TF(tools_system_sep), TF(tools_sep), TF(tools_end), TF(tool_calls_sep), TF(tool_call_open),
        TF(tool_call_mid), TF(tool_call_close), TF(tool_turn_start), TF(tool_result_start), TF(tool_result_end),
#undef TF
    };
    int n_set = 0, n_have = 0;
    for (size_t t = 0; t < sizeof tool_fields / sizeof tool_fields[0]; t++) {
        if (f->struct_size < tool_fields[t].off + sizeof(const char *)) continue;
        const char *v;
        memcpy(&v, (const char *)f + tool_fields[t].off, sizeof v);
        if ((rc = chat_str(v, 1, plugin, tool_fields[t].name, e))) return rc;
        n_have++;
        n_set += v != NULL;
    }
    if (n_set && n_set != n_have)
        return rad_err_set(e, RAD_E_FORMAT, "plugin '%s': RadChatFormat's tool fields (tools_start .. tool_result_end): all or none",
                           plugin);
    if (n_set && (!f->tool_call_start || !*f->tool_call_start || !f->tool_call_end || !*f->tool_call_end))
        return rad_err_set(e, RAD_E_FORMAT, "plugin '%s': RadChatFormat renders tools but names no tool_call_start/_end to read "
                           "the model's calls by", plugin);
    if (f->flags & ~RAD_CHAT_FLAGS_KNOWN)
        return rad_err_set(e, RAD_E_FORMAT, "plugin '%s': RadChatFormat.flags 0x%x has bits this core does not know (0x%x)", plugin,
                           f->flags, f->flags & ~RAD_CHAT_FLAGS_KNOWN);
    if (!f->reasoning_start != !f->reasoning_end)
        return rad_err_set(e, RAD_E_FORMAT, "plugin '%s': RadChatFormat.reasoning_start and reasoning_end: both or neither", plugin);
    for (int i = 0; f->stop && f->stop[i]; i++) {
        char field[32];
        snprintf(field, sizeof field, "stop[%d]", i);
        if (i == 16) return rad_err_set(e, RAD_E_FORMAT, "plugin '%s': RadChatFormat.stop has more than 16 strings", plugin);
        if ((rc = chat_str(f->stop[i], 0, plugin, field, e))) return rc;
        if (!f->stop[i][0]) return rad_err_set(e, RAD_E_FORMAT, "plugin '%s': RadChatFormat.%s is empty", plugin, field);
    }
    return RAD_OK;
}

int rad_chat_format_get(const RadPlugin *plugin, const RadModelMeta *meta, const RadChatFormat **out, RadErr *e) {
    *out = NULL;
    if (!plugin->chat_format) return RAD_OK;
    const RadChatFormat *f = plugin->chat_format(meta);
    if (!f) return RAD_OK;
    int rc = rad_chat_format_check(f, plugin->info->name, e);
    if (!rc) *out = f;
    return rc;
}
