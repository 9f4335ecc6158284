/* Bump allocator (see arena.h). */
#include "arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

int flint_arena_init(flint_arena *a, size_t cap) {
    memset(a, 0, sizeof *a);
    void *p = NULL;
    if (posix_memalign(&p, 64, cap ? cap : 64) != 0) return -1;
    a->base = p;
    a->cap = cap;
    a->owns = 1;
    return 0;
}

void flint_arena_init_from(flint_arena *a, void *mem, size_t cap) {
    a->base = mem;
    a->cap = cap;
    a->used = 0;
    a->owns = 0;
}

void *flint_arena_alloc(flint_arena *a, size_t n, size_t align) {
    FLINT_ASSERT(align && (align & (align - 1)) == 0);
    uintptr_t cur = (uintptr_t)a->base + a->used;
    uintptr_t aligned = (cur + align - 1) & ~(uintptr_t)(align - 1);
    size_t off = (size_t)(aligned - (uintptr_t)a->base);
    FLINT_ASSERT(off <= a->cap && n <= a->cap - off);
    a->used = off + n;
    return (void *)aligned;
}

void flint_arena_reset(flint_arena *a) { a->used = 0; }

void flint_arena_free(flint_arena *a) {
    if (a->owns) free(a->base);
    memset(a, 0, sizeof *a);
}
