#include "libcommon/runtime/rad_kvcache.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

#define MAP_EMPTY (-1)
#define MAP_GONE (-2)

int rad_kvcache_init(RadKvCache *c, uint32_t block_size, uint32_t window, uint32_t n_blocks, uint32_t max_ctx,
                     uint32_t max_seqs, uint32_t n_layers, uint64_t block_bytes, RadErr *e) {
    memset(c, 0, sizeof *c);
    if (!block_size || !n_blocks || !max_seqs || !n_layers)
        return rad_err_set(e, RAD_E_ARG, "KV cache: block size, blocks, sequences and layers must be non-zero");
    c->block_size = block_size;
    c->window = window;
    c->n_blocks = n_blocks;
    c->max_blocks = (max_ctx + block_size - 1) / block_size;
    c->block_bytes = block_bytes;
    c->n_layers = n_layers;
    c->max_seqs = max_seqs;
    for (c->map_cap = 16; c->map_cap < 2 * n_blocks;) c->map_cap *= 2;
    c->pools = calloc(n_layers, sizeof *c->pools);
    c->free_list = malloc(n_blocks * sizeof *c->free_list);
    c->seqs = calloc(max_seqs, sizeof *c->seqs);
    c->table = calloc((size_t)max_seqs * c->max_blocks, sizeof *c->table);
    c->ref = calloc(n_blocks, sizeof *c->ref);
    c->hash = calloc(n_blocks, sizeof *c->hash);
    c->lru_prev = malloc(n_blocks * sizeof *c->lru_prev);
    c->lru_next = malloc(n_blocks * sizeof *c->lru_next);
    c->map = malloc(c->map_cap * sizeof *c->map);
    if (!c->pools || !c->free_list || !c->seqs || !c->table || !c->ref || !c->hash || !c->lru_prev || !c->lru_next ||
        !c->map)
        goto oom;
    /* One anonymous map for every layer's pool, each pool starting on a page boundary, on
     * ordinary pages, zero-filled and touched as blocks are first used. Huge pages were tried
     * (madvise): 2% faster decode at 512 tokens, but every layer enters a new 2 MiB page at the
     * same step, so one step in 85 blocks zeroes 60 MB (SmolLM2) and may wait on compaction: a
     * latency spike a server should not have. */
    {
        const uint64_t page = 4096;
        c->pool_stride = ((uint64_t)n_blocks * block_bytes + page - 1) & ~(page - 1);
        if (c->pool_stride / page > (uint64_t)SIZE_MAX / page / n_layers) goto oom;
        c->pool_map_bytes = (size_t)(c->pool_stride * n_layers);
        void *m = mmap(NULL, c->pool_map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            c->pool_map_bytes = 0;
            goto oom;
        }
        c->pool_map = m;
        for (uint32_t l = 0; l < n_layers; l++) c->pools[l] = c->pool_map + (size_t)(c->pool_stride * l);
    }
    for (uint32_t i = 0; i < n_blocks; i++) c->free_list[i] = (int32_t)(n_blocks - 1 - i);
    c->n_clean = c->n_free = n_blocks;
    for (uint32_t i = 0; i < c->map_cap; i++) c->map[i] = MAP_EMPTY;
    c->lru_head = c->lru_tail = -1;
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
    if (c->pool_map) munmap(c->pool_map, c->pool_map_bytes);
    free(c->pools);
    free(c->free_list);
    free(c->seqs);
    free(c->table);
    free(c->ref);
    free(c->hash);
    free(c->lru_prev);
    free(c->lru_next);
    free(c->map);
    memset(c, 0, sizeof *c);
}

/* ---- the hash map and the LRU list ---------------------------------------------------------- */

static uint32_t map_find(const RadKvCache *c, uint64_t h) { /* the slot holding h, or map_cap */
    for (uint32_t i = (uint32_t)h & (c->map_cap - 1), k = 0; k < c->map_cap; i = (i + 1) & (c->map_cap - 1), k++) {
        if (c->map[i] == MAP_EMPTY) return c->map_cap;
        if (c->map[i] >= 0 && c->hash[c->map[i]] == h) return i;
    }
    return c->map_cap;
}

static void map_put(RadKvCache *c, uint64_t h, int32_t b) {
    uint32_t i = (uint32_t)h & (c->map_cap - 1);
    while (c->map[i] >= 0) i = (i + 1) & (c->map_cap - 1);
    c->map[i] = b;
}

static void lru_unlink(RadKvCache *c, int32_t b) {
    int32_t p = c->lru_prev[b], n = c->lru_next[b];
    if (p >= 0) c->lru_next[p] = n;
    else c->lru_head = n;
    if (n >= 0) c->lru_prev[n] = p;
    else c->lru_tail = p;
    c->n_cached_free--;
}

static void lru_push(RadKvCache *c, int32_t b) {
    c->lru_prev[b] = c->lru_tail;
    c->lru_next[b] = -1;
    if (c->lru_tail >= 0) c->lru_next[c->lru_tail] = b;
    else c->lru_head = b;
    c->lru_tail = b;
    c->n_cached_free++;
}

/* A block to write: a clean one, else the least recently freed cached one (forgotten). */
static int32_t take_block(RadKvCache *c) {
    int32_t b;
    if (c->n_clean) {
        b = c->free_list[--c->n_clean];
    } else {
        b = c->lru_head;
        lru_unlink(c, b);
        uint32_t i = map_find(c, c->hash[b]);
        if (i < c->map_cap) c->map[i] = MAP_GONE, c->map_gone++;
        c->hash[b] = 0;
        if (c->map_gone > c->map_cap / 4) { /* deleted entries lengthen every probe: rebuild */
            for (uint32_t j = 0; j < c->map_cap; j++) c->map[j] = MAP_EMPTY;
            for (uint32_t j = 0; j < c->n_blocks; j++)
                if (c->hash[j]) map_put(c, c->hash[j], (int32_t)j);
            c->map_gone = 0;
        }
    }
    c->n_free--;
    c->ref[b] = 1;
    return b;
}

static void drop_block(RadKvCache *c, int32_t b) {
    if (--c->ref[b]) return;
    if (c->hash[b]) lru_push(c, b);
    else c->free_list[c->n_clean++] = b;
    c->n_free++;
}

/* ---- sequences -------------------------------------------------------------------------------- */

int rad_kvcache_find(const RadKvCache *c, int32_t seq_id) {
    for (uint32_t s = 0; s < c->max_seqs; s++)
        if (c->seqs[s].id == seq_id) return (int)s;
    return -1;
}

int rad_kvcache_seq(RadKvCache *c, int32_t seq_id) {
    int free_slot = rad_kvcache_find(c, seq_id);
    if (free_slot >= 0) return free_slot;
    for (uint32_t s = 0; s < c->max_seqs && free_slot < 0; s++)
        if (c->seqs[s].id < 0) free_slot = (int)s;
    if (free_slot >= 0) {
        c->seqs[free_slot].id = seq_id;
        c->seqs[free_slot].len = 0;
        c->seqs[free_slot].first = 0;
    }
    return free_slot;
}

uint32_t rad_kvcache_first(const RadKvCache *c, uint32_t pos) {
    return c->window && pos + 1 > c->window ? (pos + 1 - c->window) / c->block_size : 0;
}

/* The blocks [s->first, to) a slide to pos gives up: never past what the slot holds. */
static uint32_t slide_to(const RadKvCache *c, const RadKvSeq *s, uint32_t pos) {
    uint32_t have = (s->len + c->block_size - 1) / c->block_size, to = rad_kvcache_first(c, pos);
    return to < have ? to : have;
}

void rad_kvcache_slide(RadKvCache *c, int slot, uint32_t pos) {
    RadKvSeq *s = &c->seqs[slot];
    const uint32_t to = slide_to(c, s, pos);
    for (uint32_t b = s->first; b < to; b++) {
        drop_block(c, s->blocks[b]);
        s->blocks[b] = -1;
    }
    if (to > s->first) s->first = to;
}

uint32_t rad_kvcache_freeable(const RadKvCache *c, int32_t seq_id, uint32_t pos) {
    int slot = rad_kvcache_find(c, seq_id);
    if (slot < 0) return 0;
    const RadKvSeq *s = &c->seqs[slot];
    uint32_t n = 0;
    for (uint32_t b = s->first, to = slide_to(c, s, pos); b < to; b++) n += c->ref[s->blocks[b]] == 1;
    return n;
}

uint32_t rad_kvcache_held(const RadKvCache *c, int32_t seq_id) {
    int slot = rad_kvcache_find(c, seq_id);
    if (slot < 0) return 0;
    const RadKvSeq *s = &c->seqs[slot];
    return (s->len + c->block_size - 1) / c->block_size - s->first;
}

int rad_kvcache_reserve(RadKvCache *c, int slot, uint32_t len, RadErr *e) {
    RadKvSeq *s = &c->seqs[slot];
    if (len > s->len) rad_kvcache_slide(c, slot, s->len); /* the new tokens' first query is at s->len */
    uint32_t have = (s->len + c->block_size - 1) / c->block_size;
    uint32_t need = (len + c->block_size - 1) / c->block_size;
    if (need > c->max_blocks)
        return rad_err_set(e, RAD_E_LIMIT, "sequence of %u tokens exceeds the context served (%u)", len,
                           c->max_blocks * c->block_size);
    if (need > have && need - have > c->n_free)
        return rad_err_set(e, RAD_E_LIMIT, "KV cache full: %u more blocks needed, %u free", need - have, c->n_free);
    for (uint32_t b = have; b < need; b++) s->blocks[b] = take_block(c);
    if (len > s->len) s->len = len;
    return RAD_OK;
}

uint32_t rad_kvcache_need(const RadKvCache *c, int32_t seq_id, uint32_t len) {
    int slot = rad_kvcache_find(c, seq_id);
    uint32_t held = slot >= 0 ? c->seqs[slot].len : 0;
    uint32_t have = (held + c->block_size - 1) / c->block_size, need = (len + c->block_size - 1) / c->block_size;
    return need > have ? need - have : 0;
}

void rad_kvcache_truncate(RadKvCache *c, int slot, uint32_t len) {
    RadKvSeq *s = &c->seqs[slot];
    if (len >= s->len) return;
    uint32_t have = (s->len + c->block_size - 1) / c->block_size, keep = (len + c->block_size - 1) / c->block_size;
    if (keep < s->first) keep = s->first; /* a window's released blocks stay released */
    for (uint32_t b = have; b-- > keep;) {
        drop_block(c, s->blocks[b]);
        s->blocks[b] = -1;
    }
    s->len = len;
}

void rad_kvcache_release(RadKvCache *c, int slot) {
    RadKvSeq *s = &c->seqs[slot];
    uint32_t have = (s->len + c->block_size - 1) / c->block_size;
    for (uint32_t b = have; b-- > s->first;) drop_block(c, s->blocks[b]);
    s->len = 0;
    s->first = 0;
    s->id = -1;
}

/* ---- the prefix cache --------------------------------------------------------------------------- */

void rad_kvcache_hash_chain(const int32_t *tokens, uint32_t from, uint32_t n_blocks, uint32_t block_size, uint64_t *out) {
    uint64_t h = from ? out[from - 1] : 0x9e3779b97f4a7c15ull;
    for (uint32_t b = from; b < n_blocks; b++) {
        h = XXH3_64bits_withSeed(tokens + (size_t)b * block_size, block_size * sizeof *tokens, h);
        out[b] = h ? h : 1;
    }
}

uint32_t rad_kvcache_lookup(const RadKvCache *c, const uint64_t *hashes, uint32_t n) {
    uint32_t k = 0;
    while (k < n && map_find(c, hashes[k]) < c->map_cap) k++;
    return k;
}

int rad_kvcache_cached(const RadKvCache *c, const uint64_t *hashes, uint32_t from, uint32_t to) {
    for (uint32_t k = from; k < to; k++)
        if (map_find(c, hashes[k]) >= c->map_cap) return 0;
    return 1;
}

void rad_kvcache_adopt(RadKvCache *c, int slot, const uint64_t *hashes, uint32_t n) {
    RadKvSeq *s = &c->seqs[slot];
    if (s->len || !n || !rad_kvcache_cached(c, hashes, rad_kvcache_first(c, n * c->block_size), n))
        return; /* only a fresh sequence starts on shared blocks, and on every one its next query reads */
    s->first = rad_kvcache_first(c, n * c->block_size);
    for (uint32_t k = 0; k < s->first; k++) s->blocks[k] = -1;
    for (uint32_t k = s->first; k < n; k++) {
        int32_t b = c->map[map_find(c, hashes[k])];
        if (c->ref[b]++ == 0) lru_unlink(c, b), c->n_free--;
        s->blocks[k] = b;
    }
    s->len = n * c->block_size;
}

void rad_kvcache_publish(RadKvCache *c, int slot, uint32_t b, uint64_t hash) {
    RadKvSeq *s = &c->seqs[slot];
    if ((b + 1) * c->block_size > s->len || b < s->first || !hash) return;
    int32_t blk = s->blocks[b];
    if (c->hash[blk] || map_find(c, hash) < c->map_cap) return;
    c->hash[blk] = hash;
    map_put(c, hash, blk);
}
