/* Bump allocator: one allocation carved into many pointers (llama2.c / llm.c habit). Everything a
 * model or a step needs is sized up front, carved here, and freed at once with the arena. */
#ifndef FLINT_CORE_ARENA_H
#define FLINT_CORE_ARENA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flint_arena {
    unsigned char *base;
    size_t cap;
    size_t used;
    int owns;
} flint_arena;

/* Reserve cap bytes (64-byte aligned base). Returns -1 when the allocation fails. */
int flint_arena_init(flint_arena *a, size_t cap);
/* Use caller memory instead of allocating. */
void flint_arena_init_from(flint_arena *a, void *mem, size_t cap);
/* Carve n bytes aligned to `align` (a power of two). Asserts when the arena is too small:
 * sizes are computed before the arena is made, so running out is a bug. */
void *flint_arena_alloc(flint_arena *a, size_t n, size_t align);
#define flint_arena_new(a, type, count) ((type *)flint_arena_alloc((a), sizeof(type) * (count), 64))
void flint_arena_reset(flint_arena *a);
void flint_arena_free(flint_arena *a);

#ifdef __cplusplus
}
#endif
#endif
