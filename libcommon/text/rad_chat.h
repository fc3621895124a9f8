/* rad_chat.h — chat requests in a model's chat format (abi/rad_arch.h, RadChatFormat):
 *
 *   - an OpenAI `messages` list (JSON) into a list of turns;
 *   - turns into the prompt text the model's template writes (rad_chat_render);
 *   - generated text split into reasoning and content where the format names reasoning
 *     markup (rad_chat_split_*), for `reasoning_content`, one chunk at a time or at once.
 *
 * Rendering follows the format's fields as data:
 *
 *   [bos] [system_start SYS system_end] ( user_start C user_end | assistant_start C assistant_end
 *        | system_start C system_end | TOOL_START C user_end )* [assistant_start]
 *
 *   - SYS is the content of a first `system` (or `developer`) message, else the format's
 *     default_system, else nothing. With RAD_CHAT_SYSTEM_IN_FIRST_USER (Llama 2) the system
 *     block goes inside the first user turn, after user_start, and a later system message
 *     is refused (the template cannot place it).
 *   - A `tool` message (a tool's result) is a turn of role "tool" where the format's user_start
 *     names the role in text ("<|im_start|>user\n" -> "<|im_start|>tool\n"; Llama 3:
 *     "ipython", as its template writes it); formats without a named role refuse it.
 *   - The generation prompt (assistant_start) ends the text when RAD_CHAT_GEN_PROMPT is set.
 *   - BOS: with RAD_CHAT_NO_AUTO_BOS the format's `bos` text is the BOS: it opens the text and
 *     the text is encoded without special tokens. Otherwise the text is encoded with the
 *     tokenizer's own rule (add_special = 1: BOS when tokenizer.add_bos says so), and `bos`
 *     text opens it only when the tokenizer has no BOS token at all. Either way a model gets
 *     exactly one BOS, where its template writes one.
 */
#ifndef RAD_CHAT_H
#define RAD_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "abi/rad_arch.h"
#include "libcommon/base/rad_buf.h"
#include "libcommon/base/rad_err.h"
#include "libcommon/tok/rad_tok.h"

struct json_t;

typedef enum RadChatRole { RAD_ROLE_SYSTEM = 0, RAD_ROLE_USER, RAD_ROLE_ASSISTANT, RAD_ROLE_TOOL } RadChatRole;

/* A call an assistant message made (OpenAI's tool_calls[i].function). */
typedef struct RadChatCall {
    const char *name;
    struct json_t *args;           /* the arguments, parsed (OpenAI sends them as a JSON string) */
} RadChatCall;

typedef struct RadChatMsg {
    RadChatRole role;
    const char *content;           /* NUL-terminated UTF-8 */
    const RadChatCall *calls;      /* assistant: [n_calls] tool calls after the content */
    size_t n_calls;
} RadChatMsg;

/* A messages list read from JSON: msgs[] point into storage owned here. */
typedef struct RadChatMsgs {
    RadChatMsg *m;
    size_t n;
    char **owned;                  /* [n] joined text parts (or NULL when borrowed from the JSON) */
    RadChatCall **calls;           /* [n] each message's calls (owned; args a reference each) */
} RadChatMsgs;

/* Reads an OpenAI `messages` array: objects with "role" (system, developer = system, user,
 * assistant, tool) and "content" (a string, an array of {"type":"text","text":...} parts joined
 * with no separator, or null/absent for an assistant message). An assistant message's
 * "tool_calls" ([{"type": "function", "function": {"name", "arguments"}}], arguments a JSON text
 * or an object) are read into RadChatCall; arguments that are not JSON are refused. The strings are borrowed from
 * `messages`, which must outlive *out. RAD_E_ARG with a one-line message on a malformed list;
 * `param` (when non-NULL, cap bytes) receives the offending field as OpenAI names it
 * ("messages[2].content"). */
int rad_chat_msgs_from_json(const struct json_t *messages, RadChatMsgs *out, char *param, size_t cap, RadErr *e);
void rad_chat_msgs_free(RadChatMsgs *m);

/* Flags for rad_chat_render. */
#define RAD_CHAT_GEN_PROMPT 1u     /* end with the assistant's turn opening (add_generation_prompt) */
#define RAD_CHAT_TOK_HAS_BOS 2u    /* the tokenizer has a BOS token (rad_tok_bos >= 0) */

#define RAD_CHAT_SPECIAL_IN_CONTENT 4u /* rad_chat_encode: special-token text in message content
                                          becomes control tokens (--chat-special-tokens) */

/* Renders turns as the header comment says. *text is malloc'd, NUL-terminated, *len bytes;
 * *add_special is what to pass to rad_tok_encode. RAD_E_ARG when there is nothing to render or
 * the format cannot place a turn. */
/* A chat format a plugin returned, checked before anything reads it: struct_size covers ABI 1.0's
 * fields (through flags), kind and the six markers are strings (may be ""), each string at most
 * 4096 bytes, stop at most 16 entries. RAD_E_FORMAT naming the plugin and the field. */
int rad_chat_format_check(const RadChatFormat *f, const char *plugin, RadErr *e);
/* plugin->chat_format(meta), checked: *out NULL (RAD_OK) when the plugin gives none. */
struct RadPlugin;
int rad_chat_format_get(const struct RadPlugin *plugin, const RadModelMeta *meta, const RadChatFormat **out, RadErr *e);

int rad_chat_render(const RadChatFormat *f, const RadChatMsg *msgs, size_t n, unsigned flags, char **text, size_t *len,
                    int *add_special, RadErr *e);
/* The same with a request's `tools` (a JSON array of tool objects, each rendered whole as
 * Jinja's tojson writes it; NULL or empty: none), in the system turn as the format's tools_*
 * fields say. RAD_E_ARG when tools are given and the format renders none (tools_start NULL).
 * Tool calls in assistant messages and tool results are rendered with the format's tool_* fields
 * whether or not tools are given (as the templates do). */
int rad_chat_render_tools(const RadChatFormat *f, const RadChatMsg *msgs, size_t n, const struct json_t *tools,
                          unsigned flags, char **text, size_t *len, int *add_special, RadErr *e);
/* Whether the format renders tools (ABI 1.7's tools_start, within its struct_size). */
int rad_chat_has_tools(const RadChatFormat *f);

/* Renders and encodes a chat prompt, what the server and --chat feed the model. The template's
 * markup (and the format's default system text) is encoded with special tokens matched; message
 * content is encoded as text (rad_tok_encode_spans: "<|im_end|>" in content is the ordinary
 * pieces of that text, never the control token), unless flags has RAD_CHAT_SPECIAL_IN_CONTENT.
 * The text is encoded in one pass, so a chat whose content spells no special token gets exactly
 * the ids of rad_tok_encode on the rendered text. RAD_CHAT_TOK_HAS_BOS is taken from tok.
 * *ids is malloc'd; text/len (either may be NULL) receive the rendered text (malloc'd). */
int rad_chat_encode(const RadChatFormat *f, const RadTok *tok, const RadChatMsg *msgs, size_t n, unsigned flags,
                    int32_t **ids, size_t *n_ids, char **text, size_t *len, RadErr *e);
/* With tools (rad_chat_render_tools); the tools' JSON and the calls' names and arguments are
 * content: encoded as text. */
int rad_chat_encode_tools(const RadChatFormat *f, const RadTok *tok, const RadChatMsg *msgs, size_t n,
                          const struct json_t *tools, unsigned flags, int32_t **ids, size_t *n_ids, char **text, size_t *len,
                          RadErr *e);

/* The tokens that end an assistant turn, for RadGenReq.stop_ids: each of the format's stop
 * strings, and its assistant_end, that the tokenizer encodes as exactly one special token
 * (ChatML's <|im_end|>, Llama 3's <|eot_id|> and <|eom_id|>), each id once, into
 * ids[RAD_CHAT_MAX_STOP_IDS]. Text that encodes otherwise ("<|im_end|>\n", a plain word) gives
 * none. A format whose turn end is neither EOS nor EOT stops on it this way. */
#define RAD_CHAT_MAX_STOP_IDS 17   /* stop (at most 16, rad_chat_format_check) + assistant_end */
int rad_chat_stop_ids(const RadChatFormat *f, const RadTok *tok, int32_t *ids, uint32_t *n, RadErr *e);

/* Reasoning split. Text between reasoning_start and reasoning_end goes to reasoning, the rest to
 * content; newlines right after reasoning_end are dropped (the model writes "</think>\n\n"
 * before its answer). A chat whose prompt ends inside reasoning (a generation prompt that opens
 * with reasoning_start) starts in reasoning. Without reasoning markup in the format everything
 * is content. Markers split across chunks are held back until they are decided. */
typedef struct RadChatSplit {
    const char *start, *end;       /* markers, or NULL */
    int in_reasoning;
    int after_end;                 /* drop newlines that open the content */
    char hold[64];                 /* a marker's possible beginning, not yet decided */
    size_t n_hold;
} RadChatSplit;

/* in_reasoning: 1 when the prompt left the model inside reasoning (see rad_chat_prompt_opens_reasoning). */
void rad_chat_split_init(RadChatSplit *s, const RadChatFormat *f, int in_reasoning);
/* Appends the content and reasoning parts of the next chunk to the two growing buffers
 * (malloc'd, NUL-terminated, may be NULL initially). RAD_E_NOMEM only. */
int rad_chat_split_feed(RadChatSplit *s, const char *chunk, size_t n, RadBuf *content, RadBuf *reasoning,
                        RadErr *e);
/* End of the text: what was held back is released where it belongs. */
int rad_chat_split_flush(RadChatSplit *s, RadBuf *content, RadBuf *reasoning, RadErr *e);

/* 1 when the rendered prompt ends (after white space) with the format's reasoning_start. */
int rad_chat_prompt_opens_reasoning(const RadChatFormat *f, const char *prompt, size_t len);

#endif
