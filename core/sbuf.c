/* A growable byte buffer shared by every module that builds text: chat prompts, JSON, API bodies,
 * SSE chunks, /metrics. Growth uses the aborting allocator: callers bound what reaches it (body
 * size, context length, stream buffer limits). */
#include "core/sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

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

void flint_sbuf_clear(flint_sbuf *b) {
    b->n = 0;
    if (b->p) b->p[0] = 0;
}

void flint_sbuf_free(flint_sbuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}
