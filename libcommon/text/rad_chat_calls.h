/* rad_chat_calls.h — tool calls read out of a model's reply, as OpenAI's `tool_calls`.
 *
 * A chat format that renders tools names the markup its model writes a call in
 * (RadChatFormat.tool_call_start/_end): between them a JSON object {"name": NAME, "arguments":
 * ARGS}, as the templates' own instructions ask (Qwen2.5, Qwen3). The reply is fed in chunks,
 * as generated; everything outside the markup is content. A call whose text is not such an
 * object, or names a function the request did not offer, is not a call: its text, markers
 * included, goes to the content as the model wrote it. White space between calls, and content
 * that is only white space once calls were made, is dropped (the model writes "\n" between
 * calls); content is held back while a marker is undecided, until it is. A reply that ends
 * inside a call is a call when the text is a whole call (the model ended its turn without the
 * end marker), else (max_tokens) that text, start marker included, is content.
 *
 * A bare call: a reply that is nothing but such an object, alone or in a ```json code fence
 * (Qwen2.5-Coder-1.5B answers so under its own template; llama.cpp reads these too). While a
 * reply could still be one (white space, then "{" or the fence), its content is held back and
 * decided at its end.
 *
 * Arguments come back as JSON text as Python's json.dumps writes it (what vLLM returns): the
 * model's object re-serialised, or, when the model wrote the arguments as a JSON string holding
 * JSON, that string's text. */
#ifndef RAD_CHAT_CALLS_H
#define RAD_CHAT_CALLS_H

#include <stddef.h>
#include <stdint.h>

#include "abi/rad_arch.h"
#include "libcommon/base/rad_buf.h"
#include "libcommon/base/rad_err.h"

struct json_t;

typedef struct RadToolCall {
    char *name;                    /* malloc'd */
    char *arguments;               /* malloc'd JSON text */
} RadToolCall;

typedef struct RadChatCalls {
    const char *start, *end;       /* the format's markers; NULL: everything is content */
    const struct json_t *tools;    /* the request's tools (a call must name one); NULL: any name */
    uint32_t max;                  /* calls kept (parallel_tool_calls false: 1); 0: no limit */
    int inside;                    /* after a start marker, before its end */
    RadBuf call;                   /* the current call's text, after its start marker */
    RadBuf ws;                     /* content that is only white space so far, held */
    int bare;                      /* the reply may still be a bare call: its content so far is held */
    RadBuf held;                   /* that content */
    char hold[64];                 /* a marker's possible beginning, not yet decided */
    size_t n_hold;
    RadToolCall *calls;            /* [n] the calls read so far */
    size_t n, cap;
} RadChatCalls;

/* f NULL, or a format without tool markup: every byte is content. */
void rad_chat_calls_init(RadChatCalls *c, const RadChatFormat *f, const struct json_t *tools, uint32_t max);
/* The next n bytes of the reply: content goes to *content (grown; may be NULL initially), calls
 * to c->calls. RAD_E_NOMEM only. */
int rad_chat_calls_feed(RadChatCalls *c, const char *p, size_t n, RadBuf *content, RadErr *e);
/* The reply's end: what is held back is released where it belongs. */
int rad_chat_calls_flush(RadChatCalls *c, RadBuf *content, RadErr *e);
void rad_chat_calls_free(RadChatCalls *c);

#endif
