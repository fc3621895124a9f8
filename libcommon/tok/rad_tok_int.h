/* rad_tok_int.h — what the tokenizer's files share (rad_tok*.c); not part of libcommon's API. */
#ifndef RAD_TOK_INT_H
#define RAD_TOK_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "libcommon/tok/rad_tok.h"

#define TOK_MAX_VOCAB (1u << 24)   /* ids must fit 24 bits (as the tokenizer.json reader's cap) */
#define TOK_MAX_LEN 65535u         /* bytes in one token */
#define TOK_MAX_RE 2               /* pre-tokenizer regexes applied in turn */

enum { TOKK_BPE = 1, TOKK_SPM = 2, TOKK_WPM = 3 };
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };
enum {
    TF_ADDED = 1,   /* matched in the text before the model runs */
    TF_SPECIAL = 2, /* an added token that decode's skip_special leaves out */
    TF_BYTE = 4,    /* SentencePiece "<0xNN>": stands for one byte (TokEntry.byte) */
};

typedef struct TokEntry {
    uint32_t text_off, text_len;   /* the token as the table spells it (arena) */
    uint32_t spell_off, spell_len; /* as the model looks it up: byte-level tokens not in GPT-2's
                                      alphabet are respelled in it, SentencePiece space runs as
                                      "▁" runs (what transformers does; docs/TOKENIZER.md) */
    uint32_t nchars;               /* code points in the spelling */
    uint32_t grank;                /* SentencePiece without merges: merge priority (lower first) */
    uint8_t type, flags, byte;
} TokEntry;

/* Open addressing, power-of-two sized. */
typedef struct StrMap {
    uint32_t *slot; /* id + 1; 0 empty */
    uint64_t mask;
} StrMap;

typedef struct PairMap {
    uint64_t *key;  /* (a << 32 | b); UINT64_MAX empty */
    uint32_t *rank;
    int32_t *id;
    uint64_t mask;
} PairMap;

/* The added tokens as a byte trie: child of (node, byte) through a hash. */
typedef struct Trie {
    uint64_t *key;   /* (node << 8 | byte) + 1; 0 empty */
    uint32_t *child;
    uint64_t mask;
    int32_t *term;   /* [n_nodes] token id ending here, or -1 */
    uint32_t n_nodes;
    uint8_t first[32]; /* bitset of first bytes */
} Trie;

struct RadTok {
    int kind;
    uint32_t n;
    uint32_t max_spell;  /* the longest spelling, in bytes */
    TokEntry *tok;
    char *arena;
    StrMap vocab;       /* spelling -> id (the last id when two tokens are spelled alike) */
    PairMap merges;     /* (left id, right id) -> rank, result */
    bool has_merges;
    bool ignore_merges; /* a word in the vocabulary is one token (llama-bpe) */
    bool spm_by_id;     /* SentencePiece without merges: rank merges by token id, not score */
    Trie added;
    bool has_added;
    int32_t bos, eos, eot, unk;
    bool add_bos, add_eos, add_space_prefix;
    int32_t byte_id[256];  /* byte-level: the token of byte b; SentencePiece: "<0xNN>", or -1 */
    uint16_t byte_char[256]; /* GPT-2's byte -> code point map */
    int16_t char_byte[324];  /* and back; -1 outside the alphabet */
    /* WordPiece ("bert"): BertNormalizer's steps, the continuation prefix, the template */
    bool wp_clean, wp_cjk, wp_strip, wp_lower, wp_cleanup;
    char wp_prefix[32];
    uint32_t wp_prefix_len, wp_max_chars;
    int32_t cls, sep;
    pcre2_code *re[TOK_MAX_RE];
    int n_re;
    char pre[32];
};

/* Growable id output. */
typedef struct IdVec {
    int32_t *p;
    size_t n, cap;
} IdVec;
int tok_idvec_push(IdVec *v, int32_t id, RadErr *e);

/* Scratch for BPE merging and pre-tokenization, reused across words within one call. */
typedef struct TokWork {
    struct TokSym *sym;
    size_t sym_cap;
    struct TokHeapEnt *heap;
    size_t heap_n, heap_cap;
    char *buf;
    size_t buf_cap;
    char *cat;           /* two spellings joined, to look the pair up */
    size_t cat_cap;
    size_t *piece;       /* pre-tokenizer pieces: (off, len) pairs */
    size_t piece_n, piece_cap;
    size_t *piece2;
    size_t piece2_cap;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
} TokWork;
void tok_work_free(TokWork *w);
int tok_work_buf(TokWork *w, size_t n, RadErr *e);

static inline const char *tok_spell(const RadTok *t, int32_t id, uint32_t *len) {
    *len = t->tok[id].spell_len;
    return t->arena + t->tok[id].spell_off;
}
static inline const char *tok_text(const RadTok *t, int32_t id, uint32_t *len) {
    *len = t->tok[id].text_len;
    return t->arena + t->tok[id].text_off;
}

/* Length of the UTF-8 character at p (n bytes left): 1..4 for a well-formed one, else 0. */
size_t tok_utf8_len(const uint8_t *p, size_t n);

/* Maps (rad_tok_vocab.c). */
uint64_t tok_hash(const void *p, size_t n);
int tok_strmap_build(RadTok *t, RadErr *e);
int32_t tok_vocab_find(const RadTok *t, const char *s, size_t n);
int tok_pairmap_init(PairMap *m, uint64_t n, RadErr *e);
void tok_pairmap_put(PairMap *m, int32_t a, int32_t b, uint32_t rank, int32_t id);
bool tok_pairmap_get(const PairMap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *id);
void tok_pairmap_free(PairMap *m);
int tok_trie_build(RadTok *t, RadErr *e);
void tok_trie_free(Trie *tr);
/* The longest added token starting at s (n bytes left): its id and length, or -1. */
int32_t tok_trie_match(const Trie *tr, const uint8_t *s, size_t n, size_t *len);

/* BPE (rad_tok_bpe.c). */
void tok_bytelevel_map(RadTok *t);
int tok_pre_init(RadTok *t, const char *pre, const char *pattern, RadErr *e);
void tok_pre_free(RadTok *t);
/* Merges the symbols in w->sym[0..n) (ids) as Hugging Face's BPE does and appends the result. */
int tok_bpe_merge(const RadTok *t, TokWork *w, size_t n, IdVec *out, RadErr *e);
int tok_sym_reserve(TokWork *w, size_t n, RadErr *e);
void tok_sym_set(TokWork *w, size_t i, int32_t id);
int tok_encode_bytelevel(const RadTok *t, TokWork *w, const uint8_t *s, size_t n, IdVec *out,
                         RadErr *e);

/* SentencePiece (rad_tok_spm.c). */
int tok_spm_init(RadTok *t, const RadDict *kv, RadErr *e);
int tok_encode_spm(const RadTok *t, TokWork *w, const uint8_t *s, size_t n, IdVec *out, RadErr *e);

/* WordPiece (rad_tok_wpm.c). */
int tok_encode_wpm(const RadTok *t, const uint8_t *s, size_t n, IdVec *out, RadErr *e);
/* HF's WordPiece decoder: tokens joined by " ", a continuation's prefix removed, cleanup. */
int tok_decode_wpm(const RadTok *t, const int32_t *ids, size_t n, bool skip, RadBuf *b, RadErr *e);
int tok_piece_wpm(const RadTok *t, int32_t id, RadBuf *b);

/* Unicode tables (rad_tok_unicode.c, generated by scripts/gen-tok-unicode.py). */
typedef struct UniRange {
    uint32_t lo, hi;
} UniRange;
typedef struct UniClass {
    uint32_t lo, hi;
    uint8_t ccc;
} UniClass;
typedef struct UniMap { /* cp -> uni_pool[off .. off+len) */
    uint32_t cp;
    uint16_t off;
    uint8_t len;
} UniMap;
typedef struct UniLower { /* every step-th code point of lo..hi lowercases to itself + delta */
    uint32_t lo, hi;
    int32_t delta;
    uint8_t step;
} UniLower;
extern const UniRange uni_other[], uni_mn[], uni_punct[];
extern const UniClass uni_ccc[];
extern const UniMap uni_nfd[], uni_lower_multi[];
extern const UniLower uni_lower[];
extern const uint32_t uni_pool[];
extern const uint32_t uni_other_n, uni_mn_n, uni_punct_n, uni_ccc_n, uni_nfd_n, uni_lower_multi_n, uni_lower_n,
    uni_pool_n;

#endif
