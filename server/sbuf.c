/* The server's growable byte buffer (server_internal.h): request texts, SSE chunks, /metrics.
 * Every size that reaches it is bounded by a configured limit (body size, context length, stream
 * buffer), so growth uses the aborting allocator. Kept apart so that the fuzz target links it
 * without the rest of the server. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

static void grow(flint_sbuf *b, size_t extra) {
    if (b->n + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra + 1) cap *= 2;
    b->p = flint_xrealloc(b->p, cap);
    b->cap = cap;
}

void flint_sbuf_add(flint_sbuf *b, const void *s, size_t n) {
    grow(b, n);
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void flint_sbuf_adds(flint_sbuf *b, const char *s) { flint_sbuf_add(b, s, strlen(s)); }

void flint_sbuf_addf(flint_sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    grow(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

void flint_sbuf_add_json_str(flint_sbuf *b, const char *s, size_t n) {
    grow(b, n + 2);
    b->p[b->n++] = '"';
    size_t run = 0; /* bytes copied as they are, flushed in one memcpy */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            run++;
            continue;
        }
        flint_sbuf_add(b, s + i - run, run);
        run = 0;
        char esc[8];
        switch (c) {
        case '"': flint_sbuf_add(b, "\\\"", 2); break;
        case '\\': flint_sbuf_add(b, "\\\\", 2); break;
        case '\n': flint_sbuf_add(b, "\\n", 2); break;
        case '\r': flint_sbuf_add(b, "\\r", 2); break;
        case '\t': flint_sbuf_add(b, "\\t", 2); break;
        default:
            snprintf(esc, sizeof esc, "\\u%04x", c);
            flint_sbuf_add(b, esc, 6);
        }
    }
    flint_sbuf_add(b, s + n - run, run);
    flint_sbuf_add(b, "\"", 1);
}

void flint_sbuf_free(flint_sbuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}


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
