/* rad_kvcache.h — the paged KV block manager: one block pool per KV group, blocks of the size
 * the resolved attention kernel requires, a free list, and each sequence's block table. Every
 * layer bound to a group has its own pool memory, indexed by the same block ids (docs/OPS.md,
 * "the pool layout"). */
#ifndef RAD_KVCACHE_H
#define RAD_KVCACHE_H

#include <stdint.h>

#include "rad_err.h"

typedef struct RadKvSeq {
    int32_t id;             /* the engine's sequence id; -1: slot free */
    uint32_t len;           /* tokens held */
    int32_t *blocks;        /* [max_blocks] block ids, first ceil(len/B) valid */
} RadKvSeq;

typedef struct RadKvCache {
    uint32_t block_size;    /* B: tokens per block */
    uint32_t n_blocks;      /* blocks in the pool */
    uint32_t max_blocks;    /* per sequence: ceil(max_ctx / B) */
    uint64_t block_bytes;   /* one block of one layer (K and V) */
    uint32_t n_layers;      /* layers bound to the group */
    uint8_t **pools;        /* [n_layers] n_blocks * block_bytes each */
    int32_t *free_list;     /* [n_blocks] stack of free ids */
    uint32_t n_free;
    RadKvSeq *seqs;         /* [max_seqs] */
    uint32_t max_seqs;
    int32_t *table;         /* [max_seqs][max_blocks]: block tables of the step's sequences */
} RadKvCache;

int rad_kvcache_init(RadKvCache *c, uint32_t block_size, uint32_t n_blocks, uint32_t max_ctx, uint32_t max_seqs,
                     uint32_t n_layers, uint64_t block_bytes, RadErr *e);
void rad_kvcache_free(RadKvCache *c);

/* The slot of a sequence (allocated on first use), or -1 when every slot is taken. */
int rad_kvcache_seq(RadKvCache *c, int32_t seq_id);
/* Grows a sequence to hold `len` tokens; RAD_E_LIMIT naming the need when blocks run out
 * (nothing is allocated then). */
int rad_kvcache_reserve(RadKvCache *c, int slot, uint32_t len, RadErr *e);
/* Blocks that growing sequence seq_id (a slot or not) to `len` tokens would take. */
uint32_t rad_kvcache_need(const RadKvCache *c, int32_t seq_id, uint32_t len);
/* Drops a sequence and returns its blocks. */
void rad_kvcache_release(RadKvCache *c, int slot);

#endif
