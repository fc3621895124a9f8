#include "rad_kvcache.h"

#include <stdlib.h>
#include <string.h>

int rad_kvcache_init(RadKvCache *c, uint32_t block_size, uint32_t n_blocks, uint32_t max_ctx, uint32_t max_seqs,
                     uint32_t n_layers, uint64_t block_bytes, RadErr *e) {
    memset(c, 0, sizeof *c);
    if (!block_size || !n_blocks || !max_seqs || !n_layers)
        return rad_err_set(e, RAD_E_ARG, "KV cache: block size, blocks, sequences and layers must be non-zero");
    c->block_size = block_size;
    c->n_blocks = n_blocks;
    c->max_blocks = (max_ctx + block_size - 1) / block_size;
    c->block_bytes = block_bytes;
    c->n_layers = n_layers;
    c->max_seqs = max_seqs;
    c->pools = calloc(n_layers, sizeof *c->pools);
    c->free_list = malloc(n_blocks * sizeof *c->free_list);
    c->seqs = calloc(max_seqs, sizeof *c->seqs);
    c->table = calloc((size_t)max_seqs * c->max_blocks, sizeof *c->table);
    if (!c->pools || !c->free_list || !c->seqs || !c->table) goto oom;
    for (uint32_t l = 0; l < n_layers; l++)
        if (!(c->pools[l] = calloc(n_blocks, block_bytes))) goto oom;
    for (uint32_t i = 0; i < n_blocks; i++) c->free_list[i] = (int32_t)(n_blocks - 1 - i);
    c->n_free = n_blocks;
    for (uint32_t s = 0; s < max_seqs; s++) {
        c->seqs[s].id = -1;
        c->seqs[s].blocks = c->table + (size_t)s * c->max_blocks;
    }
    return RAD_OK;
oom:
    rad_kvcache_free(c);
    return rad_err_set(e, RAD_E_NOMEM, "KV cache: cannot allocate %u blocks of %llu bytes for %u layers", n_blocks,
                       (unsigned long long)block_bytes, n_layers);
}

void rad_kvcache_free(RadKvCache *c) {
    if (c->pools)
        for (uint32_t l = 0; l < c->n_layers; l++) free(c->pools[l]);
    free(c->pools);
    free(c->free_list);
    free(c->seqs);
    free(c->table);
    memset(c, 0, sizeof *c);
}

int rad_kvcache_seq(RadKvCache *c, int32_t seq_id) {
    int free_slot = -1;
    for (uint32_t s = 0; s < c->max_seqs; s++) {
        if (c->seqs[s].id == seq_id) return (int)s;
        if (c->seqs[s].id < 0 && free_slot < 0) free_slot = (int)s;
    }
    if (free_slot >= 0) {
        c->seqs[free_slot].id = seq_id;
        c->seqs[free_slot].len = 0;
    }
    return free_slot;
}

int rad_kvcache_reserve(RadKvCache *c, int slot, uint32_t len, RadErr *e) {
    RadKvSeq *s = &c->seqs[slot];
    uint32_t have = (s->len + c->block_size - 1) / c->block_size;
    uint32_t need = (len + c->block_size - 1) / c->block_size;
    if (need > c->max_blocks)
        return rad_err_set(e, RAD_E_LIMIT, "sequence of %u tokens exceeds the context served (%u)", len,
                           c->max_blocks * c->block_size);
    if (need > have && need - have > c->n_free)
        return rad_err_set(e, RAD_E_LIMIT, "KV cache full: %u more blocks needed, %u free", need - have, c->n_free);
    for (uint32_t b = have; b < need; b++) s->blocks[b] = c->free_list[--c->n_free];
    if (len > s->len) s->len = len;
    return RAD_OK;
}

uint32_t rad_kvcache_need(const RadKvCache *c, int32_t seq_id, uint32_t len) {
    uint32_t held = 0;
    for (uint32_t s = 0; s < c->max_seqs; s++)
        if (c->seqs[s].id == seq_id) held = c->seqs[s].len;
    uint32_t have = (held + c->block_size - 1) / c->block_size, need = (len + c->block_size - 1) / c->block_size;
    return need > have ? need - have : 0;
}

void rad_kvcache_release(RadKvCache *c, int slot) {
    RadKvSeq *s = &c->seqs[slot];
    uint32_t have = (s->len + c->block_size - 1) / c->block_size;
    for (uint32_t b = have; b-- > 0;) c->free_list[c->n_free++] = s->blocks[b];
    s->len = 0;
    s->id = -1;
}
