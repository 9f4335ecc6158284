/* Error values and fatal checks shared by every module (see status.h). */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int flint_err_set(flint_err *err, flint_code code, const char *fmt, ...) {
    if (!err) return -1;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int flint_err_prefix(flint_err *err, const char *fmt, ...) {
    if (!err) return -1;
    char head[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    size_t h = strlen(head);
    if (h >= sizeof err->msg) h = sizeof err->msg - 1;
    memcpy(err->msg, head, h);
    size_t rest = strnlen(old, sizeof old);
    if (rest > sizeof err->msg - 1 - h) rest = sizeof err->msg - 1 - h; /* long messages are cut */
    memcpy(err->msg + h, old, rest);
    err->msg[h + rest] = 0;
    if (err->code == FLINT_OK) err->code = FLINT_ERR_INTERNAL;
    return -1;
}

void flint_err_clear(flint_err *err) {
    if (!err) return;
    err->code = FLINT_OK;
    err->msg[0] = 0;
}

const char *flint_code_name(flint_code code) {
    switch (code) {
    case FLINT_OK: return "ok";
    case FLINT_ERR_IO: return "io";
    case FLINT_ERR_FORMAT: return "format";
    case FLINT_ERR_UNSUPPORTED: return "unsupported";
    case FLINT_ERR_INVALID: return "invalid";
    case FLINT_ERR_NOMEM: return "nomem";
    case FLINT_ERR_INTERNAL: return "internal";
    }
    return "unknown";
}

void flint_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "flint: internal error: assertion `%s' failed at %s:%d\n", expr, file, line);
    fflush(stderr);
    abort();
}

static void oom(size_t n) {
    fprintf(stderr, "flint: out of memory allocating %zu bytes\n", n);
    abort();
}

void *flint_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *flint_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size);
    return p;
}

void *flint_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

char *flint_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = flint_xmalloc(n);
    memcpy(p, s, n);
    return p;
}
