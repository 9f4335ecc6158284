/* The server's buffer of emitted tokens with their log-probabilities (server_internal.h), kept
 * apart so that the fuzz target links it without the rest of the server. */
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

/* ==== flint_tokbuf ==== */

void flint_tokbuf_push(flint_tokbuf *b, int n, const int32_t *ids, const float *lp, int n_top, const int32_t *top_ids,
                       const float *top_lp) {
    if (n <= 0) return;
    if (lp && b->n == 0) { /* the shape is fixed by the first tokens with logprobs */
        b->with_lp = 1;
        b->n_top = n_top;
    }
    if (b->n + n > b->cap || (b->with_lp && !b->lp)) {
        if (b->n + n > b->cap) b->cap = (b->n + n) * 2;
        b->ids = flint_xrealloc(b->ids, sizeof(int32_t) * (size_t)b->cap);
        if (b->with_lp) {
            b->lp = flint_xrealloc(b->lp, sizeof(float) * (size_t)b->cap);
            if (b->n_top) {
                b->top_ids = flint_xrealloc(b->top_ids, sizeof(int32_t) * (size_t)b->cap * (size_t)b->n_top);
                b->top_lp = flint_xrealloc(b->top_lp, sizeof(float) * (size_t)b->cap * (size_t)b->n_top);
            }
        }
    }
    memcpy(b->ids + b->n, ids, sizeof(int32_t) * (size_t)n);
    if (b->with_lp) {
        FLINT_ASSERT(lp != NULL && n_top == b->n_top);
        memcpy(b->lp + b->n, lp, sizeof(float) * (size_t)n);
        if (b->n_top) {
            memcpy(b->top_ids + (size_t)b->n * b->n_top, top_ids, sizeof(int32_t) * (size_t)n * (size_t)n_top);
            memcpy(b->top_lp + (size_t)b->n * b->n_top, top_lp, sizeof(float) * (size_t)n * (size_t)n_top);
        }
    }
    b->n += n;
}

void flint_tokbuf_move(flint_tokbuf *to, flint_tokbuf *from) {
    if (from->n)
        flint_tokbuf_push(to, from->n, from->ids, from->with_lp ? from->lp : NULL, from->n_top, from->top_ids,
                          from->top_lp);
    from->n = 0;
}

void flint_tokbuf_free(flint_tokbuf *b) {
    free(b->ids);
    free(b->top_ids);
    free(b->lp);
    free(b->top_lp);
    memset(b, 0, sizeof *b);
}
