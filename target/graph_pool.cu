/* The captured-graph pool (graph_pool.h): one implementation for the target's forwards, the
 * drafter's encodes and drafts, and the engine's one-graph steps. */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "target/graph_pool.h"

void flint_graph_pool_init(flint_graph_pool *p, int cap, size_t key_size) {
    memset(p, 0, sizeof *p);
    FLINT_ASSERT(cap > 0 && key_size > 0);
    p->cap = cap;
    p->key_size = key_size;
    p->keys = (unsigned char *)flint_xcalloc((size_t)cap, key_size);
    p->execs = (void **)flint_xcalloc((size_t)cap, sizeof *p->execs);
    p->used = (uint64_t *)flint_xcalloc((size_t)cap, sizeof *p->used);
    p->bytes = (size_t *)flint_xcalloc((size_t)cap, sizeof *p->bytes);
}

void flint_graph_pool_free(flint_graph_pool *p) {
    for (int i = 0; i < p->n; i++)
        if (p->execs[i]) cudaGraphExecDestroy((cudaGraphExec_t)p->execs[i]);
    free(p->keys);
    free(p->execs);
    free(p->used);
    free(p->bytes);
    memset(p, 0, sizeof *p);
}

/* free device memory, 0 when the query fails (which leaves no sticky error): the capture's cost is
 * free memory before it less after the instantiation, an estimate at the driver's granularity */
static size_t free_bytes(void) {
    size_t f = 0, total = 0;
    if (cudaMemGetInfo(&f, &total) != cudaSuccess) f = 0, (void)cudaGetLastError();
    return f;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int flint_graph_pool_get(flint_graph_pool *p, const void *key, void *stream, flint_graph_enqueue_fn enqueue, void *ctx,
                         void **exec, flint_err *err) {
    for (int j = 0; j < p->n; j++) {
        const int i = j == 0 ? p->last : j == p->last ? 0 : j;
        if (!memcmp(p->keys + (size_t)i * p->key_size, key, p->key_size)) {
            p->last = i;
            p->used[i] = ++p->tick;
            *exec = p->execs[i];
            return 0;
        }
    }
    /* capture first, so that a failure leaves the pool as it was */
    cudaStream_t s = (cudaStream_t)stream;
    const double t0 = now_s();
    const size_t free0 = free_bytes();
    cudaGraph_t graph = NULL;
    cudaError_t ce = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (ce != cudaSuccess) return flint_err_set(err, FLINT_ERR_IO, "graph capture: %s", cudaGetErrorString(ce));
    const int rc = enqueue(ctx, err);
    ce = cudaStreamEndCapture(s, &graph);
    if (rc || ce != cudaSuccess) {
        if (graph) cudaGraphDestroy(graph);
        return rc ? -1 : flint_err_set(err, FLINT_ERR_IO, "graph capture: %s", cudaGetErrorString(ce));
    }
    cudaGraphExec_t x = NULL;
    ce = cudaGraphInstantiate(&x, graph, 0);
    cudaGraphDestroy(graph);
    if (ce != cudaSuccess) return flint_err_set(err, FLINT_ERR_IO, "graph instantiate: %s", cudaGetErrorString(ce));
    const size_t free1 = free_bytes();
    int slot = p->n;
    if (slot == p->cap) { /* the least recently used */
        slot = 0;
        for (int i = 1; i < p->cap; i++)
            if (p->used[i] < p->used[slot]) slot = i;
        cudaGraphExecDestroy((cudaGraphExec_t)p->execs[slot]); /* an in-flight launch of it completes first */
        p->held_bytes -= p->bytes[slot];
    } else {
        p->n++;
    }
    memcpy(p->keys + (size_t)slot * p->key_size, key, p->key_size);
    p->execs[slot] = x;
    p->used[slot] = ++p->tick;
    p->bytes[slot] = free0 > free1 && free1 > 0 ? free0 - free1 : 0;
    p->held_bytes += p->bytes[slot];
    p->capture_s += now_s() - t0;
    p->n_captures++;
    p->last = slot;
    *exec = x;
    return 0;
}
