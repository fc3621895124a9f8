/* rad_tok.h — the tokenizer, built from a model's `tok` table (docs/KEYS.md), whatever file it came
 * from (GGUF, tokenizer.json, .rad). Encode and decode follow Hugging Face `tokenizers` on the
 * tokenizer.json that transformers builds from the same table (docs/TOKENIZER.md):
 *
 *   tokenizer.model "gpt2"   byte-level BPE; tokenizer.pre picks the split: "gpt-2", "smollm",
 *                            "llama-bpe", "qwen2", or "default" with a tokenizer.pre_pattern
 *   tokenizer.model "llama"  SentencePiece BPE with byte fallback (Llama 2, Gemma): " " → "▁",
 *                            a "▁" before each text run when add_space_prefix, merges by rank
 *                            when the table has them, else derived from the vocabulary as
 *                            transformers does (by score; by id for Gemma's tables)
 *   tokenizer.model "bert"   WordPiece with BertNormalizer and BertPreTokenizer (a tokenizer.json's
 *                            tokenizer.bert.* / tokenizer.wordpiece.* keys); add_special is the
 *                            [CLS] $A [SEP] template (tokenizer.cls_id / sep_id)
 *
 * Added tokens (token_type 2 unknown, 3 control: special; 4 user-defined: not special) are
 * matched in the text before anything else, leftmost and longest first (special ones not in the
 * plain ranges of rad_tok_encode_spans).
 *
 * A RadTok is immutable once built: any number of threads may encode and decode with one. */
#ifndef RAD_TOK_H
#define RAD_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "libcommon/base/rad_err.h"
#include "libcommon/base/rad_dict.h"

typedef struct RadTok RadTok;

/* Builds a tokenizer from a tok table; the table may be freed afterwards. Refuses, with one line
 * naming the key, a table it cannot serve: RAD_E_UNSUPPORTED for a tokenizer.model or
 * tokenizer.pre it does not implement, RAD_E_FORMAT for a malformed one (a missing or mistyped
 * key, arrays of unequal length, an id out of range, a merge naming an unknown token, a pattern
 * that does not compile). *t is NULL on failure. */
int rad_tok_init(RadTok **t, const RadDict *tok, RadErr *e);
void rad_tok_free(RadTok *t);

/* Text (n bytes, not necessarily NUL-terminated, not necessarily valid UTF-8) to ids. Text that
 * spells an added token becomes that token. add_special adds BOS/EOS as tokenizer.add_bos /
 * add_eos say (add_bos defaults to true for "llama", false for "gpt2"). Bytes that are not UTF-8
 * are kept: byte-level BPE encodes them as their byte tokens, SentencePiece as <0xNN>, so
 * decode gives them back. *ids is malloc'd (free it); on failure *ids is NULL and *n_ids 0. */
int rad_tok_encode(const RadTok *t, const char *text, size_t n, int add_special, int32_t **ids,
                   size_t *n_ids, RadErr *e);

/* A byte range of encode's input. */
typedef struct RadTokSpan {
    size_t off, len;
} RadTokSpan;

/* rad_tok_encode where the bytes in `plain` (n_plain ranges, in order, not overlapping) are read
 * as text only: no special token (control, unknown) is matched inside a plain range or across
 * its edge; user-defined added tokens are matched as anywhere. This is Hugging Face's
 * split_special_tokens=True (and llama.cpp's parse_special=false) on those bytes; one range over
 * the whole text is HF's tokenizer(text, split_special_tokens=True). With no ranges it is
 * rad_tok_encode. A range past the text or out of order is RAD_E_ARG. Chat prompts mark message
 * content plain (rad_chat_encode), so content cannot forge the template's control tokens. */
int rad_tok_encode_spans(const RadTok *t, const char *text, size_t n, int add_special, const RadTokSpan *plain,
                         size_t n_plain, int32_t **ids, size_t *n_ids, RadErr *e);

/* Flags for rad_tok_decode. */
#define RAD_TOK_SKIP_SPECIAL 1 /* leave out special tokens (control, unknown), as HF's
                                  skip_special_tokens */
#define RAD_TOK_LOSSY 2        /* invalid UTF-8 becomes U+FFFD exactly as HF decode does;
                                  without it the bytes are returned as they are */

/* Ids to text (malloc'd, NUL-terminated, *len bytes without the NUL; free it). An id outside the
 * vocabulary is RAD_E_ARG naming its index. */
int rad_tok_decode(const RadTok *t, const int32_t *ids, size_t n, int flags, char **text,
                   size_t *len, RadErr *e);

/* The bytes one token stands for, for streaming output: a byte token is its byte, a byte-level
 * token its bytes, "▁" a space; special tokens give their text. Writes at most cap bytes (no NUL)
 * and returns the full length (so a return > cap means truncated), or -1 for an unknown id. The
 * bytes may be part of a UTF-8 character: a caller holds back an incomplete tail until the next
 * piece completes it. The leading space a dummy prefix adds is not stripped here. */
int rad_tok_piece(const RadTok *t, int32_t id, char *buf, size_t cap);

int32_t rad_tok_n_vocab(const RadTok *t);
int32_t rad_tok_bos(const RadTok *t); /* -1 when the table names none */
int32_t rad_tok_eos(const RadTok *t);
int32_t rad_tok_eot(const RadTok *t);
/* True for special tokens (token_type unknown or control), which generation does not print. */
int rad_tok_is_special(const RadTok *t, int32_t id);

/* Length of the well-formed UTF-8 character at s (1..4 bytes, within n), or 0 for an ill-formed
 * or cut one (overlongs, surrogates and code points past U+10FFFF are ill-formed). */
size_t rad_utf8_len(const char *s, size_t n);

/* Bytes at the end of s that begin a UTF-8 character more bytes could complete (0..3): what a
 * streaming caller holds back before printing. */
size_t rad_utf8_tail(const char *s, size_t n);

/* Replaces each maximal ill-formed subsequence of s with U+FFFD (Unicode's "best practice", as
 * Python's errors="replace" and Rust's from_utf8_lossy do). *out is malloc'd and NUL-terminated. */
int rad_utf8_lossy(const char *s, size_t n, char **out, size_t *out_len, RadErr *e);

#endif
