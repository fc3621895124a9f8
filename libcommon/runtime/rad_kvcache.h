/* rad_kvcache.h — the paged KV block manager: one block pool per KV group, blocks of the size
 * the resolved attention kernel requires, a free list, and each sequence's block table. Every
 * layer bound to a group has its own pool memory, indexed by the same block ids (docs/OPS.md,
 * "the pool layout"). The engine owns its caches: only rad_engine.c calls these (make walls
 * refuses a tool that includes this header).
 *
 * A window group (window W > 0) keeps for each sequence only the blocks its next query can
 * see: the query at position p reads keys [p + 1 - W, p], so the blocks wholly before that are
 * released (their table entries -1) as the sequence grows. A sequence then holds at most
 * ceil(W/B) + 1 blocks between steps (a prefill chunk of q tokens, ceil((W - 1 + q)/B) + 1
 * while it runs), whatever its length. */
#ifndef RAD_KVCACHE_H
#define RAD_KVCACHE_H

#include <stdint.h>

#include "libcommon/base/rad_err.h"

typedef struct RadKvSeq {
    int32_t id;             /* the engine's sequence id; -1: slot free */
    uint32_t len;           /* tokens held (positions [0, len) written, those before first*B released) */
    uint32_t first;         /* blocks before this one were released (a window left them); 0 in a full group */
    int32_t *blocks;        /* [max_blocks] block ids, [first, ceil(len/B)) valid, -1 before first */
} RadKvSeq;

typedef struct RadKvCache {
    uint32_t block_size;    /* B: tokens per block */
    uint32_t window;        /* W: keys a query sees (a WINDOW group); 0: every key (FULL) */
    uint32_t n_blocks;      /* blocks in the pool */
    uint32_t max_blocks;    /* per sequence: ceil(max_ctx / B) */
    uint64_t block_bytes;   /* one block of one layer (K and V) */
    uint32_t n_layers;      /* layers bound to the group */
    uint8_t **pools;        /* [n_layers] n_blocks * block_bytes each, inside pool_map */
    uint8_t *pool_map;      /* one anonymous map for every layer's pool */
    size_t pool_map_bytes;  /* its length */
    uint64_t pool_stride;   /* bytes from one layer's pool to the next (whole 4 KiB pages) */
    int32_t *free_list;     /* [n_clean] stack of free blocks holding nothing */
    uint32_t n_clean;       /* blocks on free_list */
    uint32_t n_free;        /* blocks that can be taken: n_clean + free cached blocks */
    /* the prefix cache: a full block's content is named by a hash chained over the tokens of
     * it and of every block before it; free blocks keep their content until evicted */
    uint32_t *ref;          /* [n_blocks] sequences holding the block */
    uint64_t *hash;         /* [n_blocks] chain hash of a published block, 0: none */
    int32_t *lru_prev, *lru_next; /* [n_blocks] free cached blocks, least recently freed first */
    int32_t lru_head, lru_tail; /* the least and the most recently freed; -1: list empty */
    uint32_t n_cached_free; /* blocks on the LRU list */
    int32_t *map;           /* [map_cap] open addressing: hash -> block, -1 empty, -2 deleted */
    uint32_t map_cap, map_gone; /* capacity; deleted entries (rebuilt past a quarter) */
    RadKvSeq *seqs;         /* [max_seqs] */
    uint32_t max_seqs;      /* sequence slots */
    int32_t *table;         /* [max_seqs][max_blocks]: block tables of the step's sequences */
} RadKvCache;

int rad_kvcache_init(RadKvCache *c, uint32_t block_size, uint32_t window, uint32_t n_blocks, uint32_t max_ctx,
                     uint32_t max_seqs, uint32_t n_layers, uint64_t block_bytes, RadErr *e);
void rad_kvcache_free(RadKvCache *c);

/* The slot holding a sequence, or -1 (nothing is allocated). */
int rad_kvcache_find(const RadKvCache *c, int32_t seq_id);
/* The slot of a sequence (allocated on first use), or -1 when every slot is taken. */
int rad_kvcache_seq(RadKvCache *c, int32_t seq_id);
/* The first block the query at position pos reads (0 in a full group). */
uint32_t rad_kvcache_first(const RadKvCache *c, uint32_t pos);
/* A window group: releases the blocks of the slot that the query at position pos (its next
 * one, pos >= len) no longer sees. Nothing in a full group. */
void rad_kvcache_slide(RadKvCache *c, int slot, uint32_t pos);
/* Blocks rad_kvcache_slide(pos) would return to the pool (those no other sequence holds). */
uint32_t rad_kvcache_freeable(const RadKvCache *c, int32_t seq_id, uint32_t pos);
/* Grows a sequence to hold `len` tokens, the new ones from its len on (a window group first
 * slides to that position); RAD_E_LIMIT naming the need when blocks run out (nothing is
 * allocated then). */
int rad_kvcache_reserve(RadKvCache *c, int slot, uint32_t len, RadErr *e);
/* Blocks that growing sequence seq_id (a slot or not) to `len` tokens would take. */
uint32_t rad_kvcache_need(const RadKvCache *c, int32_t seq_id, uint32_t len);
/* Blocks the sequence holds now. */
uint32_t rad_kvcache_held(const RadKvCache *c, int32_t seq_id);
/* Rolls the slot back to len tokens (len < its length): the blocks wholly past len are given
 * back (held by none, they are free; a published one stays cached). */
void rad_kvcache_truncate(RadKvCache *c, int slot, uint32_t len);
/* Drops a sequence; blocks no other sequence holds become free (published ones stay cached,
 * least recently freed evicted first, until a reservation needs them). */
void rad_kvcache_release(RadKvCache *c, int slot);

/* The chain hashes (never 0) of full blocks [from, n_blocks) of tokens into out[from..): block
 * b's hash is seeded with out[b-1], which must hold already when from > 0. */
void rad_kvcache_hash_chain(const int32_t *tokens, uint32_t from, uint32_t n_blocks, uint32_t block_size, uint64_t *out);
/* How many leading hashes name cached blocks. */
uint32_t rad_kvcache_lookup(const RadKvCache *c, const uint64_t *hashes, uint32_t n);
/* Whether blocks [from, to) are all cached under hashes[from..to). */
int rad_kvcache_cached(const RadKvCache *c, const uint64_t *hashes, uint32_t from, uint32_t to);
/* A fresh sequence (slot holding nothing) takes the cached blocks named by hashes[first..n)
 * (first = rad_kvcache_first(n * block_size): a window group takes only what its next query
 * sees; each must be cached), sharing them: it then holds n * block_size tokens. */
void rad_kvcache_adopt(RadKvCache *c, int slot, const uint64_t *hashes, uint32_t n);
/* Names the sequence's block b (full, written, still held) by hash, so later sequences can
 * share it. A hash already naming another block is left as it is. */
void rad_kvcache_publish(RadKvCache *c, int slot, uint32_t b, uint64_t hash);

#endif
