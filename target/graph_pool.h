/* A pool of captured CUDA graphs keyed by the bytes of a launch shape: the target's forwards, the
 * drafter's encodes and drafts, the engine's one-graph steps. A lookup compares keys (memcmp: the
 * caller zeroes its key structs before filling them), trying the last one found first, since
 * steps of one shape follow each other; a miss captures the shape's work from the caller's
 * enqueue function on its stream, and a full pool evicts its least recently used graph. Capture
 * time and the device memory the graphs took (free memory before a capture less after the
 * instantiation) are counted for the reports. CUDA builds only. */
#ifndef FLINT_TARGET_GRAPH_POOL_H
#define FLINT_TARGET_GRAPH_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Queues the work of one shape on the capturing stream; nonzero (with err set) on failure. */
typedef int (*flint_graph_enqueue_fn)(void *ctx, flint_err *err);

typedef struct flint_graph_pool {
    unsigned char *keys; /* [cap][key_size] */
    void **execs;        /* [cap] cudaGraphExec_t */
    uint64_t *used;      /* [cap] the tick of the last lookup that found it */
    size_t *bytes;       /* [cap] device memory its capture took */
    int cap, n, last;    /* last: the last entry found (< n, or 0) */
    size_t key_size;
    uint64_t tick;
    long n_captures;     /* since init, evicted ones included */
    double capture_s;
    size_t held_bytes;   /* of the graphs held now */
} flint_graph_pool;

void flint_graph_pool_init(flint_graph_pool *p, int cap, size_t key_size);
/* Destroys the held graphs (their in-flight launches complete first). */
void flint_graph_pool_free(flint_graph_pool *p);
/* The graph of key: found, or captured now on stream (a cudaStream_t) from enqueue(ctx). */
int flint_graph_pool_get(flint_graph_pool *p, const void *key, void *stream, flint_graph_enqueue_fn enqueue, void *ctx,
                         void **exec, flint_err *err);

#ifdef __cplusplus
}
#endif
#endif
