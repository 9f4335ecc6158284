/* Paged KV block allocator (see target.h). A free list plus reference counts; block ids are
 * shared by every pool that stores one entry per committed position (target KV, drafter
 * context KV), so one allocation serves both. */
#include <stdlib.h>

#include "target/target.h"

struct flint_kv_alloc {
    int n_blocks;
    int n_free;
    int32_t *free_list; /* stack of free ids */
    int32_t *refs;      /* reference count per block */
};

flint_kv_alloc *flint_kv_alloc_new(int n_blocks) {
    FLINT_ASSERT(n_blocks > 0);
    flint_kv_alloc *a = flint_xcalloc(1, sizeof *a);
    a->n_blocks = n_blocks;
    a->free_list = flint_xmalloc(sizeof(int32_t) * (size_t)n_blocks);
    a->refs = flint_xcalloc((size_t)n_blocks, sizeof(int32_t));
    /* lowest ids are handed out first */
    for (int i = 0; i < n_blocks; i++) a->free_list[i] = n_blocks - 1 - i;
    a->n_free = n_blocks;
    return a;
}

void flint_kv_alloc_free(flint_kv_alloc *a) {
    if (!a) return;
    free(a->free_list);
    free(a->refs);
    free(a);
}

int flint_kv_alloc_free_count(const flint_kv_alloc *a) { return a->n_free; }

int32_t flint_kv_alloc_take(flint_kv_alloc *a) {
    if (a->n_free == 0) return -1;
    int32_t b = a->free_list[--a->n_free];
    FLINT_ASSERT(a->refs[b] == 0);
    a->refs[b] = 1;
    return b;
}

void flint_kv_alloc_ref(flint_kv_alloc *a, int32_t block) {
    FLINT_ASSERT(block >= 0 && block < a->n_blocks && a->refs[block] > 0);
    a->refs[block]++;
}

void flint_kv_alloc_release(flint_kv_alloc *a, int32_t block) {
    FLINT_ASSERT(block >= 0 && block < a->n_blocks && a->refs[block] > 0);
    if (--a->refs[block] == 0) a->free_list[a->n_free++] = block;
}

int flint_kv_alloc_refs(const flint_kv_alloc *a, int32_t block) {
    FLINT_ASSERT(block >= 0 && block < a->n_blocks);
    return a->refs[block];
}
