/* libFuzzer target: what a request's JSON reaches besides the HTTP parser, on arbitrary bytes.
 * The first byte picks: 0 a JSON Schema compiled (rad_grammar_from_schema; the bytes after the
 * first NUL are walked through the automaton, which must never report a state that cannot
 * complete, and stay within its caps), 1 JSON mode walked the same way, 2 a reply read for tool
 * calls (rad_chat_calls, Qwen's markup, chunked at every 7th byte), 3 json.dumps of any JSON
 * (rad_pyjson_dump). A refusal must carry a one-line message with its code.
 * Seeds: fuzz/corpus/fuzz_schema/. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arch/common/rad_chat_formats.h"
#include "libcommon/text/rad_chat_calls.h"
#include "libcommon/text/rad_grammar.h"
#include "libcommon/text/rad_pyjson.h"

static void check_err(int rc, const RadErr *e) {
    if (rc != RAD_OK && (e->code != rc || !e->msg[0] || strchr(e->msg, '\n'))) abort();
}

static void walk(RadGrammar *g, const uint8_t *p, size_t n) {
    int32_t s = rad_grammar_start(g);
    for (size_t i = 0; i < n; i++) {
        const int32_t ns = rad_grammar_step(g, s, p[i]);
        if (ns == RAD_GRAMMAR_FULL) return;
        if (ns == RAD_GRAMMAR_DEAD) continue; /* a byte the grammar refuses: try the next one */
        s = ns;
    }
    (void)rad_grammar_accepting(g, s);
    (void)rad_grammar_done(g, s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int which = data[0] % 4;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    const uint8_t *nul = memchr(p, 0, n);
    const size_t a = nul ? (size_t)(nul - p) : n;
    RadErr e = {0};
    if (which == 0 || which == 3) {
        json_t *j = json_loadb((const char *)p, a, JSON_DECODE_ANY, NULL);
        if (!j) return 0;
        if (which == 0) {
            RadGrammar *g = NULL;
            char param[64];
            const int rc = rad_grammar_from_schema(j, &g, param, sizeof param, &e);
            check_err(rc, &e);
            if (!rc) {
                rad_grammar_set_dfa_cap(g, 2000); /* keep a run short */
                walk(g, nul ? nul + 1 : p, nul ? n - a - 1 : 0);
                rad_grammar_free(g);
            }
        } else {
            RadBuf b = {0};
            const int rc = rad_pyjson_dump(&b, j, &e);
            check_err(rc, &e);
            json_t *back = rc ? NULL : json_loadb(b.p, b.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
            if (!rc && !back) abort(); /* it reads back */
            json_decref(back);
            rad_buf_free(&b);
        }
        json_decref(j);
    } else if (which == 1) {
        RadGrammar *g = NULL;
        const int rc = rad_grammar_json_object(1 + (n ? p[0] % 16 : 0), &g, &e);
        check_err(rc, &e);
        if (!rc) {
            rad_grammar_set_dfa_cap(g, 2000);
            walk(g, p, n);
            rad_grammar_free(g);
        }
    } else {
        RadChatCalls c;
        rad_chat_calls_init(&c, &rad_chat_chatml_qwen, NULL, 0);
        RadBuf content = {0};
        for (size_t i = 0; i < n; i += 7) check_err(rad_chat_calls_feed(&c, (const char *)p + i, n - i < 7 ? n - i : 7, &content, &e), &e);
        check_err(rad_chat_calls_flush(&c, &content, &e), &e);
        for (size_t k = 0; k < c.n; k++) { /* every call's arguments are JSON */
            json_t *args = json_loads(c.calls[k].arguments, JSON_DECODE_ANY, NULL);
            if (!args) abort();
            json_decref(args);
        }
        rad_chat_calls_free(&c);
        rad_buf_free(&content);
    }
    return 0;
}
