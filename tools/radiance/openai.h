/* openai.h — the OpenAI-compatible API's JSON: request bodies into generation requests, and
 * results into response objects, stream chunks and error objects. No HTTP here (server.c). */
#ifndef RADIANCE_OPENAI_H
#define RADIANCE_OPENAI_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "libcommon/text/rad_chat.h"
#include "libcommon/text/rad_chat_calls.h"
#include "libcommon/runtime/rad_sched.h"
#include "libcommon/tok/rad_tok.h"

#define API_MAX_N 128        /* choices per request (n x prompts) */
#define API_MAX_STOP 16      /* stop strings */
#define API_MAX_STOP_LEN 256 /* bytes per stop string */

/* An error as OpenAI shapes it: {"error": {"message", "type", "param", "code"}}. */
typedef struct ApiErr {
    int status;              /* HTTP status */
    const char *type;        /* "invalid_request_error", "authentication_error", "server_error", ... */
    const char *code;        /* NULL or "model_not_found", "context_length_exceeded", ... */
    char param[256];         /* "" when none; a schema keyword's path fits */
    char msg[512];
} ApiErr;

/* Fills e; returns e->status. */
int api_err(ApiErr *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* The error body (malloc'd JSON text). */
char *api_err_body(const ApiErr *e);

/* What the server knows that a request is checked against. */
typedef struct ApiCtx {
    const char *model;                /* served model name */
    const RadTok *tok;
    const RadChatFormat *chat;        /* NULL: /v1/chat/completions is refused */
    int32_t chat_stop_ids[RAD_CHAT_MAX_STOP_IDS]; /* the format's turn-end tokens (rad_chat_stop_ids) */
    uint32_t n_chat_stop_ids;
    int chat_special;                 /* --chat-special-tokens: content may spell control tokens */
    uint32_t default_max_tokens;      /* --default-max-tokens: a request that omits max_tokens (0: OpenAI's) */
    uint32_t max_ctx;                 /* prompt + generated tokens */
    RadSamplerParams defaults;        /* from the container's generation.* keys */
    /* an embedding model (0: a generation model, whose /v1/embeddings is refused) */
    uint32_t embed_dim;               /* the pooled row's width */
    uint32_t embed_max;               /* tokens an input may hold (rad_engine_embed_max) */
    int embed_normalized;             /* the model's rows are unit length (pooling.normalize) */
    const uint32_t *embed_dims;       /* [n_embed_dims] sizes `dimensions` may ask below embed_dim (pooling.dims) */
    uint32_t n_embed_dims;
} ApiCtx;

typedef enum ApiKind { API_COMPLETIONS = 0, API_CHAT = 1, API_EMBEDDINGS = 2 } ApiKind;

#define API_MAX_INPUTS 2048  /* /v1/embeddings: inputs per request (OpenAI's limit) */

/* A parsed generation request. */
typedef struct ApiReq {
    ApiKind kind;
    int stream, include_usage;
    uint32_t n;                       /* choices per prompt */
    uint32_t n_prompts;
    int32_t **prompt;                 /* [n_prompts][n_prompt[i]] token ids */
    uint32_t *n_prompt;
    RadSamplerParams sp;              /* bias points into `bias`; seed is the base seed */
    RadLogitBias *bias;
    int have_seed;                    /* the request gave a seed */
    uint32_t max_tokens;              /* 0: up to the context */
    int max_tokens_default;           /* max_tokens was not given: the default, cut to what the context leaves */
    char **stop;
    uint32_t n_stop;
    int logprobs;                     /* per-token logprobs wanted */
    uint32_t top_logprobs;
    int in_reasoning;                 /* chat: the prompt left the model inside reasoning */
    json_t *tools;                    /* chat: the tools offered (a reference; NULL: none, or tool_choice "none") */
    char *tool_prefix;                /* tool_choice "required" or a function: the call's opening the prompt ends
                                         with (the format's tool_call_open [NAME tool_call_mid]); NULL otherwise */
    int parallel_tool_calls;          /* 0: at most one call is returned */
    int json_mode;                    /* response_format json_object or json_schema: the reply is constrained */
    json_t *schema;                   /* json_schema's schema (a reference; checked: it compiles), or NULL */
    json_t *args_schema;              /* a forced call to a strict function: its parameters (a reference; checked),
                                         the arguments constrained to them, then the call's closing "}" */
    int call_schema;                  /* tool_choice "required" among several tools: args_schema is the whole call,
                                         {"name": one of them, "arguments": its parameters if strict, else an object},
                                         after tool_prefix (the format's opening up to the call's "{") */
    /* /v1/embeddings: the inputs are prompt[0..n_prompts) */
    int base64;                       /* encoding_format "base64": little-endian f32 bytes */
    uint32_t dimensions;              /* the width returned (embed_dim, or one of embed_dims) */
    int no_spec;                      /* "speculative": false (an extension): no drafts for this request */
} ApiReq;

/* Parses and checks a /v1/completions or /v1/chat/completions body. Returns 0 or the HTTP
 * status of the error in e (400 invalid_request_error with param, 404 model_not_found). */
int api_parse(ApiKind kind, const char *body, size_t len, const ApiCtx *cx, ApiReq *out, ApiErr *e);
void api_req_free(ApiReq *r);

/* Parses and checks a /v1/embeddings body: model, input (a string, an array of strings, an
 * array of token ids, or an array of such arrays; token ids are taken as given, specials not
 * added), encoding_format, dimensions, user. 0 or the HTTP status of the error in e. */
int api_parse_embeddings(const char *body, size_t len, const ApiCtx *cx, ApiReq *out, ApiErr *e);
/* The /v1/embeddings response: vec[i] is input i's row of cx->embed_dim floats, cut to
 * r->dimensions (and made unit length again when the model's rows are). */
char *api_embeddings_response(const ApiReq *r, const ApiCtx *cx, const float *const *vec, uint32_t n, uint32_t prompt_tokens);

/* One token's logprob record. */
typedef struct ApiLp {
    int32_t token;
    float logprob;
    uint32_t n_top;
    RadGenTop top[RAD_SCHED_MAX_TOP];
    size_t text_offset;               /* completions: bytes of the choice's text before it */
} ApiLp;

/* A finished (or streaming) choice. */
typedef struct ApiChoice {
    uint32_t index;
    const char *text;                 /* completions text, or chat content */
    size_t len;
    const char *reasoning;            /* chat: reasoning_content, or NULL */
    size_t reasoning_len;
    const char *finish;               /* "stop", "length", "tool_calls", or NULL (streaming, not finished) */
    const RadToolCall *calls;         /* chat: tool calls (streaming: the ones not sent yet) */
    size_t n_calls;
    size_t call0;                     /* the index of calls[0] among the choice's calls */
    const char *call_id;              /* ids are "call_" CALL_ID (choice, 2 hex) (index, 2 hex) */
    const ApiLp *lp;                  /* [n_lp] when logprobs were asked */
    size_t n_lp;
} ApiChoice;

typedef struct ApiUsage {
    uint32_t prompt, cached, completion;
} ApiUsage;

/* The whole non-streaming response body (malloc'd JSON text). */
char *api_response(const ApiReq *r, const ApiCtx *cx, const char *id, long created, const ApiChoice *ch, uint32_t n,
                   const ApiUsage *u);
/* One streaming chunk as an SSE event "data: {...}\n\n" (malloc'd), for one choice; role_only:
 * the chat stream's first chunk of a choice (delta {"role": "assistant", "content": ""}). */
char *api_chunk(const ApiReq *r, const ApiCtx *cx, const char *id, long created, const ApiChoice *c, int role_only);
/* The final usage chunk (stream_options.include_usage): choices [] and usage. */
char *api_usage_chunk(const ApiReq *r, const ApiCtx *cx, const char *id, long created, const ApiUsage *u);
/* An error inside a stream: "data: {"error": ...}\n\n". */
char *api_stream_error(const ApiErr *e);

/* GET /v1/models (and /v1/models/ID when one is non-NULL). */
char *api_models(const ApiCtx *cx, long created);
char *api_model(const ApiCtx *cx, long created);
/* POST /tokenize and /detokenize: the response body, or NULL with e set. */
char *api_tokenize(const char *body, size_t len, const ApiCtx *cx, ApiErr *e);
char *api_detokenize(const char *body, size_t len, const ApiCtx *cx, ApiErr *e);

#endif
