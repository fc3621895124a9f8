/* rad_constrain.h — constrained sampling: which tokens may come next under a grammar
 * (libcommon/text/rad_grammar.h, a byte-level automaton compiled from a JSON Schema).
 *
 * A token may come next when every byte of it (rad_tok_piece's bytes, what the reply streams)
 * steps the automaton to a live state. The vocabulary is a trie of those bytes, built once per
 * tokenizer (RadTokTrie) and shared read-only by every request; a state's mask is one walk of
 * the trie that prunes a subtree at its first dead byte, cached per automaton state, so a
 * reply pays for each state it reaches once and afterwards a bitset lookup a token. The turn's
 * end tokens (EOS, EOT, the chat format's turn end) are allowed exactly when the bytes so far
 * are a whole value, and are the only choice once nothing else can follow. Special tokens are
 * never allowed otherwise (their text is no JSON). A run of white space is cut at
 * RAD_CONSTRAIN_WS_MAX bytes (tokens that are only white space are masked past it), so a
 * model cannot pad forever inside valid JSON. */
#ifndef RAD_CONSTRAIN_H
#define RAD_CONSTRAIN_H

#include <stdint.h>

#include "libcommon/base/rad_err.h"
#include "libcommon/text/rad_grammar.h"
#include "libcommon/tok/rad_tok.h"

#define RAD_CONSTRAIN_WS_MAX 64        /* white-space bytes in a row, at most */
#define RAD_CONSTRAIN_MASKS_MAX 512    /* cached masks per request, by state id modulo this (a clash recomputes): 9.7 MB at Qwen's 151936 tokens */

typedef struct RadTokTrie RadTokTrie;

/* The vocabulary's non-special tokens as a byte trie. RAD_E_NOMEM only. */
int rad_tok_trie_init(RadTokTrie **out, const RadTok *tok, RadErr *e);
void rad_tok_trie_free(RadTokTrie *t);
uint32_t rad_tok_trie_vocab(const RadTokTrie *t);

typedef struct RadConstraint {
    RadGrammar *g;                 /* owned */
    const RadTokTrie *trie;        /* shared, outlives the constraint */
    int32_t state;                 /* after the reply so far: the grammar's (>= 0), or -(3 + p) once p suffix bytes followed */
    uint32_t ws_run;               /* white-space bytes at the reply's end */
    int32_t end[8];                /* the turn's end tokens */
    uint32_t n_end;
    uint32_t words;                /* 64-bit words of a mask: (n_vocab + 63) / 64 */
    uint64_t **masks;              /* [n_masks] cached masks by slot; NULL: not computed */
    int32_t *mask_state;           /* [n_masks] the state each slot holds (-1: empty) */
    uint32_t n_masks;
    uint64_t *allow;               /* [words] this step's mask (the cached one, adjusted) */
    uint64_t n_steps, n_walks;     /* masks asked for, and trie walks they took (the rest hit the cache) */
    char suffix[16];               /* bytes that must follow the grammar's value (rad_constraint_set_suffix) */
    uint32_t suffix_len;
} RadConstraint;

/* Takes g (freed by rad_constraint_free, also on failure). end: the tokens that end the reply
 * (at most 8; ids outside the vocabulary are left out). */
int rad_constraint_init(RadConstraint *c, RadGrammar *g, const RadTokTrie *trie, const int32_t *end, uint32_t n_end,
                        RadErr *e);
void rad_constraint_free(RadConstraint *c);
/* This step's allowed tokens: *allow points at a bitset of n_vocab bits (valid until the next
 * call). RAD_E_LIMIT (message) when the automaton ran out of states or no token can continue
 * (a vocabulary without the bytes the grammar needs). */
int rad_constraint_mask(RadConstraint *c, const uint64_t **allow, RadErr *e);
/* The sampled token's bytes step the automaton (an end token leaves it). RAD_E_ARG if the token
 * was not allowed. */
int rad_constraint_accept(RadConstraint *c, const RadTok *tok, int32_t token, RadErr *e);
/* The value must be followed by these bytes (at most 15) before the reply may end: a forced
 * tool call's arguments, then the format's close of the call ("}\n</tool_call>"). Set before
 * the first mask. */
int rad_constraint_set_suffix(RadConstraint *c, const char *suffix, RadErr *e);
/* 1 when the reply is a whole value and nothing but its end can follow. */
int rad_constraint_done(const RadConstraint *c);

#endif
