/* rad_chat_calls.c — tool calls read out of a reply (rad_chat_calls.h). */
#include "libcommon/text/rad_chat_calls.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/text/rad_pyjson.h"

void rad_chat_calls_init(RadChatCalls *c, const RadChatFormat *f, const json_t *tools, uint32_t max) {
    memset(c, 0, sizeof *c);
    c->tools = tools;
    c->max = max;
    if (f && f->tool_call_start && *f->tool_call_start && f->tool_call_end && *f->tool_call_end &&
        strlen(f->tool_call_start) < sizeof c->hold && strlen(f->tool_call_end) < sizeof c->hold)
        c->start = f->tool_call_start, c->end = f->tool_call_end, c->bare = 1;
}

void rad_chat_calls_free(RadChatCalls *c) {
    for (size_t i = 0; i < c->n; i++) free(c->calls[i].name), free(c->calls[i].arguments);
    free(c->calls);
    rad_buf_free(&c->call);
    rad_buf_free(&c->ws);
    rad_buf_free(&c->held);
    memset(c, 0, sizeof *c);
}

static int is_ws(char ch) { return ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t'; }

/* Content out, white space held: a run of it is released only when more content follows. */
static int emit_content(RadChatCalls *c, const char *p, size_t n, RadBuf *content, RadErr *e) {
    size_t body = n;
    while (body && is_ws(p[body - 1])) body--;
    int rc = RAD_OK;
    if (body) {
        if (c->ws.len) rc = rad_buf_put(content, c->ws.p, c->ws.len, e);
        c->ws.len = 0;
        if (!rc) rc = rad_buf_put(content, p, body, e);
    }
    if (!rc && n > body) rc = rad_buf_put(&c->ws, p + body, n - body, e);
    return rc;
}

#define FENCE "```json"

/* Whether a reply that begins with s[0..n) may still be a bare call: white space, then "{" or
 * a JSON code fence (or the beginning of one). */
static int could_be_bare(const char *s, size_t n) {
    while (n && is_ws(*s)) s++, n--;
    const size_t k = strlen(FENCE);
    return n == 0 || *s == '{' || !memcmp(s, FENCE, n < k ? n : k);
}

/* The bare-call candidate held so far goes out as content. */
static int release_held(RadChatCalls *c, RadBuf *content, RadErr *e) {
    c->bare = 0;
    int rc = c->held.len ? emit_content(c, c->held.p, c->held.len, content, e) : RAD_OK;
    c->held.len = 0;
    return rc;
}

static int put_content(RadChatCalls *c, const char *p, size_t n, RadBuf *content, RadErr *e) {
    if (!c->bare) return emit_content(c, p, n, content, e);
    int rc = rad_buf_put(&c->held, p, n, e);
    if (rc || could_be_bare(c->held.p, c->held.len)) return rc;
    return release_held(c, content, e);
}

/* Whether the request offered a function of this name (any name when it gave no tools). */
static int offered(const RadChatCalls *c, const char *name) {
    if (!c->tools) return 1;
    for (size_t i = 0; i < json_array_size(c->tools); i++) {
        const char *n = json_string_value(json_object_get(json_object_get(json_array_get(c->tools, i), "function"), "name"));
        if (n && !strcmp(n, name)) return 1;
    }
    return 0;
}

/* text[0..n) as a call ({"name": an offered function, "arguments": ...}): *taken 1 when it is
 * one (kept, or dropped past max), 0 when not. */
static int try_call(RadChatCalls *c, const char *text, size_t n, int *taken, RadErr *e) {
    *taken = 0;
    json_t *j = n ? json_loadb(text, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
    const char *name = json_string_value(json_object_get(j, "name"));
    json_t *args = json_object_get(j, "arguments");
    int rc = RAD_OK;
    RadBuf a = {0};
    if (json_is_string(args)) { /* the arguments as a JSON text: kept as written when it is JSON */
        json_t *inner = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, NULL);
        if (inner) rc = rad_buf_put(&a, json_string_value(args), json_string_length(args), e);
        json_decref(inner);
    } else if (args) {
        rc = rad_pyjson_dump(&a, args, e);
    }
    *taken = !rc && json_is_object(j) && name && *name && strlen(name) == json_string_length(json_object_get(j, "name")) &&
             a.p && offered(c, name);
    if (!rc && *taken && (!c->max || c->n < c->max)) { /* past max: a call not asked for, dropped */
        if (c->n == c->cap) {
            size_t cap = c->cap ? 2 * c->cap : 4;
            RadToolCall *v = realloc(c->calls, cap * sizeof *v);
            if (!v) rc = rad_err_set(e, RAD_E_NOMEM, "out of memory (%zu tool calls)", c->n);
            else c->calls = v, c->cap = cap;
        }
        if (!rc) {
            char *nm = strdup(name);
            if (!nm) rc = rad_err_set(e, RAD_E_NOMEM, "out of memory (a tool call's name)");
            else c->calls[c->n++] = (RadToolCall){nm, a.p}, a.p = NULL;
        }
    }
    if (*taken) c->ws.len = 0; /* white space before a call is not content */
    rad_buf_free(&a);
    json_decref(j);
    return rc;
}

/* The call whose text (after its start marker, before its end marker if `closed`) is c->call:
 * a call, or content as written. */
static int finish_call(RadChatCalls *c, int closed, RadBuf *content, RadErr *e) {
    int taken, rc = try_call(c, c->call.p, c->call.len, &taken, e);
    if (!rc && !taken && !(rc = put_content(c, c->start, strlen(c->start), content, e)) &&
        !(rc = put_content(c, c->call.p, c->call.len, content, e)) && closed)
        rc = put_content(c, c->end, strlen(c->end), content, e);
    c->call.len = 0;
    return rc;
}

/* A whole reply that is one bare call: the JSON object alone, or in a ```json fence. */
static int finish_bare(RadChatCalls *c, RadBuf *content, RadErr *e) {
    const char *s = c->held.p;
    size_t n = c->held.len;
    while (n && is_ws(*s)) s++, n--;
    while (n && is_ws(s[n - 1])) n--;
    const size_t k = strlen(FENCE);
    if (n >= k && !memcmp(s, FENCE, k)) { /* fenced: the fence must close at the end */
        if (n < k + 3 || memcmp(s + n - 3, "```", 3)) return release_held(c, content, e);
        s += k, n -= k + 3;
    }
    int taken, rc = try_call(c, s, n, &taken, e);
    if (!rc && taken) c->held.len = 0, c->bare = 0;
    return rc ? rc : release_held(c, content, e);
}

/* The longest suffix of t[0..n) that is a proper prefix of the marker m. */
static size_t partial_suffix(const char *t, size_t n, const char *m) {
    const size_t k = strlen(m);
    for (size_t l = n < k - 1 ? n : k - 1; l > 0; l--)
        if (memcmp(t + n - l, m, l) == 0) return l;
    return 0;
}

static const char *find(const char *p, size_t n, const char *m) {
    const size_t k = strlen(m);
    for (size_t i = 0; i + k <= n; i++)
        if (p[i] == m[0] && memcmp(p + i, m, k) == 0) return p + i;
    return NULL;
}

static int feed(RadChatCalls *c, const char *p, size_t n, RadBuf *content, RadErr *e) {
    int rc = RAD_OK;
    while (!rc && n) {
        if (c->inside) {
            const size_t old = c->call.len, k = strlen(c->end);
            if ((rc = rad_buf_put(&c->call, p, n, e))) break;
            const size_t from = old >= k - 1 ? old - (k - 1) : 0;
            const char *hit = find(c->call.p + from, c->call.len - from, c->end);
            if (!hit) break; /* all of p is the call's so far */
            const size_t pos = (size_t)(hit - c->call.p), used = pos + k - old; /* bytes of p through the marker */
            p += used, n -= used;
            c->call.len = pos;
            c->call.p[pos] = 0;
            c->inside = 0;
            rc = finish_call(c, 1, content, e);
            continue;
        }
        const char *hit = find(p, n, c->start);
        if (hit) { /* a marked call: the reply is not a bare one */
            if (!(rc = put_content(c, p, (size_t)(hit - p), content, e))) rc = release_held(c, content, e);
            n -= (size_t)(hit - p) + strlen(c->start);
            p = hit + strlen(c->start);
            c->inside = 1;
            continue;
        }
        const size_t keep = partial_suffix(p, n, c->start);
        rc = put_content(c, p, n - keep, content, e);
        memcpy(c->hold, p + n - keep, keep);
        c->n_hold = keep;
        break;
    }
    return rc;
}

int rad_chat_calls_feed(RadChatCalls *c, const char *p, size_t n, RadBuf *content, RadErr *e) {
    int rc = content->p ? RAD_OK : rad_buf_put(content, "", 0, e);
    if (rc || !n) return rc;
    if (!c->start) return rad_buf_put(content, p, n, e);
    if (!c->n_hold) return feed(c, p, n, content, e);
    RadBuf t = {0}; /* the held bytes, then the chunk */
    if (!(rc = rad_buf_put(&t, c->hold, c->n_hold, e)) && !(rc = rad_buf_put(&t, p, n, e))) {
        c->n_hold = 0;
        rc = feed(c, t.p, t.len, content, e);
    }
    rad_buf_free(&t);
    return rc;
}

int rad_chat_calls_flush(RadChatCalls *c, RadBuf *content, RadErr *e) {
    int rc = content->p ? RAD_OK : rad_buf_put(content, "", 0, e);
    if (!rc && c->inside) { /* the reply ended inside a call: one whole but unclosed is a call */
        c->inside = 0;
        rc = finish_call(c, 0, content, e);
    }
    if (!rc && c->n_hold) rc = put_content(c, c->hold, c->n_hold, content, e);
    c->n_hold = 0;
    if (!rc && c->bare) rc = finish_bare(c, content, e);
    if (!rc && c->ws.len && !c->n) rc = rad_buf_put(content, c->ws.p, c->ws.len, e);
    c->ws.len = 0;
    return rc;
}
