/* Prefix caching (issue: agent sessions resend a long shared prefix every turn). A full KV block
 * is named by XXH64 over its token ids seeded with its parent block's hash, so equal hashes mean
 * equal whole prefixes. The cache holds one reference on each block it knows; a block whose only
 * reference is the cache's can be evicted, least recently used first, and eviction never touches
 * a block a session uses. The drafter's context KV shares the block ids, so a hit serves both.
 * A 64-bit hash collision between different prefixes (about 1e-10 for 1e5 blocks) is accepted,
 * as vLLM's default does. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "verifier/engine_internal.h"

struct flint_prefix_cache {
    int n_blocks;
    uint32_t cap;       /* table slots, a power of two >= 2 n_blocks */
    uint64_t *keys;     /* [cap] */
    int32_t *vals;      /* [cap] block id, -1 empty, -2 deleted */
    uint64_t *hash_of;  /* [n_blocks] */
    unsigned char *in;  /* [n_blocks] cached */
    int32_t *prev, *next, head, tail; /* LRU list of cached blocks, head = least recent */
    int n_cached, n_deleted;
};

flint_prefix_cache *flint_prefix_new(int n_blocks) {
    flint_prefix_cache *c = flint_xcalloc(1, sizeof *c);
    c->n_blocks = n_blocks;
    c->cap = 16;
    while (c->cap < 2u * (uint32_t)n_blocks) c->cap *= 2;
    c->keys = flint_xcalloc(c->cap, sizeof *c->keys);
    c->vals = flint_xmalloc(sizeof *c->vals * c->cap);
    for (uint32_t i = 0; i < c->cap; i++) c->vals[i] = -1;
    c->hash_of = flint_xcalloc((size_t)n_blocks, sizeof *c->hash_of);
    c->in = flint_xcalloc((size_t)n_blocks, 1);
    c->prev = flint_xmalloc(sizeof(int32_t) * (size_t)n_blocks);
    c->next = flint_xmalloc(sizeof(int32_t) * (size_t)n_blocks);
    c->head = c->tail = -1;
    return c;
}

void flint_prefix_free(flint_prefix_cache *c) {
    if (!c) return;
    free(c->keys);
    free(c->vals);
    free(c->hash_of);
    free(c->in);
    free(c->prev);
    free(c->next);
    free(c);
}

uint64_t flint_prefix_hash(uint64_t parent, const int32_t *tokens, int n) {
    return XXH64(tokens, sizeof(int32_t) * (size_t)n, parent);
}

static uint32_t slot_of(const flint_prefix_cache *c, uint64_t h, int for_insert) {
    uint32_t i = (uint32_t)(h ^ (h >> 32)) & (c->cap - 1), del = UINT32_MAX;
    for (;;) {
        if (c->vals[i] == -1) return for_insert && del != UINT32_MAX ? del : i;
        if (c->vals[i] == -2) {
            if (del == UINT32_MAX) del = i;
        } else if (c->keys[i] == h) {
            return i;
        }
        i = (i + 1) & (c->cap - 1);
    }
}

static void lru_unlink(flint_prefix_cache *c, int32_t b) {
    if (c->prev[b] >= 0) c->next[c->prev[b]] = c->next[b];
    else c->head = c->next[b];
    if (c->next[b] >= 0) c->prev[c->next[b]] = c->prev[b];
    else c->tail = c->prev[b];
}

static void lru_push(flint_prefix_cache *c, int32_t b) {
    c->prev[b] = c->tail;
    c->next[b] = -1;
    if (c->tail >= 0) c->next[c->tail] = b;
    else c->head = b;
    c->tail = b;
}

int32_t flint_prefix_lookup(flint_prefix_cache *c, uint64_t h) {
    uint32_t i = slot_of(c, h, 0);
    if (c->vals[i] < 0) return -1;
    int32_t b = c->vals[i];
    lru_unlink(c, b);
    lru_push(c, b);
    return b;
}

/* Deleted slots lengthen probes and would in the end leave no empty slot: rebuild from the
 * cached blocks when they pile up. */
static void rebuild(flint_prefix_cache *c) {
    for (uint32_t i = 0; i < c->cap; i++) c->vals[i] = -1;
    for (int32_t b = c->head; b >= 0; b = c->next[b]) {
        uint32_t i = slot_of(c, c->hash_of[b], 1);
        c->keys[i] = c->hash_of[b];
        c->vals[i] = b;
    }
    c->n_deleted = 0;
}

void flint_prefix_insert(flint_prefix_cache *c, flint_kv_alloc *kv, uint64_t h, int32_t b) {
    if (c->in[b]) return; /* already named (by this very content) */
    if ((uint32_t)(c->n_cached + c->n_deleted + 1) * 2 > c->cap) rebuild(c);
    uint32_t i = slot_of(c, h, 0);
    if (c->vals[i] >= 0) return; /* the same prefix is cached in another block */
    i = slot_of(c, h, 1);
    c->keys[i] = h;
    c->vals[i] = b;
    c->hash_of[b] = h;
    c->in[b] = 1;
    c->n_cached++;
    flint_kv_alloc_ref(kv, b);
    lru_push(c, b);
}

int flint_prefix_evictable(const flint_prefix_cache *c, const flint_kv_alloc *kv) {
    int n = 0;
    for (int32_t b = c->head; b >= 0; b = c->next[b]) n += flint_kv_alloc_refs(kv, b) == 1;
    return n;
}

int flint_prefix_evict(flint_prefix_cache *c, flint_kv_alloc *kv, int want) {
    int n = 0;
    int32_t b = c->head;
    while (b >= 0 && n < want) {
        int32_t nx = c->next[b];
        if (flint_kv_alloc_refs(kv, b) == 1) {
            uint32_t i = slot_of(c, c->hash_of[b], 0);
            FLINT_ASSERT(c->vals[i] == b);
            c->vals[i] = -2;
            c->n_deleted++;
            c->in[b] = 0;
            c->n_cached--;
            lru_unlink(c, b);
            flint_kv_alloc_release(kv, b);
            n++;
        }
        b = nx;
    }
    return n;
}

int flint_prefix_cached_blocks(const flint_prefix_cache *c) { return c->n_cached; }
